"""The validation gate alone: which plans it weighs, and each verdict it can meet."""

from __future__ import annotations

from remediations.gates import Diagnosis, Outcome, Validation, validated
from remediations.playbooks import Plan
from remediations.types import QUARANTINE_LABEL, QUARANTINE_TAINT, Intent

T = 1_767_225_600.0
UNFENCE = Plan("unfence_gpu", "gpu/GPU-1", (Intent("unfence_device", "n1", {"rule": "r"}),),
               False, ("n1",), undo=True)  # fmt: skip


def _v(outcome: str, at: float, changed: float | None = T) -> Validation:
    return Validation(
        changed, "fence_gpu (action a1)", Diagnosis("gpu/GPU-1", outcome, at, "erin", "ok")
    )


def test_only_returns_are_weighed() -> None:
    fence = Plan("fence_gpu", "gpu/GPU-1", (Intent("fence_device", "n1", {}),), False, ("n1",))
    assert validated(fence, None).ok
    label = Plan("quarantine", "node/n1", (Intent("label", "n1", {"labels": {"x": "y"}}),), True)
    assert validated(label, None).ok
    for i in (
        Intent("uncordon", "n1", {"only_if_ours": True}),
        Intent("untaint", "n1", {"key": QUARANTINE_TAINT}),
        Intent("unlabel", "n1", {"keys": [QUARANTINE_LABEL]}),
    ):
        assert validated(Plan("uncordon", "node/n1", (i,), False), None).outcome is Outcome.DENY
    other = Intent("untaint", "n1", {"key": "team.example/x"})
    assert validated(Plan("x", "node/n1", (other,), False), None).ok


def test_each_verdict() -> None:
    assert validated(UNFENCE, _v("passed", T + 60)).ok
    waived = validated(UNFENCE, _v("waived", T + 60))
    assert waived.ok and "waived by erin" in waived.reason
    failed = validated(UNFENCE, _v("failed", T + 60))
    assert failed.outcome is Outcome.DENY and "stays out of service" in failed.reason
    old = validated(UNFENCE, _v("passed", T - 60))
    assert old.outcome is Outcome.DENY and "since fence_gpu (action a1)" in old.reason
    assert validated(UNFENCE, _v("passed", T - 60, changed=None)).ok  # nothing gpufleet did
    none = validated(UNFENCE, Validation(T, "fence_gpu", None))
    assert none.outcome is Outcome.DENY and "no diagnostic has passed" in none.reason
