"""Selectors, patches, the object store's resourceVersion rules and the simulation clock."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.clock import ManualWall, SimClock
from simulator.kube_api.object_store import Conflict, Expired, ObjectStore
from simulator.kube_api.query import (
    BadRequest,
    apply_patch,
    field_matcher,
    label_matcher,
)

POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "ml", "labels": {"app": "a", "tier": "x"}},
    "spec": {"nodeName": "n1", "unschedulable": True},
    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=a", True),
        ("app==a,tier=x", True),
        ("app!=a", False),
        ("app in (a,b)", True),
        ("tier notin (x)", False),
        ("app", True),
        ("!missing", True),
        ("!app", False),
        ("app in (b), tier", False),
        ("", True),
    ],
)
def test_label_selectors(selector: str, expected: bool) -> None:
    assert label_matcher(selector)(POD) is expected


def test_field_selectors() -> None:
    assert field_matcher("spec.nodeName=n1,metadata.namespace=ml")(POD)
    assert not field_matcher("spec.nodeName!=n1")(POD)
    assert field_matcher("spec.unschedulable=true")(POD)
    assert field_matcher("spec.missing=")(POD)
    with pytest.raises(BadRequest):
        field_matcher("nonsense")


def test_strategic_merge_patch_merges_conditions_by_type_and_deletes_nulls() -> None:
    patch = {
        "spec": {"unschedulable": None},
        "metadata": {"labels": {"tier": None, "new": "1"}},
        "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "X"}]},
    }
    out = apply_patch(POD, "application/strategic-merge-patch+json", patch)
    assert out["spec"] == {"nodeName": "n1"}
    assert out["metadata"]["labels"] == {"app": "a", "new": "1"}
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "False"}, {"type": "X"}]
    assert POD["spec"]["unschedulable"] is True  # the input is untouched
    taints = {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}
    again = apply_patch(out, "application/strategic-merge-patch+json", taints)
    assert again["spec"]["taints"] == [{"key": "k", "effect": "NoSchedule"}]


def test_merge_patch_replaces_lists_and_json_patch_ops() -> None:
    merged = apply_patch(POD, "application/merge-patch+json", {"status": {"conditions": []}})
    assert merged["status"]["conditions"] == []
    ops = [
        {"op": "test", "path": "/spec/nodeName", "value": "n1"},
        {"op": "add", "path": "/metadata/labels/a~1b", "value": "v"},
        {"op": "replace", "path": "/spec/nodeName", "value": "n2"},
        {"op": "remove", "path": "/status/conditions/0"},
        {"op": "copy", "from": "/spec/nodeName", "path": "/spec/copied"},
    ]
    out = apply_patch(POD, "application/json-patch+json", ops)
    assert out["metadata"]["labels"]["a/b"] == "v"
    assert out["spec"]["nodeName"] == "n2" and out["spec"]["copied"] == "n2"
    assert out["status"]["conditions"] == []
    with pytest.raises(BadRequest):
        apply_patch(
            POD,
            "application/json-patch+json",
            [{"op": "test", "path": "/spec/nodeName", "value": "zz"}],
        )
    with pytest.raises(BadRequest):
        apply_patch(POD, "application/apply-patch+yaml", {})


def test_store_versions_history_and_conflicts() -> None:
    store = ObjectStore(history=3)
    a = store.put("leases", {"metadata": {"name": "a", "namespace": "d"}})
    assert a["metadata"]["resourceVersion"] == "1"
    with pytest.raises(Conflict):
        store.put("leases", {"metadata": {"name": "a", "namespace": "d"}}, create=True)
    with pytest.raises(Conflict):
        store.put("leases", {"metadata": {"name": "a", "namespace": "d"}}, expect_rv="7")
    for i in range(3):
        store.put("leases", {"metadata": {"name": f"b{i}", "namespace": "d"}})
    assert [e.rv for e in store.events_since("leases", 1)] == [2, 3, 4]
    with pytest.raises(Expired):
        store.events_since("leases", 0)
    gone = store.delete("leases", "d", "a")
    assert gone is not None and gone["metadata"]["resourceVersion"] == "5"
    events, seen = store.wait("leases", 4, 0.01)
    assert [(e.type, e.rv) for e in events] == [("DELETED", 5)] and seen == 5
    assert store.changed_at("leases") == 5 and store.count("leases") == 3


def test_clock_maps_wall_to_scenario_time() -> None:
    wall = ManualWall(1000.0)
    clock = SimClock(50.0, speed=60.0, wall=wall)
    assert clock.scenario_time() == 50.0
    wall.advance(2)
    assert clock() == 170.0 and clock.now() == 1002.0
    assert clock.wall_of(170.0) == 1002.0
    with pytest.raises(ValueError):
        SimClock(0.0, speed=0)
