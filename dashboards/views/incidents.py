"""Incidents: filter, see them on a timeline, and open one for its evidence and its history."""

from __future__ import annotations

import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from dashboards import data
from dashboards import history as gpu_history
from dashboards.shell import Context, ago, when
from dashboards.views import charts, evidence
from errors import GpufleetError

PERIODS = {
    "6 hours": 6 * 3600.0,
    "24 hours": 86400.0,
    "7 days": 7 * 86400.0,
    "30 days": 30 * 86400.0,
}
TIMELINE_ROWS = 300
PICK_ROWS = 500
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


def worst_first(df: pd.DataFrame) -> pd.DataFrame:
    """Open before resolved, critical before warning before info, then newest first: the page
    opens on what a person should look at first, not on the latest resolved blip."""
    key = pd.DataFrame(
        {
            "closed": df["status"] != "open",
            "sev": df["severity"].map(SEVERITY_RANK).fillna(3),
            "age": -df["opened_at"].astype(float),
        },
        index=df.index,
    )
    return df.loc[key.sort_values(["closed", "sev", "age"], kind="stable").index]


def text(v: object) -> str:
    return v if isinstance(v, str) and v else "-"


def filtered(df: pd.DataFrame) -> pd.DataFrame:
    c = st.columns(5)
    kinds = c[0].multiselect("Kind", sorted(df["kind"].unique()), key="inc_kind")
    sev = c[1].multiselect("Severity", ["critical", "warning", "info"], key="inc_sev")
    state = c[2].multiselect("State", ["open", "resolved"], key="inc_state")
    node = c[3].text_input("Node contains", key="inc_node")
    job = c[4].text_input("Job contains", key="inc_job")
    keep = pd.Series(True, index=df.index)
    if kinds:
        keep &= df["kind"].isin(kinds)
    if sev:
        keep &= df["severity"].isin(sev)
    if state:
        keep &= df["status"].isin(state)
    if node:
        keep &= df["node"].fillna("").str.contains(node, regex=False)
    if job:
        keep &= df["job"].fillna("").str.contains(job, regex=False)
    return df[keep]


def history(ctx: Context, cluster: str, incident_id: str) -> None:
    acts = data.actions(ctx.url, cluster, incident_id=incident_id)
    trail = data.audit(ctx.url, cluster, incident_id=incident_id)
    st.markdown("**What happened to it**")
    if acts.empty and trail.empty:
        st.caption("No decision or action recorded for this incident.")
        return
    if not acts.empty:
        st.dataframe(
            acts[["id", "playbook", "target", "state", "decision", "reasons", "result"]],
            hide_index=True,
            width="stretch",
        )
    if not trail.empty:
        t = trail.assign(at=trail["at"].map(when))
        st.dataframe(t[["at", "actor", "kind", "message"]], hide_index=True, width="stretch")


def detail(ctx: Context, row: pd.Series, now: float) -> None:
    ev = data.evidence(ctx.url, str(row["id"]))
    st.subheader(f"{row['kind']} · {row['severity']} · {row['status']}")
    st.write(row["summary"])
    c = st.columns(2)
    c[0].metric("Opened", ago(row["opened_at"], now))
    c[1].metric("Last seen", ago(row["last_seen"], now))
    job = row["job"] if isinstance(row["job"], str) else ev.get("job")
    # Names as text, not metrics: a job name is longer than a metric tile at 1,280 px.
    st.markdown(f"**Node** `{text(row['node'])}` · **Job** `{text(job)}`")
    next_step(ctx, row)
    left, right = st.columns([3, 2])
    with left:
        st.markdown("**Evidence the detector used** (at its last reading; one panel per metric)")
        shown = evidence.panels(ev)
        if not shown:
            st.caption("No comparison in the evidence (see the raw evidence).")
        for metric, frame in shown:
            st.altair_chart(evidence.panel(metric, frame), width="stretch")
    with right:
        st.json(ev, expanded=False)
    around_start(ctx, row, ev)
    history(ctx, str(row["cluster"]), str(row["id"]))


NEXT = {
    "awaiting_approval": "waits for a person: approve or reject it on the Remediation page or "
    "with `gpufleet actions approve|reject ID`",
    "approved": "approved: runs at the next cycle (the gates are checked again first)",
    "executing": "running now",
    "verifying": "done, being verified against the cluster",
    "done": "done",
    "failed": "failed: see its result below; a person decides what next",
    "rejected": "rejected by a person: nothing more is done for this incident",
    "expired": "expired unanswered: nothing more is done unless the incident comes back",
    "denied": "denied by a gate (reason below)",
    "shadow": "shadow: journaled what it would do; nothing is written",
}


def actions_for(ctx: Context, cluster: str, incident_id: str) -> pd.DataFrame:
    """The incident's own actions and those it joined: a second incident of a node already
    being drained merges into that drain (a `merge` audit row) instead of asking again."""
    own = data.actions(ctx.url, cluster, incident_id=incident_id)
    merges = data.audit(ctx.url, cluster, kinds=("merge",), incident_id=incident_id)
    joined = set(merges["action_id"].dropna()) - set(own["id"]) if not merges.empty else set()
    if not joined:
        return own
    every = data.actions(ctx.url, cluster)
    return pd.concat([own, every[every["id"].isin(joined)]], ignore_index=True)


def next_step(ctx: Context, row: pd.Series) -> None:
    """The incident's playbook, its state and what happens next, under its header."""
    acts = actions_for(ctx, str(row["cluster"]), str(row["id"]))
    if acts.empty:
        st.info("No action: the policy only notifies for this incident (Policy page).")
        return
    for _, a in acts.iterrows():
        state = str(a["state"])
        text = f"**{a['playbook']}** on `{a['target']}` ({a['id'][:8]}): {NEXT.get(state, state)}"
        (st.warning if state == "awaiting_approval" else st.info)(text)


def around_start(ctx: Context, row: pd.Series, ev: dict[str, object]) -> None:
    """The fields the detector read for this GPU, ±30 min around the incident's start, with its
    peers' median and the evidence's thresholds, each on the field in its unit."""
    st.markdown("**Around its start** (this GPU, its peers' median, the thresholds)")
    url = ctx.settings.dashboard.prometheus_url
    fields = gpu_history.fields_for(str(row["kind"]))
    gpu = row["gpu_uuid"] if isinstance(row["gpu_uuid"], str) else ""
    if not url:
        st.caption("No history charts: the store keeps only the last reading. Set "
                   "`dashboard.prometheus_url` in the gpufleet config to chart the metrics "
                   "the detector used around the incident's start.")  # fmt: skip
        return
    if not fields or not gpu:
        st.caption("No history charts: this incident names no GPU, or its detector reads no "
                   "per-GPU DCGM field.")  # fmt: skip
        return
    try:
        frame = gpu_history.around(url, gpu, str(row["kind"]), float(row["opened_at"]))
    except GpufleetError as e:
        st.warning(f"Prometheus at {url} could not answer: {e}")
        return
    if frame.empty:
        st.caption(f"Prometheus holds none of {', '.join(fields)} for {gpu} in this window.")
        return
    drawn, apart = evidence.thresholds_by_field(fields, ev)
    for f in fields:
        part = frame[frame["field"] == f]
        if not part.empty:
            chart = charts.history_lines(
                part, drawn[f], float(row["opened_at"]), evidence.field_unit(f)
            )
            st.altair_chart(chart, width="stretch")
    if apart:
        st.caption("Thresholds in no charted field's unit (not drawn): "
                   + ", ".join(f"{k} {v:g}" for k, v in apart.items()))  # fmt: skip


def render(ctx: Context) -> None:
    st.title("Incidents")
    now = data.now()
    period = (
        st.segmented_control("Period", list(PERIODS), default="24 hours", key="inc_period")
        or "24 hours"
    )
    df = data.incidents(ctx.url, ctx.cluster, now - PERIODS[period])
    if df.empty:
        st.info("No incidents in this period.")
        return
    df = worst_first(filtered(df))
    counts = df["status"].value_counts()
    c = st.columns(3)
    c[0].metric("Incidents", len(df))
    c[1].metric("Open", int(counts.get("open", 0)))
    c[2].metric("Resolved", int(counts.get("resolved", 0)))
    if df.empty:
        st.info("No incident matches these filters.")
        return
    st.altair_chart(charts.timeline(df.head(TIMELINE_ROWS), now), width="stretch")
    shown = df.assign(
        opened=df["opened_at"].map(when),
        resolved=df["resolved_at"].map(when),
        node=df["node"].map(text),
        job=df["job"].map(text),
    )
    st.dataframe(
        shown[["id", "cluster", "kind", "severity", "status", "node", "job", "opened", "resolved",
               "summary"]].head(PICK_ROWS),
        hide_index=True,
        width="stretch",
    )  # fmt: skip
    ids = list(df["id"].head(PICK_ROWS))
    wanted = st.query_params.get("incident")
    index = ids.index(wanted) if wanted in ids else 0
    label = dict(zip(df["id"], df["kind"] + " · " + df["summary"].str.slice(0, 80), strict=True))
    pick = st.selectbox(
        "Open an incident", ids, index=index, format_func=lambda i: f"{i} · {label[i]}",
        key="inc_pick",
    )  # fmt: skip
    if pick is not None:
        detail(ctx, df[df["id"] == pick].iloc[0], now)
