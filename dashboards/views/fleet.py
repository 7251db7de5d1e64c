"""Fleet: KPIs, the GPU grid by node pool (health or utilization) with drill-down to a pool's
nodes x GPUs, and trends of allocated and busy GPUs. Reads metering's latest fleet state and its
5-minute rollups, so 10k GPUs are one indexed read, never a Prometheus query."""

from __future__ import annotations

import altair as alt
import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from dashboards import data
from dashboards.shell import Context, ago, live
from dashboards.views.remediation import HISTORY

HEALTH = ["healthy", "no_data", "degraded", "quarantined", "lost"]
HEALTH_COLORS = ["#2ca02c", "#bdbdbd", "#ff7f0e", "#d62728", "#3b0a45"]
MAX_NODES = 400
"""Nodes drawn at once in a pool's drill-down grid (the rest behind a node filter)."""
DAY = 86400.0


def kpis(ctx: Context, gpus: pd.DataFrame, now: float) -> None:
    counts = gpus["health"].value_counts()
    n = len(gpus)
    allocated = int(gpus["allocated"].sum())
    busy = float(gpus["utilization"].fillna(0.0).sum()) / 100.0
    start = now - now % DAY
    today = data.usage(ctx.url, ctx.cluster, start, data.bucket_now(), "fleet")
    idle = float(today["idle_gpu_hours"].sum()) if not today.empty else 0.0
    out = out_of_service(ctx, gpus)
    # Two rows of four: at 1,280 px eight metrics in one row cut their labels short.
    top, bottom = st.columns(4), st.columns(4)
    top[0].metric("GPUs", f"{n:,}")
    top[1].metric("Healthy", f"{int(counts.get('healthy', 0)):,}")
    top[2].metric("Degraded", f"{int(counts.get('degraded', 0)):,}")
    top[3].metric("Quarantined", f"{int(counts.get('quarantined', 0)):,}")
    bottom[0].metric("Allocated", f"{100.0 * allocated / n:.0f} %" if n else "-")
    bottom[1].metric("Busy", f"{100.0 * busy / n:.0f} %" if n else "-")
    bottom[2].metric(
        "Idle allocated today",
        f"{idle:,.1f} GPU-h",
        help="GPU-hours allocated to pods that left the GPU idle, since midnight UTC",
    )
    bottom[3].metric(
        f"Out of service (of {n:,})",
        f"{out:,} GPUs",
        help="fenced, evicted, quarantined or drained by gpufleet and not yet returned "
        "(Remediation page, Out of service)",
    )


def out_of_service(ctx: Context, gpus: pd.DataFrame) -> int:
    """GPUs gpufleet holds out of service: each fenced GPU, and every GPU of a node it took out
    (the node's GPUs as metering last saw them)."""
    out = data.out_of_service(ctx.url, ctx.cluster, data.now() - HISTORY)
    if out.empty:
        return 0
    away = data.away(out)["target"]
    uuids = {t[4:] for t in away if t.startswith("gpu/")}
    nodes = {t[5:] for t in away if t.startswith("node/")}
    uuids.update(gpus[gpus["node"].isin(nodes)]["uuid"])
    return len(uuids)


def pool_table(gpus: pd.DataFrame) -> pd.DataFrame:
    g = gpus.assign(pool=gpus["pool"].replace("", "(no pool)"))
    counts = pd.crosstab(g["pool"], g["health"]).reindex(columns=HEALTH, fill_value=0)
    agg = g.groupby("pool").agg(
        nodes=("node", "nunique"),
        gpus=("uuid", "size"),
        allocated=("allocated", "mean"),
        utilization=("utilization", "mean"),
    )
    out = agg.join(counts).reset_index()
    out["allocated"] = (100.0 * out["allocated"]).round(0)
    out["utilization"] = out["utilization"].round(0)
    return out


def pool_chart(table: pd.DataFrame) -> alt.Chart:
    long = table.melt(id_vars=["pool"], value_vars=HEALTH, var_name="health", value_name="count")
    chart: alt.Chart = (
        alt.Chart(long)
        .mark_bar()
        .encode(
            x=alt.X("count:Q", stack="normalize", title="share of GPUs"),
            y=alt.Y("pool:N", title=None),
            color=alt.Color("health:N", scale=alt.Scale(domain=HEALTH, range=HEALTH_COLORS)),
            tooltip=["pool", "health", "count"],
        )
    )
    return chart


def grid(gpus: pd.DataFrame, colour: str) -> alt.Chart:
    """Node x GPU cells of one pool, coloured by health or utilization; a MIG GPU's instances
    are side by side under their GPU's column (`instance`), as the GPU is the grain."""
    d = gpus.assign(
        gpu=gpus["device"].astype(int),
        instance=gpus["mig_instance"].map(lambda m: f"MIG {m}" if m else ""),
    )
    if colour == "health":
        color = alt.Color(
            "health:N",
            scale=alt.Scale(domain=HEALTH, range=HEALTH_COLORS),
            legend=alt.Legend(orient="top", title=None),  # a right legend was clipped at 1,280 px
        )
    else:
        color = alt.Color(
            "utilization:Q",
            scale=alt.Scale(scheme="viridis", domain=[0, 100]),
            title="util %",
            legend=alt.Legend(orient="top"),
        )
    chart: alt.Chart = (
        alt.Chart(d[["node", "gpu", "instance", "health", "utilization", "job", "issue", "model"]])
        .mark_rect(stroke="white", strokeWidth=0.5)
        .encode(
            x=alt.X("gpu:O", title="GPU"),
            xOffset=alt.XOffset("instance:N", sort="ascending"),
            y=alt.Y("node:N", title=None, sort=None),
            color=color,
            tooltip=["node", "gpu", "instance", "health", "issue", "utilization", "job", "model"],
        )
        .properties(height=min(22 * d["node"].nunique() + 60, 4000))
    )
    return chart


def trends(ctx: Context, now: float) -> None:
    hours = st.segmented_control("Trend", ["6h", "24h", "7d"], default="24h", key="fleet_trend")
    span = {"6h": 6 * 3600.0, "24h": DAY, "7d": 7 * DAY}[hours or "24h"]
    res = 300 if span <= DAY else 3600
    u = data.usage_series(ctx.url, ctx.cluster, "fleet", now - span, data.bucket_now(), res)
    if u.empty:
        st.caption("No usage recorded in this period yet.")
        return
    per = u.set_index("t")
    # Shares of the GPUs seen in each step, not GPU counts: the first step after a start and
    # the step in progress hold only part of their time, and counts would draw a false ramp.
    seen = per["gpu_hours"].where(per["gpu_hours"] > 0)
    shares = pd.DataFrame(
        {
            "allocated": 100.0 * per["allocated_gpu_hours"] / seen,
            "busy": 100.0 * per["busy_gpu_hours"] / seen,
        }
    ).dropna()
    st.caption("Allocated and busy, in % of the GPUs seen in each step (the latest step so far).")
    st.line_chart(shares, y_label="% of GPUs")


def headline(ctx: Context) -> None:
    """The latest cycle and the KPIs (refreshed on their own)."""
    now = data.now()
    gpus = data.fleet(ctx.url, ctx.cluster)
    seen = data.last_cycle(ctx.url, ctx.cluster)
    st.caption(f"Latest cycle {ago(seen, now)} · {gpus['node'].nunique():,} nodes")
    kpis(ctx, gpus, now)


def render(ctx: Context) -> None:
    st.title("Fleet")
    now = data.now()
    gpus = data.fleet(ctx.url, ctx.cluster)
    if gpus.empty:
        st.info(
            "No fleet state recorded yet: metering writes it on every cycle of `gpufleet run` "
            "(or the demo)."
        )
        return
    live(ctx, headline)
    st.subheader("By node pool")
    table = pool_table(gpus)
    st.altair_chart(pool_chart(table), width="stretch")
    st.dataframe(  # full width: beside the chart at 1,280 px it hid half its columns
        table,
        hide_index=True,
        width="stretch",
        column_config={
            "allocated": st.column_config.NumberColumn("allocated", format="%d %%"),
            "utilization": st.column_config.NumberColumn("utilization", format="%d %%"),
        },
    )
    st.subheader("Drill down")
    c = st.columns([2, 2, 3])
    pool = c[0].selectbox("Node pool", list(table["pool"]), key="fleet_pool")
    colour = c[1].radio("Colour by", ["health", "utilization"], horizontal=True, key="fleet_col")
    node_filter = c[2].text_input("Node contains", key="fleet_node")
    sel = gpus[gpus["pool"].replace("", "(no pool)") == pool]
    if node_filter:
        sel = sel[sel["node"].str.contains(node_filter, regex=False)]
    nodes = sel["node"].unique()
    if len(nodes) > MAX_NODES:
        st.caption(f"Showing the first {MAX_NODES} of {len(nodes)} nodes (filter by name).")
        sel = sel[sel["node"].isin(nodes[:MAX_NODES])]
    worst = sel[sel["health"].isin(["degraded", "quarantined", "lost"])]
    if not worst.empty:
        st.dataframe(
            worst[["node", "device", "health", "issue", "job", "utilization"]],
            hide_index=True,
            width="stretch",
        )
    st.altair_chart(grid(sel, colour or "health"), width="stretch")
    st.subheader("Trends")
    trends(ctx, now)
