"""Utilization & cost: GPU-hours allocated vs busy by namespace, team, job, pool or node over a
chosen period, idle waste in GPU-hours and money (metering's prices per GPU model), a chart per
team over time, and CSV export. Numbers are metering's rollups, the same as the daily report."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import altair as alt
import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from dashboards import data
from dashboards.shell import Context
from metering import MeteringConfig

DIMENSIONS = {"Namespace": "namespace", "Team": "team", "Job": "job", "Node pool": "pool",
              "Node": "node"}  # fmt: skip
TOP = 30
MAX_TEAMS = 24


def priced(df: pd.DataFrame, cfg: MeteringConfig) -> pd.DataFrame:
    price = df["model"].map(lambda m: cfg.price_for(str(m)))
    return df.assign(idle_cost=df["idle_gpu_hours"] * price.astype(float))


def by_key(df: pd.DataFrame) -> pd.DataFrame:
    cols = ["gpu_hours", "allocated_gpu_hours", "busy_gpu_hours", "unmeasured_gpu_hours",
            "idle_gpu_hours", "idle_cost"]  # fmt: skip
    out = df.groupby(["cluster", "key"], as_index=False)[cols].sum(min_count=1)
    out["busy_percent"] = (
        100.0
        * out["busy_gpu_hours"]
        / out["allocated_gpu_hours"].where(out["allocated_gpu_hours"] > 0)
    ).round(1)
    return out.sort_values("allocated_gpu_hours", ascending=False)


def period() -> tuple[float, float]:
    today = datetime.now(UTC).date()
    picked = st.date_input(
        "Period (UTC days)", value=(today - timedelta(days=6), today), key="util_period"
    )
    days = list(picked) if isinstance(picked, tuple | list) else [picked]
    lo: date = days[0]
    hi: date = days[-1] if len(days) > 1 else days[0]
    start = datetime.combine(lo, time(0), UTC).timestamp()
    end = datetime.combine(hi + timedelta(days=1), time(0), UTC).timestamp()
    return start, min(end, data.bucket_now())


def render(ctx: Context) -> None:
    st.title("Utilization & cost")
    cfg = ctx.settings.metering
    c = st.columns([3, 2])
    with c[0]:
        start, end = period()
    label = c[1].selectbox("Group by", list(DIMENSIONS), key="util_by") or "Namespace"
    dim = DIMENSIONS[label]
    df = data.usage(ctx.url, ctx.cluster, start, end, dim)
    if df.empty:
        st.info("No usage recorded in this period (metering records it on every live cycle).")
        return
    df = priced(df, cfg)
    table = by_key(df)
    _totals(df, table, cfg.currency)
    _top_chart(table, label)
    hours = st.column_config.NumberColumn(format="%.1f")
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        column_config={c: hours for c in table.columns if str(c).endswith(("_hours", "_cost"))},
    )
    st.download_button(
        "Download CSV",
        table.to_csv(index=False).encode(),
        file_name=f"gpufleet-usage-{dim}.csv",
        mime="text/csv",
        key="util_csv",
    )
    _per_team(ctx, start, end)


def _totals(df: pd.DataFrame, table: pd.DataFrame, currency: str) -> None:
    """The period's headline figures, and how much idle time has no price."""
    k = st.columns(5)
    alloc, busy = table["allocated_gpu_hours"].sum(), table["busy_gpu_hours"].sum()
    k[0].metric("GPU-hours allocated", f"{alloc:,.1f}")
    k[1].metric("GPU-hours busy", f"{busy:,.1f}")
    k[2].metric("Busy share", f"{100.0 * busy / alloc:.0f}%" if alloc else "-")
    k[3].metric("Idle allocated GPU-hours", f"{table['idle_gpu_hours'].sum():,.1f}")
    cost = table["idle_cost"]
    k[4].metric(
        f"Idle cost ({currency})", f"{cost.sum():,.2f}" if cost.notna().any() else "no prices"
    )
    unpriced = df[df["idle_cost"].isna()]["idle_gpu_hours"].sum()
    if unpriced > 0:
        st.caption(f"{unpriced:,.1f} idle GPU-hours are of GPU models without a price (config "
                   "`metering.prices`); they are not in the cost.")  # fmt: skip


def _top_chart(table: pd.DataFrame, label: str) -> None:
    """Allocated beside busy hours for the biggest users, so idle allocation stands out."""
    top = table.head(TOP)
    long = top.melt(id_vars=["key"], value_vars=["allocated_gpu_hours", "busy_gpu_hours"],
                    var_name="what", value_name="GPU-hours")  # fmt: skip
    chart = (
        alt.Chart(long)
        .mark_bar()
        .encode(
            y=alt.Y("key:N", sort=list(top["key"]), title=label),
            x=alt.X("GPU-hours:Q"),
            yOffset="what:N",
            color="what:N",
            tooltip=["key", "what", "GPU-hours"],
        )
    )
    st.altair_chart(chart, width="stretch")


def _per_team(ctx: Context, start: float, end: float) -> None:
    """Hourly allocated and busy hours per team, one small chart each."""
    st.subheader("Per team over time")
    hourly = data.usage_series(ctx.url, ctx.cluster, "team", start, end, 3600)
    if hourly.empty:
        st.caption("No team usage.")
        return
    hourly = hourly.assign(hour=hourly["t"], team=hourly["key"].replace("", "(no team)"))
    teams = sorted(hourly["team"].unique())[:MAX_TEAMS]
    long = hourly[hourly["team"].isin(teams)].melt(
        id_vars=["team", "hour"], value_vars=["allocated_gpu_hours", "busy_gpu_hours"],
        var_name="what", value_name="GPU-hours",
    )  # fmt: skip
    small = (
        alt.Chart(long)
        .mark_line()
        .encode(x=alt.X("hour:T", title=None), y=alt.Y("GPU-hours:Q"), color="what:N")
        .properties(width=230, height=140)  # three across fit 1,280 px beside the sidebar
        .facet(facet=alt.Facet("team:N", title=None), columns=3)
    )
    st.altair_chart(small)
