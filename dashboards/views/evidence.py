"""The evidence a detector used, one small panel per metric, each in its own units.

A detector's evidence mixes scales (an SM clock in MHz, an activity fraction, seconds of
accumulated gap); on one axis the small ones vanish. Keys are grouped by the metric they
describe (`activity`, `job_median_activity`, `node_peers_median_activity` are one panel), each
value labelled as this entity's, its peers' or a threshold, and drawn with its unit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import altair as alt
import pandas as pd  # type: ignore[import-untyped]

from dashboards.views.charts import ROLE_COLORS, role
from observer.fleet.catalog import BY_NAME

PREFIXES = (
    "job_median_", "node_peers_median_", "model_busy_median_", "peers_median_", "threshold_",
    "min_", "max_",
)  # fmt: skip
DROPPED = {"median", "baseline", "busy", "evidence"}
BARE_UNIT = {"mhz": "sm_clock_mhz"}
"""A stem that is only a unit names the metric the detector compares in that unit."""
FRACTION = "fraction of time active (0-1)"
UNITS = (("_mhz", "MHz"), ("_w", "W"), ("_c", "°C"), ("_s", "s"), ("_bytes_per_s", "bytes/s"))


def stem(key: str) -> str:
    k = key.lower()
    for p in PREFIXES:
        if k.startswith(p):
            k = k[len(p) :]
            break
    k = "_".join(t for t in k.split("_") if t not in DROPPED)
    return BARE_UNIT.get(k, k)


def unit(metric: str) -> str:
    if metric.endswith("_bytes_per_s"):
        return "bytes/s"
    for suffix, u in UNITS:
        if metric.endswith(suffix):
            return u
    if metric in ("activity", "compute"):
        return FRACTION
    if metric.startswith("util"):
        return "%"
    return ""


FIELD_UNITS = {"percent": "%", "celsius": "°C", "watts": "W", "ratio": FRACTION, "xid": "XID code"}
"""The catalog's unit words as a person reads them on an axis."""


def field_unit(field: str) -> str:
    """The unit of a DCGM field (the metric catalog's), as drawn on its chart's axis."""
    spec = BY_NAME.get(field)
    u = spec.unit if spec is not None else ""
    return FIELD_UNITS.get(u, u)


def thresholds_by_field(
    fields: Sequence[str], evidence: Mapping[str, Any]
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Each of the evidence's thresholds on the chart of every field in its own unit (a
    temperature limit on the temperature, never on the first chart whatever it is), and apart
    the thresholds in no field's unit (seconds of persistence, a relative gap)."""
    limits = {
        k: float(v)
        for k, v in evidence.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and role(k) == "threshold"
    }
    drawn: dict[str, dict[str, float]] = {f: {} for f in fields}
    apart: dict[str, float] = {}
    for k, v in limits.items():
        u = unit(stem(k))
        on = [f for f in fields if u and field_unit(f) == u]
        for f in on:
            drawn[f][k] = v
        if not on:
            apart[k] = v
    return drawn, apart


def panels(evidence: Mapping[str, Any]) -> list[tuple[str, pd.DataFrame]]:
    """(metric, frame of field/value/role/unit) for each metric with a comparison: at least two
    numbers (this entity's and its peers' or a threshold). Counts and ids stand alone."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for k, v in evidence.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or v != v:
            continue
        m = stem(k)
        groups.setdefault(m, []).append({"field": k, "value": float(v), "role": role(k)})
    out = []
    for m, rows in groups.items():
        if len(rows) >= 2:
            frame = pd.DataFrame(rows).assign(unit=unit(m))
            out.append((m, frame))
    return out


ROW_PX = 34
"""Height per bar: a field name and its value label fit beside it at 1,280 px."""
CHROME_PX = 170
"""Title, x axis with its title and the legend below (~165 px, read off the demo's screenshot):
Streamlit fits the whole chart into the spec's height, so a height that counted only the bars
left them none (drawn as one line)."""


def panel(metric: str, frame: pd.DataFrame) -> alt.LayerChart:
    """One metric's bars, each labelled with its value (a threshold 0.5 MHz away from the GPU's
    reading is read, not guessed from bar lengths), at least three rows tall so a two-bar
    comparison is not squashed under its title, axis and legend."""
    u = str(frame["unit"].iloc[0]) if len(frame) else ""
    base = alt.Chart(frame).encode(
        x=alt.X("value:Q", title=f"{metric} ({u})" if u else metric,
                axis=alt.Axis(labelOverlap=True, tickCount=5)),
        y=alt.Y("field:N", sort=None, title=None, axis=alt.Axis(labelLimit=220)),
        tooltip=["field", "value", "role"],
    )  # fmt: skip
    bars = base.mark_bar().encode(
        color=alt.Color(
            "role:N",
            scale=alt.Scale(domain=list(ROLE_COLORS), range=list(ROLE_COLORS.values())),
            legend=alt.Legend(orient="bottom", title=None),
        )
    )
    labels = base.mark_text(align="left", dx=4).encode(text=alt.Text("value:Q", format=",.4~g"))
    chart = alt.LayerChart(layer=[bars, labels]).properties(
        height=ROW_PX * max(len(frame), 3) + CHROME_PX, title=metric
    )
    return chart
