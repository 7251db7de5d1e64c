"""The one policy of the service tests: it writes to Kubernetes (generous budgets for a 4-node
fleet, a short cooldown). Issue 11's shadow mode joins here: add `actuation: live` once."""

from __future__ import annotations

from typing import Any

from remediations.policy import Policy, policy_from_dict

QUARANTINE_CRITICAL: dict[str, Any] = {
    "name": "quarantine-critical",
    "match": {"kinds": ["gpu_xid", "gpu_memory"], "severities": ["critical"]},
    "playbook": "quarantine",
    "mode": "auto",
}


def live_policy_dict(rules: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "version": 1,
        "actuation": "live",
        "gates": {
            "blast_radius": {"max_nodes": 4, "max_percent_of_pool": 100},
            "attempts": {"cooldown": "1m"},
        },
        "rules": list(rules or []),
    }


def live_policy(rules: list[dict[str, Any]] | None = None) -> Policy:
    return policy_from_dict(live_policy_dict(rules), "test-policy")
