"""The in-process snapshot's identity rows as dcgm-exporter writes its series: a time-sliced GPU
once per pod holding it (virtual GPUs on), a MIG GPU once per instance (flex mode).

The same expansions the exporter pages and the backfill make (simulator.vgpu_series,
simulator.mig_series), applied to the rows `SimSnapshots` builds, so detector tests on the
simulated path see the rows a collector sees on a real cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from observer.fleet.model import BoolArray, IntArray, StrArray
from simulator import mig_series, vgpu_series
from simulator.engine import Sample
from simulator.layout import Layout
from simulator.scenario import Scenario


@dataclass(frozen=True, slots=True)
class ExporterRows:
    """Per series row: the GPU row it repeats (into the snapshot's `rows`), its pod, and its
    MIG instance."""

    src: IntArray
    pod: IntArray
    """Index into the sample's pods, -1 for an unallocated GPU."""
    mig_instance: StrArray | None
    """`GPU_I_ID` per row ("" for a whole GPU); None when no GPU is MIG-partitioned."""
    mig_profile: StrArray | None
    on_mig: BoolArray | None


def exporter_rows(
    sc: Scenario, layout: Layout, latest: Sample, rows: np.ndarray, gpu_pod: np.ndarray, t: float
) -> ExporterRows | None:
    """The rows' expansion at `t`; None when nothing expands (one row per GPU, as before)."""
    instances = mig_series.instances_at(sc, layout, t)
    held = vgpu_series.holders(layout, latest.pods, latest.t) if sc.exporter.virtual_gpus else {}
    if not instances and not any(len(v) > 1 for v in held.values()):
        return None
    src: list[int] = []
    pod: list[int] = []
    for i, g in enumerate(rows.tolist()):
        own = int(gpu_pod[i])
        for k in held.get(g, [own]) if own >= 0 else [own]:
            src.append(i)
            pod.append(k)
    src_a = np.asarray(src, dtype=np.int32)
    pod_a = np.asarray(pod, dtype=np.int32)
    if not instances:
        return ExporterRows(src_a, pod_a, None, None, None)
    # one row per GPU instance, in mig_series.expand's order (ids as instances_at gives them)
    out_src: list[int] = []
    ids: list[str] = []
    profiles: list[str] = []
    mig: list[bool] = []
    for r, g in enumerate(rows[src_a].tolist()):
        inst = instances.get(g)
        for gi in inst[1] if inst is not None else [None]:
            out_src.append(r)
            ids.append("" if gi is None else str(gi))
            profiles.append("" if inst is None else inst[0])
            mig.append(inst is not None)
    at = np.asarray(out_src, dtype=np.int32)
    return ExporterRows(
        src_a[at],
        pod_a[at],
        np.array(ids, dtype=object),
        np.array(profiles, dtype=object),
        np.asarray(mig, dtype=bool),
    )
