"""Per-GPU history around an incident, read from Prometheus (the store keeps no per-GPU history).

Which series to read comes from the detectors' own metadata: the registry says which detector
reports a finding kind, and its `Needs` (the same declaration detectors.coverage uses) say which
DCGM fields it reads. For each field, the incident's GPU and the median of the other GPUs of its
model (its peers: the detectors compare like with like; an A100 beside H100s would otherwise
read as slow) over a window around the incident's start, through the observer's Prometheus
client.
"""

from __future__ import annotations

import re
import time

import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from detectors.base import ANY_GPU_SERIES
from detectors.coverage import NEEDS
from detectors.registry import registry
from observer.fleet.catalog import LABEL_MODEL, LABEL_UUID
from observer.prometheus.client import PrometheusClient
from observer.prometheus.plan import PromSettings

WINDOW_S = 1800.0
"""Half the window shown around an incident's start (±30 min)."""
POINTS = 240
"""Samples per series over the window (the step follows)."""
MAX_FIELDS = 4
TTL = 60.0
"""Seconds an answer is reused: the past does not change, only the window's recent end does."""
COLUMNS = ["t", "value", "series", "field"]
COVERAGE = 0.75
"""A peers' median is drawn only where at least this share of the window's most peers has a
sample: a median over the first exporters scraped (each is scraped in turn in the first
interval) is not the peers' median; one over all but a lost GPU or two still is."""


def fields_for(kind: str) -> tuple[str, ...]:
    """The DCGM fields the detector(s) reporting `kind` read, most telling first."""
    out: dict[str, None] = {}
    for name, spec in registry().items():
        needs = NEEDS.get(name)
        if needs is None or kind not in {k.value for k in spec.kinds}:
            continue
        for f in (*(f for g in needs.requires for f in g), *needs.full):
            if f != ANY_GPU_SERIES:
                out[f] = None
    return tuple(out)[:MAX_FIELDS]


def _quote(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"')


def _frame(result: list[dict[str, object]], series: str, field: str) -> pd.DataFrame:
    rows = [
        {"t": pd.Timestamp(float(t), unit="s", tz="UTC"), "value": float(v), "series": series,
         "field": field}
        for r in result
        for t, v in r.get("values", [])  # type: ignore[attr-defined]
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def measured(median: pd.DataFrame, counts: pd.DataFrame) -> pd.DataFrame:
    """The peers' median at the steps where it is measured: enough peers have a sample there
    (`COVERAGE` of the most the window saw). Elsewhere nothing is drawn, rather than a ramp
    from the few peers scraped first."""
    if median.empty or counts.empty:
        return median.iloc[0:0]
    n = counts.set_index("t")["value"]
    at = median["t"].map(n).fillna(0.0)
    return median[at >= COVERAGE * float(n.max())].reset_index(drop=True)


def _peer_selector(mine: list[dict[str, object]], uuid: str) -> str:
    """Every other GPU of the same model as the incident's GPU (its `modelName` label), or every
    other GPU when its series carry no model."""
    labels = mine[0].get("metric") if mine else None
    model = labels.get(LABEL_MODEL) if isinstance(labels, dict) else None
    others = f'{LABEL_UUID}!="{uuid}"'
    return f'{LABEL_MODEL}="{_quote(str(model))}",{others}' if model else others


@st.cache_data(ttl=TTL, show_spinner=False)
def around(prometheus_url: str, gpu_uuid: str, kind: str, at: float) -> pd.DataFrame:
    """Columns t, value, series ("this GPU" | "peers' median"), field: every field `kind`'s
    detector reads, over [at - WINDOW_S, at + WINDOW_S]. Raises errors.GpufleetError when
    Prometheus cannot answer."""
    # Never past now: Prometheus would repeat each series' last sample for 5 min into the future.
    start, end = at - WINDOW_S, min(at + WINDOW_S, time.time())
    step = max(1.0, 2 * WINDOW_S / POINTS)
    uuid = _quote(gpu_uuid)
    frames = []
    client = PrometheusClient(PromSettings(prometheus_url, timeout=15.0))
    try:
        for f in fields_for(kind):
            mine, _ = client.range(f'{f}{{{LABEL_UUID}="{uuid}"}}', start, end, step)
            sel = f"{f}{{{_peer_selector(mine, uuid)}}}"
            peers, _ = client.range(f"quantile(0.5, {sel})", start, end, step)
            counts, _ = client.range(f"count({sel})", start, end, step)
            median = measured(_frame(peers, "peers' median", f), _frame(counts, "", f))
            frames += [_frame(mine, "this GPU", f), median]
    finally:
        client.close()
    frames = [x for x in frames if not x.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)


@st.cache_data(ttl=TTL, show_spinner=False)
def ranks_over(
    prometheus_url: str, uuids: tuple[str, ...], field: str, start: float, end: float
) -> pd.DataFrame:
    """Columns t, uuid, value: `field` for each of `uuids` over [start, end] (a job's ranks over
    time). Raises errors.GpufleetError when Prometheus cannot answer."""
    if not uuids or end <= start:
        return pd.DataFrame(columns=["t", "uuid", "value"])
    step = max(1.0, (end - start) / POINTS)
    pattern = _quote("|".join(re.escape(u) for u in uuids))
    client = PrometheusClient(PromSettings(prometheus_url, timeout=15.0))
    try:
        result, _ = client.range(f'{field}{{{LABEL_UUID}=~"{pattern}"}}', start, end, step)
    finally:
        client.close()
    rows = [
        {"t": pd.Timestamp(float(t), unit="s", tz="UTC"), "uuid": str(r["metric"][LABEL_UUID]),
         "value": float(v)}
        for r in result
        for t, v in r.get("values", [])
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["t", "uuid", "value"])
