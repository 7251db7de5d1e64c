"""Small Altair builders the pages share (Streamlit renders Altair natively)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import altair as alt
import pandas as pd  # type: ignore[import-untyped]

SEVERITY_COLORS = {"critical": "#d62728", "warning": "#ff7f0e", "info": "#1f77b4"}
ROLE_COLORS = {"this entity": "#d62728", "peers": "#7f7f7f", "threshold": "#2ca02c"}
SERIES_COLORS = {"this GPU": ROLE_COLORS["this entity"], "peers' median": ROLE_COLORS["peers"]}


def timeline(df: pd.DataFrame, now: float) -> alt.Chart:
    """One bar per incident from open to resolve (or now), a lane per kind, coloured by
    severity."""
    d = df.assign(
        start=pd.to_datetime(df["opened_at"], unit="s", utc=True),
        end=pd.to_datetime(df["resolved_at"].fillna(now), unit="s", utc=True),
        entity=df["node"].fillna(df["job"]).fillna("fleet"),
    )
    chart: alt.Chart = (
        alt.Chart(d[["start", "end", "entity", "kind", "severity", "summary", "id"]])
        .mark_bar(height=10, opacity=0.7)
        .encode(
            x=utc_time("start", "time (UTC)", (d["end"].max() - d["start"].min()).total_seconds()),
            x2="end:T",
            y=alt.Y("kind:N", title=None),
            color=alt.Color(
                "severity:N",
                scale=alt.Scale(domain=list(SEVERITY_COLORS), range=list(SEVERITY_COLORS.values())),
            ),
            tooltip=["id", "entity", "kind", "severity", "summary"],
        )
    )
    return chart


def role(key: str) -> str:
    k = key.lower()
    if "threshold" in k or k.startswith(("min_", "max_")):
        return "threshold"
    if "median" in k or "peer" in k or "baseline" in k:
        return "peers"
    return "this entity"


def evidence_frame(evidence: Mapping[str, Any]) -> pd.DataFrame:
    """The numeric evidence, each value labelled as the entity's, its peers' or a threshold."""
    rows = [
        {"field": k, "value": float(v), "role": role(k)}
        for k, v in evidence.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and v == v
    ]
    return pd.DataFrame(rows, columns=["field", "value", "role"])


def evidence_bars(frame: pd.DataFrame) -> alt.Chart:
    chart: alt.Chart = (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("value:Q"),
            y=alt.Y("field:N", sort=None, title=None),
            color=alt.Color(
                "role:N",
                scale=alt.Scale(domain=list(ROLE_COLORS), range=list(ROLE_COLORS.values())),
            ),
            tooltip=["field", "value", "role"],
        )
    )
    return chart


def utc_time(field: str, title: str | None = None, span: float = 3600.0) -> alt.X:
    """A time axis in UTC, 24 h clock: the journal's and the CLI's clock, whatever the browser's
    time zone; seconds shown when the axis spans minutes, the date when it spans days."""
    fmt = "%H:%M:%S" if span < 900 else "%H:%M" if span < 86400 else "%m-%d %H:%M"
    return alt.X(
        f"{field}:T", title=title, scale=alt.Scale(type="utc"),
        axis=alt.Axis(format=fmt, labelOverlap=True),
    )  # fmt: skip


def history_lines(
    frame: pd.DataFrame, thresholds: Mapping[str, float], start: float, unit: str = ""
) -> alt.LayerChart:
    """One field's history: this GPU and its peers' median as lines, the incident's start as a
    vertical rule and the detector's thresholds in this field's unit (from the evidence) as
    dashed horizontal rules; the y axis names the field and its unit."""
    name = str(frame["field"].iloc[0]) if len(frame) else ""
    span = (frame["t"].max() - frame["t"].min()).total_seconds() if len(frame) else 3600.0
    lines = (
        alt.Chart(frame)
        .mark_line()
        .encode(
            x=utc_time("t", span=span),
            y=alt.Y("value:Q", title=f"{name} ({unit})" if unit else name or None),
            color=alt.Color(  # the evidence panels' colours: this GPU red, its peers grey
                "series:N",
                title=None,
                scale=alt.Scale(domain=list(SERIES_COLORS), range=list(SERIES_COLORS.values())),
            ),
            tooltip=["t:T", "series", "value"],
        )
    )
    at = pd.DataFrame({"t": [pd.Timestamp(start, unit="s", tz="UTC")]})
    layers: list[alt.Chart] = [lines, alt.Chart(at).mark_rule(color="#888").encode(x="t:T")]
    if thresholds:
        rules = pd.DataFrame({"threshold": list(thresholds), "value": list(thresholds.values())})
        layers.append(
            alt.Chart(rules)
            .mark_rule(color=ROLE_COLORS["threshold"], strokeDash=[6, 4])
            .encode(y="value:Q", tooltip=["threshold", "value"])
        )
    chart = alt.LayerChart(layer=layers)
    return chart
