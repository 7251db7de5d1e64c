"""Range replays from raw samples: fetch each chunk's samples once, evaluate every step locally.

Asking Prometheus to evaluate the instant cycle's 21 queries at every step of a day costs it
minutes, and building each step from JSON vectors costs the client more. A replay instead asks,
per chunk, a few instant queries on range selectors (`{__name__=~"A|B"}[65m]` at the chunk's
end: every raw sample with its own time, nothing evaluated) and derives each step's answers with
numpy (observer.prometheus.replay.chunk_grids), with the server's selector semantics: its lookback
delta (from
`/api/v1/status/flags`, or given) and whether its windows are left-open (Prometheus 3) or
closed (2.x), found by a one-line probe. The fetch reaches back `max(lookback, window)` before
the chunk so its first steps see what an instant query would; the next chunk is fetched while
the current one is stepped through.

Known difference from instant cycles: staleness markers (a scraped series that disappeared)
are not part of raw answers, so such a series keeps answering until the lookback passes, as
backfilled data always does; the cycle's rules (newest pod, sample age) are made for that.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from observer.fleet.catalog import STEPS_METRIC, XID_COUNT_METRIC
from observer.prometheus.assemble import drop_partial, interval_from
from observer.prometheus.client import PrometheusClient, QueryFailed, Seen
from observer.prometheus.memory import CounterMemory, PromMemory
from observer.prometheus.parse import present_families, workload_labels
from observer.prometheus.plan import (
    IDENTITY_LABELS,
    SPARSE_COUNTERS,
    PromSettings,
    value_groups,
)
from observer.prometheus.replay.chunk_grids import (
    RawMemory,
    Timing,
    identity,
    increases,
    pod_steps,
    series_keys,
    split_by_name,
    values,
    xid_counts,
)
from observer.prometheus.replay.matrix import LabelKey, RawBlock, carry
from observer.prometheus.replay.step_grid import newest
from observer.prometheus.replay.step_metrics import step_metrics
from observer.prometheus.replay.steps import Chunk, Selected
from observer.prometheus.replay.workers import WorkerPool, fetch_block
from observer.snapshot.cycle_stats import QueryStat
from observer.snapshot.inputs import GpuColumns
from observer.snapshot.kube_records import (
    KSM_FAMILIES,
    KSM_GPU_FAMILIES,
    KSM_GPU_RESOURCE,
    KSM_STATUS_FAMILIES,
)


@dataclass(frozen=True, slots=True)
class RawQuery:
    name: str
    selector: str
    """A selector without the range; `[span]` is appended per chunk."""
    essential: bool = False


def raw_plan(s: PromSettings) -> tuple[RawQuery, ...]:
    """The selectors a chunk reads: the cycle's value groups (the inventory's is essential),
    the error counters, XID counts, training steps, `up` and kube-state-metrics (with each
    node's `nvidia.com/gpu` capacity and allocatable, selected by `resource`)."""
    out: list[RawQuery] = []
    groups = [*value_groups(s), SPARSE_COUNTERS]
    if not any(s.inventory_metric in g for g in groups):
        groups.insert(0, (s.inventory_metric,))
    for i, g in enumerate(groups):
        name = "raw:sparse" if g is SPARSE_COUNTERS else f"raw:values:{i}"
        sel = '{__name__=~"' + "|".join(g) + '"}'
        out.append(RawQuery(name, sel, essential=s.inventory_metric in g))
    ksm = f",{s.ksm_matchers}" if s.ksm_matchers else ""
    kube = "|".join((*KSM_FAMILIES, *KSM_STATUS_FAMILIES))
    out += [
        RawQuery("raw:xid", XID_COUNT_METRIC),
        RawQuery("raw:steps", STEPS_METRIC),
        RawQuery("raw:up", s.up_selector),
        RawQuery("raw:kube", f'{{__name__=~"{kube}"{ksm}}}'),
        RawQuery(
            "raw:kube_gpus",
            f'{{__name__=~"{"|".join(KSM_GPU_FAMILIES)}",resource="{KSM_GPU_RESOURCE}"{ksm}}}',
        ),
    ]
    return tuple(out)


def memory_from(prom: PromMemory, counters: CounterMemory) -> RawMemory:
    """The cold cycle's memory (observer.prometheus.memory) in the replay's form, with an empty
    counter memory (`counters`: the replay's first step seeds it, as a cold cycle does)."""
    gpus = {
        key: (tuple(str(m.get(name, "")) for name in IDENTITY_LABELS), seen)
        for key, (m, seen) in prom.gpus.items()
    }
    return RawMemory(prom.window, counters, gpus, dict(prom.node_last), prom.interval)


Runner = Callable[
    [Callable[[RawQuery], tuple[RawBlock, Seen]], Sequence[RawQuery]],
    tuple[dict[str, RawBlock | None], list[QueryStat], list[str]],
]
"""observer.prometheus.collector.PrometheusCollector._run: the queries concurrently, failures
judged."""


@dataclass(frozen=True, slots=True)
class Fetched:
    c0: float
    c1: float
    blocks: dict[str, RawBlock | None]
    stats: list[QueryStat]
    problems: list[str]
    families: frozenset[str] | None


class RawReplay:
    """Chunks of a replay: fetched ahead on a thread (the samples parsed in `workers` worker
    processes, 0: on that thread), then turned into `Chunk` grids."""

    def __init__(
        self,
        s: PromSettings,
        client: PrometheusClient,
        run: Runner,
        names: Callable[[float, float], list[object]],
        lookback: float,
        left_open: bool,
        workers: int = 2,
        exporter_pods: Collection[tuple[str, str]] = (),
    ) -> None:
        self.exporter_pods = frozenset(exporter_pods)
        """(namespace, pod) of the exporters themselves: never a GPU's workload."""
        self.s = s
        self.client = client
        self.run = run
        self.names = names
        self.lookback = lookback
        self.left_open = left_open
        self.plan = raw_plan(s)
        self._ahead = ThreadPoolExecutor(1, "raw-ahead")
        self._procs = WorkerPool(workers) if workers > 0 else None
        self._last: dict[str, RawBlock] = {}
        """The previous chunk's blocks (its reach-back is the next chunk's)."""
        self._last_keys: dict[str, list[LabelKey]] = {}
        """Label keys of those of `_last`'s blocks that `carry` made (matrix.LabelKey)."""
        self._prev_end: float | None = None

    def close(self) -> None:
        self._ahead.shutdown(wait=True, cancel_futures=True)
        if self._procs is not None:
            self._procs.close()

    def _fetch(self, c0: float, c1: float) -> Fetched:
        """The chunk's samples from (c0 - reach) to c1. What the previous chunk already read
        of that reach-back is carried over, not fetched again."""
        reach_ms = round(max(self.lookback, self.s.window) * 1000)
        c0_ms, c1_ms = round(c0 * 1000), round(c1 * 1000)
        last = self._last if self._prev_end is not None else {}
        last_keys = self._last_keys if self._prev_end is not None else {}
        keys: dict[str, list[LabelKey]] = {}
        prev_ms = round((self._prev_end or 0.0) * 1000)

        def ask(q: RawQuery) -> tuple[RawBlock, Seen]:
            prev = last.get(q.name)
            if prev is not None:  # (prev_end, c1]: the range is closed on 2.x, open on 3.x
                span_ms = c1_ms - prev_ms - (0 if self.left_open else 1)
            else:
                span_ms = c1_ms - c0_ms + reach_ms
            selector = f"{q.selector}[{span_ms}ms]"
            if self._procs is None:
                block, seen, _ = fetch_block(self.client, selector, c1)
            else:
                block, seen, _ = self._procs.fetch(self.s, selector, c1)
            if q.name in _WORKLOAD_BLOCKS or q.name.startswith("raw:values:"):
                block = self._workload(block)
            if prev is None:
                return block, seen
            block, keys[q.name] = carry(prev, c0_ms - reach_ms, block, last_keys.get(q.name))
            return block, seen

        blocks, stats, problems = self.run(ask, self.plan)
        blocks = drop_partial(blocks, stats)  # a partial sparse fetch counts as failed
        self._last = {name: b for name, b in blocks.items() if b is not None}
        self._last_keys = {name: keys[name] for name in self._last if name in keys}
        self._prev_end = c1
        families: frozenset[str] | None
        try:
            names = self.names(c0 - self.s.names_lookback, c1)
            families = frozenset(present_families(names))
        except QueryFailed as exc:
            problems.append(f"query families failed: {exc}")
            families = None
        return Fetched(c0, c1, blocks, stats, problems, families)

    def _workload(self, block: RawBlock) -> RawBlock:
        """The block with workload pod labels (observer.prometheus.parse.workload_labels)."""
        labels, _ = workload_labels(block.labels, self.s.pod_labels, self.exporter_pods)
        return dataclasses.replace(block, labels=labels)

    def chunks(self, spans: Sequence[tuple[float, float]]) -> Iterator[Fetched]:
        """Fetched chunks in order, the next one on its way while the caller uses this one."""
        pending: Future[Fetched] | None = None
        for i, (c0, c1) in enumerate(spans):
            current = pending.result() if pending is not None else self._fetch(c0, c1)
            pending = None
            if i + 1 < len(spans):
                pending = self._ahead.submit(self._fetch, *spans[i + 1])
            yield current

    def grids(self, f: Fetched, step: float, memory: RawMemory) -> Chunk:
        n = math.floor((f.c1 - f.c0) / step + 1e-9) + 1
        steps_ms = np.rint((f.c0 + np.arange(n) * step) * 1000).astype(np.int64)
        timing = Timing(steps_ms, round(self.lookback * 1000),
                        round(self.s.window * 1000), self.left_open)  # fmt: skip
        lb, lo = timing.lookback_ms, self.left_open
        dcgm_parts = [
            b for q in self.plan if q.name.startswith(("raw:values:", "raw:sparse"))
            if (b := f.blocks.get(q.name)) is not None
        ]  # fmt: skip
        dcgm = RawBlock.concat(dcgm_parts)
        grid = newest(dcgm, steps_ms, lb, lo)
        inv_idx = [i for i, m in enumerate(dcgm.labels)
                   if m.get("__name__") == self.s.inventory_metric]  # fmt: skip
        ident = identity(dcgm, inv_idx, grid[inv_idx], timing, memory)
        keys = series_keys(dcgm, ident)
        missing = frozenset(
            name for q in self.plan if f.blocks.get(q.name) is None
            for name in _names_in(q.selector)
        )  # fmt: skip

        def small(name: str) -> Selected | None:
            b = f.blocks.get(name)
            return None if b is None else Selected(b, newest(b, steps_ms, lb, lo))

        xid = small("raw:xid")
        steps = small("raw:steps")
        kube = small("raw:kube")
        kube_main = kube_status = None
        if kube is not None:
            main = split_by_name(kube.block, _KUBE_MAIN)
            if (gpu_counts := f.blocks.get("raw:kube_gpus")) is not None:
                main = RawBlock.concat([main, gpu_counts])
            kube_main = _select(main, steps_ms, lb, lo)
            kube_status = _select(split_by_name(kube.block, _KUBE_STATUS), steps_ms, lb, lo)
        interval = (
            interval_from([{"value": [0, repr(memory.interval)]}]) if memory.interval else None
        )
        vals = values(dcgm, grid, ident, keys)
        present = f.families or frozenset()
        sparse_ok = f.blocks.get("raw:sparse") is not None
        incs, spans = increases(dcgm, ident, timing, keys, vals, present, sparse_ok, memory)
        xid_grids = None if xid is None else xid_counts(xid.block, xid.grid, ident)
        complete = frozenset(f for f in SPARSE_COUNTERS if f in present and sparse_ok)
        metrics = step_metrics(ident, dict(vals), dict(incs), dict(spans), xid_grids, missing,
                               complete, self.s.window)  # fmt: skip
        return Chunk(
            timing=timing,
            ident=ident,
            gpu_rows=_gpu_rows(ident.rows),
            values=vals,
            increases=incs,
            spans=spans,
            missing=missing,
            xid=xid_grids,
            steps=None if steps is None else pod_steps(steps.block, steps.grid, timing),
            up=small("raw:up"),
            kube=kube_main,
            kube_status=kube_status,
            present=present,
            sparse_ok=sparse_ok,
            problems=f.problems,
            interval=interval,
            metrics=metrics,
        )


_WORKLOAD_BLOCKS = frozenset({"raw:sparse", "raw:xid"})
_KUBE_MAIN = frozenset(KSM_FAMILIES)
_KUBE_STATUS = frozenset(KSM_STATUS_FAMILIES)


def _select(b: RawBlock, steps_ms: np.ndarray, lb: int, lo: bool) -> Selected:
    return Selected(b, newest(b, steps_ms, lb, lo))


def _names_in(selector: str) -> list[str]:
    m = re.match(r'\{__name__=~"([^"]*)"', selector)
    return m.group(1).split("|") if m else []


def _gpu_rows(rows: Sequence[tuple[str, ...]]) -> GpuColumns:
    cols = {name: [r[i] for r in rows] for i, name in enumerate(IDENTITY_LABELS)}
    return GpuColumns.from_labels(cols)
