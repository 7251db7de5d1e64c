"""Streaming a simulated time range to OpenMetrics text for `promtool tsdb create-blocks-from`.

OpenMetrics wants each metric family's samples together (families not interleaved), but the
engine produces one time step at a time; so each family is spooled to its own temporary file
and the files are concatenated at the end, then `# EOF`. Lines are built per column with
str.join, which keeps a 10k-GPU, 30-minute backfill to tens of seconds.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from observer.fleet.catalog import METRICS, STEPS_METRIC, XID_COUNT_METRIC, Kind
from observer.fleet.field_presence import SHIPPED_DEFAULT_FIELDS
from observer.fleet.model import BoolArray, IntArray
from simulator import mig_series, vgpu_series
from simulator.device_health import DeviceFault, device_faults, gpu_allocatable_at, unhealthy_at
from simulator.engine import XID_COUNT_WINDOW, FleetSimulator, Sample
from simulator.kube_series import KUBE_HELP, STEPS_HELP, kube_state_series, steps_series
from simulator.layout import SimPod
from simulator.series import (
    FLOAT_FAMILIES,
    POD_LABEL_LAYOUTS,
    GpuLabelCache,
    exporter_target_labels,
    sample_lines,
)
from simulator.xid_series import XID_COUNT_HELP, count_kind, count_lines, gauge_labels

DCGM_JOB = "dcgm-exporter"
DCGM_PORT = 9400
KSM_JOB = "kube-state-metrics"
KSM_INSTANCE = "kube-state-metrics:8080"
STEPS_JOB = "training-metrics"
XID_GAUGE = "DCGM_FI_DEV_XID_ERRORS"


@dataclass(frozen=True, slots=True)
class WriteStats:
    steps: int
    """Time steps written (scrape-gap steps are skipped and not counted)."""
    samples: int
    bytes: int
    seconds: float

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else math.inf


@dataclass(frozen=True, slots=True)
class _Family:
    name: str
    """Family name in the TYPE line (a counter's name without `_total`)."""
    kind: str
    help: str


def _om_family(sample_name: str, kind: Kind | str, help_: str) -> _Family:
    if str(kind) == "counter":
        if sample_name.endswith("_total"):
            return _Family(sample_name.removesuffix("_total"), "counter", help_)
        return _Family(sample_name, "unknown", help_)  # OpenMetrics counters must end in _total
    return _Family(sample_name, "gauge", help_)


def timestamps(start: float, end: float, step: float) -> list[float]:
    """start, start+step, ... up to and including end."""
    count = math.floor((end - start) / step + 1e-9) + 1
    return [start + k * step for k in range(max(0, count))]


class OpenMetricsWriter:
    """Writes `sim` over a time range: DCGM per GPU, `up`, kube-state-metrics, training steps."""

    def __init__(
        self,
        sim: FleetSimulator,
        *,
        pods_at: Callable[[float], Sequence[SimPod]] | None = None,
        kube: bool = True,
        pod_labels: str = "direct",
        shipped_fields_only: bool = False,
    ) -> None:
        """`pod_labels`: where DCGM series carry the workload (simulator.series.POD_LABEL_LAYOUTS);
        `exported` and `none` also give every DCGM and `up` series the exporter pod's own
        target labels, as Prometheus' Kubernetes service discovery does. `shipped_fields_only`:
        only the fields dcgm-exporter's shipped counters file turns on
        (observer.fleet.field_presence.SHIPPED_DEFAULT_FIELDS): no ECC, retired-page or NVLink error
        counters, no throttle reasons."""
        if pod_labels not in POD_LABEL_LAYOUTS:
            raise ValueError(
                f"pod_labels: expected one of {POD_LABEL_LAYOUTS} (got {pod_labels!r})"
            )
        self.sim = sim
        self.metrics = tuple(
            m for m in METRICS if not shipped_fields_only or m.name in SHIPPED_DEFAULT_FIELDS
        )
        self.pods_at = pods_at
        self.kube = kube
        nodes = [sim.layout.nodes[int(i)].name for i in sim.layout.gpu_node]
        target = exporter_target_labels if pod_labels != "direct" else (lambda _node: "")
        extra = [f',job="{DCGM_JOB}",instance="{n}:{DCGM_PORT}"{target(n)}' for n in nodes]
        self._labels = GpuLabelCache(sim.layout, extra, pod_labels, sim.scenario.exporter.hostname)
        self._up = [
            f'job="{DCGM_JOB}",instance="{n.name}:{DCGM_PORT}"{target(n.name)}'
            for n in sim.layout.nodes
        ]
        self._kube_cache: tuple[object, dict[str, list[str]]] | None = None
        self._device_faults: tuple[DeviceFault, ...] | None = None

    def families(self) -> dict[str, _Family]:
        """Sample name -> family, in file order."""
        fam = {m.name: _om_family(m.name, m.exposed_kind, m.help) for m in self.metrics}
        exp = self.sim.scenario.exporter
        if exp.xid_count:
            fam[XID_COUNT_METRIC] = _om_family(XID_COUNT_METRIC, count_kind(exp), XID_COUNT_HELP)
        fam[STEPS_METRIC] = _om_family(STEPS_METRIC, "counter", STEPS_HELP)
        fam["up"] = _Family("up", "gauge", "Whether the scrape target answered.")
        if self.kube:
            fam.update({k: _Family(k, "gauge", h) for k, h in KUBE_HELP.items()})
        return fam

    def write(
        self,
        path: str | Path,
        start: float | None = None,
        end: float | None = None,
        step: float | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> WriteStats:
        sc = self.sim.scenario
        times = timestamps(
            sc.start if start is None else start,
            sc.end if end is None else end,
            sc.scrape_interval if step is None else step,
        )
        out = Path(path)
        fams = self.families()
        began = time.perf_counter()
        spool_dir = Path(tempfile.mkdtemp(prefix=".om-spool-", dir=out.parent))
        try:
            spools = {
                k: open(spool_dir / f"{i}.txt", "w", buffering=1 << 20)  # noqa: SIM115
                for i, k in enumerate(fams)
            }
            try:
                written, samples = 0, 0
                for done, t in enumerate(times, 1):
                    n = self._write_step(t, spools)
                    written += n > 0
                    samples += n
                    if progress is not None:
                        progress(done, len(times))
            finally:
                for f in spools.values():
                    f.close()
            with open(out, "w", buffering=1 << 20) as dst:
                for i, (_name, fam) in enumerate(fams.items()):
                    dst.write(f"# HELP {fam.name} {fam.help}\n# TYPE {fam.name} {fam.kind}\n")
                    with open(spool_dir / f"{i}.txt") as src:
                        shutil.copyfileobj(src, dst, 1 << 20)
                dst.write("# EOF\n")
        finally:
            shutil.rmtree(spool_dir, ignore_errors=True)
        elapsed = time.perf_counter() - began
        return WriteStats(written, samples, out.stat().st_size, elapsed)

    def _write_step(self, t: float, spools: Mapping[str, IO[str]]) -> int:
        pods = self.pods_at(t) if self.pods_at is not None else None
        s = self.sim.sample(t, pods)
        if not s.scrape_ok:
            return 0
        ts = f" {t:.3f}\n"
        labels = self._labels.labels(s.gpu_pod, s.pods)
        count = 0
        exp = self.sim.scenario.exporter
        rows: IntArray | None = None
        if exp.virtual_gpus:  # one series per pod on a time-sliced GPU (simulator.vgpu_series)
            held = vgpu_series.holders(self.sim.layout, s.pods, t)
            labels, rows = vgpu_series.expand(
                labels, range(len(labels)), s.gpu_pod, s.pods, held, self._labels.pod_labels
            )
        instances = mig_series.instances_at(self.sim.scenario, self.sim.layout, t)
        on_mig: BoolArray | None = None
        if instances:  # MIG GPUs: one series per GPU instance (simulator.mig_series)
            gpus = range(len(labels)) if rows is None else rows.tolist()
            labels, inst_rows, on_mig = mig_series.expand(labels, gpus, instances)
            rows = inst_rows if rows is None else rows[inst_rows]
        for m in self.metrics:
            values = s.metrics[m.name] if rows is None else s.metrics[m.name][rows]
            if on_mig is not None and m.name in mig_series.UNSUPPORTED_ON_MIG:
                values = np.where(on_mig, np.nan, values)
            labs = gauge_labels(labels, values, exp) if m.name == XID_GAUGE else labels
            spools[m.name].write(
                sample_lines(m.name, labs, values, m.name not in FLOAT_FAMILIES, ts)
            )
            count += int(np.count_nonzero(~np.isnan(values)))
        if exp.xid_count:
            present = s.present if rows is None else s.present[rows]
            text, n = count_lines(
                XID_COUNT_METRIC, labels, present.tolist(), s.xid_counts,
                range(len(labels)) if rows is None else rows.tolist(), exp, XID_COUNT_WINDOW,
                int(t * 1000), ts,
            )  # fmt: skip
            spools[XID_COUNT_METRIC].write(text)
            count += n
        steps = steps_series(s)
        spools[STEPS_METRIC].write(
            "".join(f'{STEPS_METRIC}{{{lab},job="{STEPS_JOB}"}} {int(v)}{ts}' for lab, v in steps)
        )
        up = s.exporter_up.astype(np.int64).tolist()
        up_lines = [f"up{{{lab}}} {u}{ts}" for lab, u in zip(self._up, up, strict=True)]
        if self.kube:
            up_lines.append(f'up{{job="{KSM_JOB}",instance="{KSM_INSTANCE}"}} 1{ts}')
            for name, heads in self._kube_lines(s).items():
                spools[name].write("".join([f"{h}{ts}" for h in heads]))
                count += len(heads)
        spools["up"].write("".join(up_lines))
        return count + len(steps) + len(up_lines)

    def _kube_lines(self, s: Sample) -> dict[str, list[str]]:
        """kube-state-metrics lines without timestamps, rebuilt only when the pod set or the
        device plugin's allocatable GPUs change."""
        if self._device_faults is None:
            self._device_faults = device_faults(self.sim.scenario, self.sim.layout)
        pods = tuple(i for i, p in enumerate(s.pods) if p.start <= s.t < (p.end or math.inf))
        key = (pods, tuple(sorted(unhealthy_at(self._device_faults, s.t))))
        if self._kube_cache is None or self._kube_cache[0] != key:
            extra = f',job="{KSM_JOB}",instance="{KSM_INSTANCE}"'
            alloc = gpu_allocatable_at(self._device_faults, self.sim.layout, s.t)
            series = kube_state_series(
                s, self.sim.layout.nodes, cluster=self.sim.scenario.cluster, gpu_allocatable=alloc
            )
            lines = {
                name: [f"{name}{{{lab}{extra}}} {int(v)}" for lab, v in rows]
                for name, rows in series.items()
            }
            self._kube_cache = (key, lines)
        return self._kube_cache[1]
