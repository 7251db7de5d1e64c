"""dcgm-exporter's XID series as each exporter version writes them (shared by the live pages and
the OpenMetrics backfill).

Read from dcgm-exporter's source: the gauge's `err_code`/`err_msg` attributes come after every
other label (gpu_collector.go, render_metrics.go); the count (expcollector.go) writes, per GPU,
one series per code seen within the window with `window_size_in_ms` and `xid`, or a single
zero series without `xid` when there was none, and ranges over a Go map, so the per-code series
come in a different order on each scrape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from observer.fleet.model import FloatArray
from simulator.scenario import Exporter
from simulator.series import escape

ERR_MSG = {
    0: "No Error",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: (
        "Preemptive cleanup, due to previous errors -- "
        "Most likely to see when running multiple cuda"
    ),
    48: "Double Bit ECC Error",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    79: "GPU has fallen off the bus",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
}
"""dcgm-exporter's xidErrCodeToText for the codes the simulator raises."""
UNKNOWN_ERR = "Unknown Error"
XID_COUNT_HELP = "Count of XID Errors within user-specified time window."


def count_kind(exporter: Exporter) -> str:
    """The count's TYPE: `gauge` in 3.3's counters files, `counter` in 4.x's."""
    return "counter" if exporter.version == "4.x" else "gauge"


def gauge_labels(labels: Sequence[str], codes: FloatArray, exporter: Exporter) -> list[str]:
    """The last-XID gauge's label sets: 4.x adds `err_code` and `err_msg` (NaN codes: absent)."""
    if exporter.version != "4.x":
        return list(labels)
    out: list[str] = []
    for lab, v in zip(labels, codes.tolist(), strict=True):
        if v != v:  # NaN: the series is absent; the label is never written
            out.append(lab)
            continue
        code = int(v)
        msg = escape(ERR_MSG.get(code, UNKNOWN_ERR))
        out.append(f'{lab},err_code="{code}",err_msg="{msg}"')
    return out


def count_lines(
    name: str,
    labels: Sequence[str],
    present: Sequence[bool],
    counts: Mapping[int, FloatArray],
    gpus: Sequence[int] | range,
    exporter: Exporter,
    window_seconds: float,
    order_seed: int,
    suffix: str = "\n",
) -> tuple[str, int]:
    """(text, series) of `DCGM_EXP_XID_ERRORS_COUNT` for `gpus` (layout positions; `labels` and
    `present` are parallel to them). The `simple` layout writes only non-zero counts, by code."""
    sel = np.asarray(gpus, dtype=np.int64)
    ok = np.asarray(present, dtype=bool)
    if not exporter.real:
        parts: list[str] = []
        for code, col in sorted(counts.items()):
            vals = col[sel]
            for i in np.flatnonzero(ok & (vals > 0)).tolist():
                parts.append(f'{name}{{{labels[i]},xid="{code}"}} {int(vals[i])}{suffix}')
        return "".join(parts), len(parts)
    window = f'window_size_in_ms="{round(window_seconds * 1000)}"'
    hit = np.zeros(sel.shape[0], dtype=bool)
    for col in counts.values():
        hit |= col[sel] > 0
    zero = np.flatnonzero(ok & ~hit).tolist()
    lines = [f"{name}{{{labels[i]},{window}}} 0{suffix}" for i in zero]
    rng = np.random.default_rng(order_seed)
    for i in np.flatnonzero(ok & hit).tolist():
        g = int(sel[i])
        seen = [(code, int(col[g])) for code, col in counts.items() if col[g] > 0]
        for k in rng.permutation(len(seen)).tolist():
            code, v = seen[k]
            lines.append(f'{name}{{{labels[i]},{window},xid="{code}"}} {v}{suffix}')
    return "".join(lines), len(lines)
