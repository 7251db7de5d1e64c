"""XIDs as the driver raises them, and what dcgm-exporter's two XID fields show of them.

Every XID is one occurrence (GPU, time, code) in the log: a fault's code at its start, an
application XID at its confounder's start. Real XIDs come in cascades: an ECC error (48, 94, 95)
is followed within milliseconds by 45 ("preemptive cleanup, due to previous errors"), a graphics
exception (13) by 43 ("GPU stopped processing"), so the last-XID gauge often shows the follower.

Both fields read the host engine's cache, which lives as long as the exporter (the embedded host
engine): `DCGM_FI_DEV_XID_ERRORS` is the last code since the exporter started (a GPU reset does
not clear it; dcgm-exporter #500, DCGM #277), `DCGM_EXP_XID_ERRORS_COUNT` counts each code's
occurrences within the last window (dcgm-exporter's expcollector: GetValuesSince(window)).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from observer.fleet.model import FloatArray
from simulator.counters import FAULT_XID, I64
from simulator.targets import ResolvedConfounder, ResolvedFault

CASCADE_FOLLOWER = {48: 45, 94: 45, 95: 45, 13: 43}
"""The code the driver logs right after a leading XID (its cleanup of the failed contexts)."""
CASCADE_DELAY = 0.05
"""Seconds between a leading XID and its follower (milliseconds in the kernel log)."""


@dataclass(frozen=True, slots=True)
class XidLog:
    """Occurrences in time order, as parallel columns."""

    gpu: I64
    time: FloatArray
    code: I64

    @staticmethod
    def build(
        faults: Iterable[ResolvedFault],
        confounders: Iterable[ResolvedConfounder],
        cascades: bool,
    ) -> XidLog:
        rows: list[tuple[float, int, int]] = []
        for f in faults:
            if f.kind in FAULT_XID and f.gpu >= 0:
                rows.append((f.start, f.gpu, FAULT_XID[f.kind]))
        for c in confounders:
            if c.kind == "app_xid" and c.gpus:
                rows.append((c.start, c.gpus[0], c.xid))
        if cascades:
            rows += [
                (t + CASCADE_DELAY, g, CASCADE_FOLLOWER[code])
                for t, g, code in list(rows)
                if code in CASCADE_FOLLOWER
            ]
        rows.sort()
        return XidLog(
            gpu=np.array([r[1] for r in rows], dtype=np.int64),
            time=np.array([r[0] for r in rows], dtype=np.float64),
            code=np.array([r[2] for r in rows], dtype=np.int64),
        )

    def last_code(self, t: float, since: FloatArray) -> FloatArray:
        """Per GPU: the last code at or before `t` and after its exporter started (`since`),
        0 when none: the sticky `DCGM_FI_DEV_XID_ERRORS`."""
        out = np.zeros(since.shape[0])
        seen = (self.time <= t) & (self.time > since[self.gpu])
        out[self.gpu[seen]] = self.code[seen]  # time order: the last write per GPU wins
        return out

    def window_counts(self, t: float, window: float, since: FloatArray) -> dict[int, FloatArray]:
        """Code -> per-GPU occurrences in (t - window, t] since the exporter started."""
        n = since.shape[0]
        seen = (self.time <= t) & (self.time > t - window) & (self.time > since[self.gpu])
        out: dict[int, FloatArray] = {}
        for g, code in zip(self.gpu[seen].tolist(), self.code[seen].tolist(), strict=True):
            out.setdefault(code, np.zeros(n))[g] += 1
        return out
