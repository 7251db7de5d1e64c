"""Jobs: for each job, its ranks x metrics at the latest cycle (utilization, health, open
findings) with the straggler or the hang highlighted, the ranks' nodes, and the job's busy share
over time from metering's rollups; with `dashboard.prometheus_url`, the ranks x one metric over
the last hour from Prometheus (the store keeps no per-rank history)."""

from __future__ import annotations

import re

import altair as alt
import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from dashboards import data
from dashboards import history as gpu_history
from dashboards.shell import Context
from dashboards.views import charts
from errors import GpufleetError

HEALTH_SCORE = {"healthy": 0.0, "no_data": 0.5, "degraded": 1.0, "quarantined": 1.0}
JOB_KINDS = ("straggler", "nccl_hang")
DAY = 86400.0
HOUR = 3600.0
UTIL_VS_MEDIAN = "util vs job median"
SPAN_MIN = 5.0
"""Percentage points the colour scale spans at least each side of the median: a job whose
ranks differ by a point stays pale instead of painting noise."""


UTIL_COLUMN = st.column_config.NumberColumn("utilization", format="%.1f %%")
"""Mean utilization in percent, one decimal: 97.8 %, not 97.8438."""


def natural(s: str) -> tuple[object, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s))


def ranks(gpus: pd.DataFrame, flagged: pd.DataFrame, job: str) -> pd.DataFrame:
    """One row per GPU of the job in rank order (pod name, device), with its flag."""
    g = gpus.copy()
    prefix = job.split("/", 1)[-1] + "-"
    pods = g["pod"].map(lambda p: p[len(prefix) :] if p.startswith(prefix) else p)
    g["rank"] = pods + " · gpu " + g["device"].astype(str)
    g = g.iloc[sorted(range(len(g)), key=lambda i: natural(str(g["rank"].iloc[i])))]
    strag = set(flagged[flagged["kind"] == "straggler"]["gpu_uuid"].dropna())
    hung = bool((flagged["kind"] == "nccl_hang").any())
    g["flag"] = [
        "straggler" if u in strag else ("hang" if hung else "") for u in g["uuid"]
    ]  # fmt: skip
    return g


def heatmap(g: pd.DataFrame) -> alt.LayerChart:
    """Each rank's utilization against the job's median, on a scale centred on it (ranks of a
    healthy job all sit near 100 %: on a 0-100 scale the column is uniformly dark and a slow rank
    hides); health and the detector's flag in red where bad."""
    order = list(g["rank"])
    median = float(g["utilization"].median()) if g["utilization"].notna().any() else 0.0
    delta = g["utilization"] - median
    span = max(SPAN_MIN, float(delta.abs().max()) if delta.notna().any() else 0.0)
    util = pd.DataFrame({"rank": g["rank"], "metric": UTIL_VS_MEDIAN, "value": g["utilization"],
                         "delta": delta})  # fmt: skip
    bad = pd.concat(
        [
            pd.DataFrame({"rank": g["rank"], "metric": "health", "label": g["health"],
                          "bad": g["health"].map(HEALTH_SCORE)}),
            pd.DataFrame({"rank": g["rank"], "metric": "flagged", "label": g["flag"],
                          "bad": (g["flag"] != "").astype(float)}),
        ]
    )  # fmt: skip
    x = alt.X("metric:N", title=None, sort=[UTIL_VS_MEDIAN, "health", "flagged"],
              axis=alt.Axis(labelAngle=0))  # fmt: skip
    y = alt.Y("rank:N", sort=order, title=None)
    left = alt.Chart(util).mark_rect().encode(
        x=x, y=y,
        color=alt.Color("delta:Q", scale=alt.Scale(scheme="redblue", domain=[-span, span]),
                        title=f"pp vs {median:.0f} %"),
        tooltip=["rank", alt.Tooltip("value:Q", title="utilization %", format=".1f"),
                 alt.Tooltip("delta:Q", title="vs job median (pp)", format="+.1f")],
    )  # fmt: skip
    right = alt.Chart(bad).mark_rect().encode(
        x=x, y=y,
        color=alt.Color("bad:Q", scale=alt.Scale(domain=[0, 1], range=["#e8f5e9", "#d62728"]),
                        legend=None),
        tooltip=["rank", "metric", "label"],
    )  # fmt: skip
    chart: alt.LayerChart = (
        alt.layer(left, right)
        .resolve_scale(color="independent")
        .properties(height=min(16 * len(order) + 40, 3000))
    )
    return chart


def render(ctx: Context) -> None:
    st.title("Jobs")
    gpus = data.fleet(ctx.url, ctx.cluster)
    jobs = gpus[gpus["job"] != ""] if not gpus.empty else gpus
    if jobs.empty:
        st.info("No job holds GPUs in the latest recorded cycle.")
        return
    now = data.now()
    inc = data.incidents(ctx.url, ctx.cluster, now)
    open_job = (
        inc[(inc["status"] == "open") & inc["kind"].isin(JOB_KINDS)] if not inc.empty else inc
    )
    held = set(jobs["job"])
    troubled = set(open_job["job"].dropna()) & held if not open_job.empty else set()
    summary = jobs.groupby("job").agg(
        gpus=("uuid", "size"), nodes=("node", "nunique"), utilization=("utilization", "mean")
    )
    summary["trouble"] = summary.index.isin(troubled)
    summary = summary.sort_values(["trouble", "gpus"], ascending=[False, False]).reset_index()
    only = st.toggle("Only jobs with a straggler or a hang", value=bool(troubled), key="jobs_bad")
    shown = summary[summary["trouble"]] if only and troubled else summary
    pick = st.selectbox(
        "Job",
        list(shown["job"]),
        key="jobs_pick",
        format_func=lambda j: j + ("  ⚠" if j in troubled else ""),
    )
    st.dataframe(
        shown.head(200),
        hide_index=True,
        width="stretch",
        height="auto",  # a fixed height drew empty padding rows under two jobs
        column_config={"utilization": UTIL_COLUMN},
    )
    if pick is None:
        return
    flagged = open_job[open_job["job"] == pick] if not open_job.empty else open_job
    g = ranks(jobs[jobs["job"] == pick], flagged if not flagged.empty else inc.head(0), pick)
    for _, f in flagged.iterrows():
        st.error(f"{f['kind']}: {f['summary']} (incident {f['id']})")
    _ranks_side_by_side(g)
    over_time(ctx, g, now)
    _busy_share(ctx, pick, now)


def _ranks_side_by_side(g: pd.DataFrame) -> None:
    """The ranks' metrics heatmap beside their nodes, so a bad rank's node is one glance away."""
    left, right = st.columns([3, 2])
    with left:
        st.markdown(
            "**Ranks × metrics** (latest cycle; utilization against the job's median, "
            "red below; health and flags red where bad)"
        )
        st.altair_chart(heatmap(g), width="stretch")
    with right:
        st.markdown("**The ranks' nodes**")
        st.dataframe(
            g[["rank", "node", "health", "utilization", "flag"]],
            hide_index=True,
            width="stretch",
            column_config={"utilization": UTIL_COLUMN},
        )


def _busy_share(ctx: Context, pick: str, now: float) -> None:
    """How busy the job kept its GPUs over the last 24 h, from metering's 5-minute rollups."""
    st.markdown("**Busy share of its GPUs over 24 h** (5-minute rollups)")
    u = data.usage_series(ctx.url, ctx.cluster, "job", now - DAY, data.bucket_now(), key=pick)
    if u.empty:
        st.caption("No usage recorded for this job in the last 24 h.")
        return
    per = u.set_index("t")
    share = (100.0 * per["busy_gpu_hours"] / per["allocated_gpu_hours"]).rename("busy %")
    st.line_chart(share, y_label="busy %")


def over_time_heatmap(frame: pd.DataFrame, g: pd.DataFrame, field: str) -> alt.Chart:
    """Ranks x time, coloured by `field`; the flagged ranks' labels marked on the right."""
    names = dict(zip(g["uuid"], g["rank"] + g["flag"].map(lambda f: f" ⚠ {f}" if f else ""),
                     strict=True))  # fmt: skip
    f = frame.assign(rank=frame["uuid"].map(names))
    order = [names[u] for u in g["uuid"]]
    cells = alt.Chart(f).mark_rect().encode(
        x=charts.utc_time("t"),
        y=alt.Y("rank:N", sort=order, title=None),
        color=alt.Color("value:Q", scale=alt.Scale(scheme="blues"), title=field),
        tooltip=["rank", "t:T", "value"],
    )  # fmt: skip
    chart: alt.Chart = cells.properties(height=min(16 * len(order) + 40, 3000))
    return chart


def over_time(ctx: Context, g: pd.DataFrame, now: float) -> None:
    """The ranks x one metric over the last hour, from Prometheus (the store keeps no history)."""
    st.markdown("**Ranks over the last hour** (from Prometheus)")
    url = ctx.settings.dashboard.prometheus_url
    if not url:
        st.caption("No ranks-over-time heatmap: the store keeps only the latest cycle. Set "
                   "`dashboard.prometheus_url` in the gpufleet config to read the ranks' "
                   "history.")  # fmt: skip
        return
    fields = list(dict.fromkeys((*gpu_history.fields_for("straggler"),
                                 *gpu_history.fields_for("nccl_hang"))))  # fmt: skip
    field = st.selectbox("Metric", fields, key="jobs_field") or fields[0]
    try:
        frame = gpu_history.ranks_over(url, tuple(g["uuid"]), field, now - HOUR, now)
    except GpufleetError as e:
        st.warning(f"Prometheus at {url} could not answer: {e}")
        return
    if frame.empty:
        st.caption(f"Prometheus holds no {field} for this job's GPUs in the last hour.")
        return
    st.altair_chart(over_time_heatmap(frame, g, field), width="stretch")
