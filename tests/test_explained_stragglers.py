"""One cause, one incident: a straggler on a GPU gpu_throttle reports is folded into it."""

from __future__ import annotations

from detectors.explained import EXPLAINED_FOR, fold_explained
from detectors.findings import Finding, FindingKind, Severity

T0 = 1_800_000_000.0


def _throttle(gpu: str, t: float) -> Finding:
    return Finding(FindingKind.GPU_THROTTLE, Severity.WARNING, f"{gpu} throttled", t, t,
                   node="n1", gpu_uuid=gpu)  # fmt: skip


def _straggler(gpu: str, t: float) -> Finding:
    return Finding(FindingKind.STRAGGLER, Severity.WARNING, f"{gpu} paces ml/t", t, t,
                   node="n1", gpu_uuid=gpu, job="ml/t", evidence={"gap": 0.2})  # fmt: skip


def test_a_throttled_straggler_becomes_info_and_the_throttle_names_the_job() -> None:
    out, mem = fold_explained([_throttle("G1", T0), _straggler("G1", T0), _straggler("G2", T0)],
                              {}, T0)  # fmt: skip
    by = {(f.kind, f.gpu_uuid): f for f in out}
    st = by[(FindingKind.STRAGGLER, "G1")]
    assert st.severity == Severity.INFO and st.evidence["explained_by"] == "gpu_throttle"
    assert st.evidence["gap"] == 0.2  # the straggler's own evidence is kept
    th = by[(FindingKind.GPU_THROTTLE, "G1")]
    assert th.severity == Severity.WARNING and th.evidence["paces_job"] == "ml/t"
    assert th.summary.endswith("paces job ml/t")
    assert by[(FindingKind.STRAGGLER, "G2")].severity == Severity.WARNING  # nothing explains it
    assert dict(mem) == {"G1": T0}


def test_the_explanation_outlives_the_throttle_while_the_straggler_drains_then_ends() -> None:
    _, mem = fold_explained([_throttle("G1", T0)], {}, T0)
    later = T0 + EXPLAINED_FOR - 30.0
    out, mem = fold_explained([_straggler("G1", later)], mem, later)
    assert out[0].severity == Severity.INFO
    much_later = T0 + EXPLAINED_FOR + 30.0
    out, mem = fold_explained([_straggler("G1", much_later)], mem, much_later)
    assert out[0].severity == Severity.WARNING and dict(mem) == {}
