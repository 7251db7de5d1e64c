"""What earlier Prometheus cycles saw, so that steady-state cycles skip the costly queries.

Three answers change slowly and cost Prometheus the most per useful byte: the GPUs that
vanished within the inventory window (a range read of every GPU), each exporter's last good
scrape (a subquery over `up`) and the scrape interval (a subquery). A collector running cycles in
time order already saw all three: GPUs and their last sample times come with every `identity`
answer, and so do each node's newest samples. So the collector asks those queries only on a cold
start (first cycle, time going backwards, or a gap longer than the window) and otherwise answers
them from here, in the shapes the assembly expects. Memory: one label dict and one float per GPU
seen within the window, one float per node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from observer.fleet.catalog import (
    LABEL_HOSTNAME,
    LABEL_HOSTNAME_NEW,
    LABEL_MIG_INSTANCE,
    LABEL_UUID,
)
from observer.prometheus.parse import Vector, last_up
from observer.prometheus.plan import IDENTITY_LABELS


def _key(m: Mapping[str, str]) -> str:
    uuid, mig = m.get(LABEL_UUID, ""), m.get(LABEL_MIG_INSTANCE, "")
    return f"{uuid}/{mig}" if mig else uuid


@dataclass(slots=True)
class PromMemory:
    window: float
    gpus: dict[str, tuple[Mapping[str, str], float]] = field(default_factory=dict)
    """GPU key -> (identity labels of its newest row, newest sample time)."""
    node_last: dict[str, float] = field(default_factory=dict)
    """Node -> newest sample time of any of its GPUs (its exporter's last good scrape)."""
    interval: float | None = None
    last_t: float | None = None

    def warm(self, t: float) -> bool:
        return self.last_t is not None and self.last_t <= t <= self.last_t + self.window

    def remember(self, answers: Mapping[str, Vector | None], t: float, cold: bool) -> None:
        """Fold one cycle's answers in (cycles must come in time order)."""
        if cold:
            self.gpus.clear()
            self.node_last.clear()
            known = {str(r["metric"].get("node", "")) for r in answers.get("up") or []}
            for r in answers.get("vanished") or []:  # last seen sometime in the window
                self.gpus[_key(r["metric"])] = (r["metric"], t - self.window / 2)
            rows = [*(answers.get("identity") or []), *(answers.get("vanished") or [])]
            hosts = {_host(r["metric"]) for r in rows}
            self.node_last.update(last_up(answers.get("up_last") or [], hosts | known))
            interval = answers.get("interval")
            if interval:
                self.interval = float(interval[0]["value"][1])
        for r in answers.get("identity") or []:
            m, seen = r["metric"], float(r["value"][1])
            key = _key(m)
            if key not in self.gpus or seen >= self.gpus[key][1]:
                self.gpus[key] = (m, seen)
            host = _host(m)
            if host and seen > self.node_last.get(host, float("-inf")):
                self.node_last[host] = seen
        for key in [k for k, (_, seen) in self.gpus.items() if seen < t - self.window]:
            del self.gpus[key]
        self.last_t = t

    def answers(self, current: Vector, t: float) -> dict[str, list[dict[str, Any]]]:
        """`vanished`, `up_last` and `interval` as the cold queries would have answered."""
        now = {_key(r["metric"]) for r in current}
        vanished = [
            {"metric": {k: m[k] for k in IDENTITY_LABELS if k in m}, "value": [t, "1"]}
            for key, (m, seen) in self.gpus.items()
            if key not in now and seen >= t - self.window
        ]
        up_last = [
            {"metric": {"node": n}, "value": [t, repr(v)]} for n, v in self.node_last.items()
        ]
        interval = (
            [] if self.interval is None else [{"metric": {}, "value": [t, repr(self.interval)]}]
        )
        return {"vanished": vanished, "up_last": up_last, "interval": interval}


def _host(m: Mapping[str, str]) -> str:
    return str(m.get(LABEL_HOSTNAME) or m.get(LABEL_HOSTNAME_NEW) or "")
