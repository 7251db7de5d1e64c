"""PodDisruptionBudgets in the simulated API as in policy/v1: created through the API, selected
by matchLabels and matchExpressions (an empty selector selects nothing), percentages rounded up,
`unhealthyPodEvictionPolicy`, and 429 while the disruption controller has not yet observed a
budget's generation."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from harness.k8s_sim import Sim, present, running_sim


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path) as s:
        yield s


@pytest.fixture
def api(sim: Sim) -> Iterator[client.ApiClient]:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
    cfg.retries = 0
    with client.ApiClient(cfg) as a:
        yield a


def _evict(api: client.ApiClient, ns: str, name: str) -> tuple[int, str]:
    body: Any = {"metadata": {"name": name, "namespace": ns}}
    try:
        client.CoreV1Api(api).create_namespaced_pod_eviction(name, ns, body)
    except client.ApiException as exc:
        msg = json.loads(present(exc.body, "body"))
        causes = (msg.get("details") or {}).get("causes") or [{}]
        return int(exc.status or 0), str(causes[0].get("message", msg["message"]))
    return 201, ""


def _pdb(name: str, selector: dict[str, Any], **spec: Any) -> Any:
    return {"metadata": {"name": name}, "spec": {"selector": selector, **spec}}


def test_expressions_percentages_and_observed_generation(sim: Sim, api: client.ApiClient) -> None:
    policy = client.PolicyV1Api(api)
    sel = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["serve"]}]}
    created = policy.create_namespaced_pod_disruption_budget(
        "serving", _pdb("serve", sel, minAvailable="50%")
    )
    assert present(created.metadata, "metadata").generation == 1
    # not yet observed by the disruption controller: every eviction under it waits
    assert _evict(api, "serving", "serve-0") == (
        429, "The disruption budget serve is still being processed by the server."
    )  # fmt: skip
    sim.advance(2)
    st = present(policy.read_namespaced_pod_disruption_budget("serve", "serving").status, "status")
    assert (st.observed_generation, st.expected_pods, st.desired_healthy) == (1, 2, 1)
    assert st.disruptions_allowed == 1  # 50% of 2 rounds up to 1 that must stay
    assert _evict(api, "serving", "serve-0")[0] == 201
    code, why = _evict(api, "serving", "serve-1")
    assert code == 429 and "needs 1 healthy pods" in why
    # a spec change is a new generation: 429 again until it is observed
    policy.patch_namespaced_pod_disruption_budget("serve", "serving", {"spec": {"minAvailable": 0}})
    after = policy.read_namespaced_pod_disruption_budget("serve", "serving")
    assert present(after.metadata, "metadata").generation == 2
    assert "still being processed" in _evict(api, "serving", "serve-1")[1]
    sim.advance(2)
    assert _evict(api, "serving", "serve-1")[0] == 201


def test_an_empty_selector_selects_no_pod(sim: Sim, api: client.ApiClient) -> None:
    policy = client.PolicyV1Api(api)
    policy.create_namespaced_pod_disruption_budget("serving", _pdb("all", {}, minAvailable="100%"))
    sim.advance(2)
    st = present(policy.read_namespaced_pod_disruption_budget("all", "serving").status, "status")
    assert st.expected_pods == 0  # policy/v1: {} matches nothing (v1beta1 matched every pod)
    assert _evict(api, "serving", "serve-0")[0] == 201


def test_unhealthy_pod_eviction_policy(sim: Sim, api: client.ApiClient) -> None:
    """A Running pod that is not Ready, under a budget that is not met: refused with the default
    IfHealthyBudget, allowed with AlwaysAllow."""
    policy = client.PolicyV1Api(api)
    sel = {"matchLabels": {"app": "serve"}}
    policy.create_namespaced_pod_disruption_budget("serving", _pdb("serve", sel, minAvailable=2))
    sim.advance(2)
    pod = sim.cluster.store.get("pods", "serving", "serve-1")
    assert pod is not None
    conds = [{**c, "status": "False"} if c["type"] == "Ready" else c
             for c in pod["status"]["conditions"]]  # fmt: skip
    sim.cluster.store.put("pods", {**pod, "status": {**pod["status"], "conditions": conds}})
    sim.advance(1)
    code, why = _evict(api, "serving", "serve-1")
    assert code == 429, why
    policy.patch_namespaced_pod_disruption_budget(
        "serve", "serving", {"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}}
    )
    sim.advance(2)
    assert _evict(api, "serving", "serve-1")[0] == 201
    assert _evict(api, "serving", "serve-0")[0] == 429  # a Ready pod still needs the budget


BAD_SPECS: dict[str, tuple[dict[str, Any], dict[str, Any], list[tuple[str, str]]]] = {
    "both set": (
        {"matchLabels": {"app": "x"}}, {"minAvailable": 1, "maxUnavailable": 1},
        [("spec", "minAvailable and maxUnavailable cannot be both set")],
    ),
    "negative": (
        {"matchLabels": {"app": "x"}}, {"maxUnavailable": -1},
        [("spec.maxUnavailable", "must be greater than or equal to 0")],
    ),
    "not a percent": (
        {"matchLabels": {"app": "x"}}, {"minAvailable": "half"},
        [("spec.minAvailable", "a valid percent string must be a numeric string")],
    ),
    "over 100 %": (
        {"matchLabels": {"app": "x"}}, {"maxUnavailable": "150%"},
        [("spec.maxUnavailable", "must not be greater than 100%")],
    ),
    "bad operator": (
        {"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["x"]}]},
        {"minAvailable": 1},
        [("spec.selector.matchExpressions[0].operator", "not a valid selector operator")],
    ),
    "In without values": (
        {"matchExpressions": [{"key": "app", "operator": "In"}]}, {"minAvailable": 1},
        [("spec.selector.matchExpressions[0].values", "must be specified when `operator`")],
    ),
    "Exists with values": (
        {"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]},
        {"minAvailable": 1},
        [("spec.selector.matchExpressions[0].values", "Forbidden: may not be specified")],
    ),
    "bad label value": (
        {"matchLabels": {"app": "-x-"}}, {"minAvailable": 1},
        [("spec.selector.matchLabels", "Invalid value: \"-x-\"")],
    ),
    "unknown eviction policy": (
        {"matchLabels": {"app": "x"}}, {"minAvailable": 1, "unhealthyPodEvictionPolicy": "Never"},
        [("spec.unhealthyPodEvictionPolicy", 'supported values: "IfHealthyBudget", "AlwaysAllow"')],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_SPECS))
def test_an_invalid_budget_is_refused_with_its_causes(api: client.ApiClient, case: str) -> None:
    selector, spec, want = BAD_SPECS[case]
    policy = client.PolicyV1Api(api)
    with pytest.raises(client.ApiException) as err:
        policy.create_namespaced_pod_disruption_budget("serving", _pdb("bad", selector, **spec))
    assert err.value.status == 422
    body = json.loads(present(err.value.body, "body"))
    assert body["reason"] == "Invalid" and body["details"]["kind"] == "PodDisruptionBudget"
    assert body["message"].startswith('PodDisruptionBudget.policy "bad" is invalid: ')
    causes = [(c["field"], c["message"]) for c in body["details"]["causes"]]
    for field, says in want:
        assert any(f == field and says in m for f, m in causes), causes
    stored = policy.list_namespaced_pod_disruption_budget("serving").items
    assert "bad" not in [p.metadata.name for p in stored if p.metadata is not None]


def test_a_patch_that_would_make_a_budget_invalid_is_refused(api: client.ApiClient) -> None:
    policy = client.PolicyV1Api(api)
    policy.create_namespaced_pod_disruption_budget(
        "serving", _pdb("ok", {"matchLabels": {"app": "x"}}, minAvailable="50%")
    )
    with pytest.raises(client.ApiException) as err:
        policy.patch_namespaced_pod_disruption_budget(
            "ok", "serving", {"spec": {"maxUnavailable": 1}}
        )
    assert err.value.status == 422
    kept = policy.read_namespaced_pod_disruption_budget("ok", "serving")
    assert kept.spec is not None and kept.spec.max_unavailable is None  # nothing lost or half-set
