"""Every shipped policy rule can fire: each (kind, severity) a rule lists is one a registered
detector can report (issue 11). A rule that can never match hides a gap in the policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from detectors.findings import FindingKind, Severity
from detectors.registry import registry
from remediations.policy import load_policy

POLICIES = sorted((Path(__file__).parent.parent / "remediations" / "policies").glob("*.yaml"))


def _producible() -> frozenset[tuple[FindingKind, Severity]]:
    out: set[tuple[FindingKind, Severity]] = set()
    for spec in registry().values():
        out |= spec.produces
    return frozenset(out)


def test_every_detector_declares_what_it_can_report() -> None:
    for name, spec in registry().items():
        assert spec.kinds and spec.severities, name
    kinds = {k for k, _ in _producible()}
    assert kinds == set(FindingKind)


def test_the_policies_are_found() -> None:
    assert {p.name for p in POLICIES} >= {"default.yaml", "notify-only.yaml"}


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
def test_every_rule_of_a_shipped_policy_can_fire(path: Path) -> None:
    producible = _producible()
    problems = []
    for i, rule in enumerate(load_policy(path).rules):
        kinds = rule.match.kinds or list(FindingKind)
        severities = rule.match.severities or list(Severity)
        for kind in kinds:
            can = [s for s in severities if (kind, s) in producible]
            missing = [s.value for s in severities if (kind, s) not in producible]
            if rule.match.severities and missing:
                problems.append(
                    f"rules[{i}] {rule.name}: no detector reports {kind.value} {missing}"
                )
            elif not can:
                problems.append(f"rules[{i}] {rule.name}: no detector reports {kind.value}")
    assert problems == [], f"{path.name}: " + "; ".join(problems)


def test_the_check_catches_a_rule_that_cannot_fire() -> None:
    assert (FindingKind.GPU_INTERCONNECT, Severity.CRITICAL) not in _producible()
    assert (FindingKind.GPU_INTERCONNECT, Severity.WARNING) in _producible()
