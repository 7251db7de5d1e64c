"""Remediation: the approval queue (Approve/Reject for approvers), breaker and pause, what is
out of service and where its repair stands, history and the audit trail. Every button goes
through dashboards.control, i.e. the engine."""

from __future__ import annotations

import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from dashboards import control, data, repairs
from dashboards.shell import Context, ago, live, when

HISTORY = 7 * 86400.0
GATE_RESULTS = ("expired:", "no longer needed")
PICK_ROWS = 500
CELL_CHARS = 40
"""About what the outcome cell shows at 1,280 px."""


def outcome(row: pd.Series) -> str:
    """What became of an action, in words; an approval the gate then refused says so."""
    state, result = str(row["state"]), str(row["result"] or "")
    person = row["approved_by"] if isinstance(row["approved_by"], str) else None
    if state == "denied":
        return "denied: " + "; ".join(row["reasons"] or [])
    if state == "expired" and result and not result.startswith(GATE_RESULTS):
        who = person or f"the policy ({row['mode']})"
        return f"approved by {who}, then denied by the gate: {result}"
    if state in ("approved", "rejected") and person:
        return f"{state} by {person}" + (f": {result}" if result else "")
    if person and not person.startswith("policy"):  # who let a disruptive action run
        return f"approved by {person}; {result or state}"
    return result or state


def controls(ctx: Context) -> None:
    states = data.engine_states(ctx.url, ctx.cluster)
    clusters = [ctx.cluster] if ctx.one_cluster else list(ctx.clusters)
    for cluster in clusters:
        row = states[states["cluster"] == cluster]
        paused = bool(row["paused"].iloc[0]) if not row.empty else False
        tripped = bool(row["breaker_tripped"].iloc[0]) if not row.empty else False
        c = st.columns([2, 3, 2])
        c[0].markdown(f"**{cluster}**")
        if tripped:
            c[1].error(
                f"Breaker TRIPPED {when(row['breaker_tripped_at'].iloc[0])}: "
                f"{row['breaker_reason'].iloc[0]}"
            )
            if c[2].button(
                "Reset breaker", key=f"reset_{cluster}", disabled=not ctx.can_approve,
                help=ctx.why_not or None,
            ):  # fmt: skip
                st.toast(control.reset_breaker(ctx, cluster).message)
                st.rerun()
        else:
            c[1].success("Breaker closed")
        want = c[2].toggle(
            "Automation paused",
            value=paused,
            key=f"pause_{cluster}",
            disabled=not ctx.can_approve,
            help=ctx.why_not or "stop every automatic action (the engine still decides)",
        )
        if want != paused:
            st.toast(control.set_paused(ctx, cluster, want).message)
            st.rerun()
        if paused and not row.empty:
            c[1].warning(f"Paused by {row['paused_by'].iloc[0]}: {row['paused_reason'].iloc[0]}")


def queue(ctx: Context) -> None:
    pending = data.actions(ctx.url, ctx.cluster, states=("awaiting_approval",))
    st.subheader(f"Awaiting approval ({len(pending)})")
    if pending.empty:
        st.caption("Nothing waits for a person.")
        return
    now = data.now()
    for _, a in pending.head(50).iterrows():
        with st.container(border=True):
            c = st.columns([5, 1, 1])
            c[0].markdown(
                f"**{a['playbook']}** on `{a['target']}` · rule {a['rule']} · "
                f"cluster {a['cluster']} · asked {ago(a['created_at'], now)} · "
                f"expires {when(a['deadline'])}  \n"
                + "; ".join(a["reasons"] or [])
                + f"  \n`{a['id']}` for incident `{a['incident_id']}`"
                + (" · shadow" if a["shadow"] else "")
            )
            why = data.stale(ctx.url, str(a["cluster"]), str(a["id"]))
            if why is not None:
                c[0].warning(f"Stale: {why}. Approving it now expires it.")
            help_text = ctx.why_not or None
            if c[1].button(
                "Approve", key=f"approve_{a['id']}", type="primary",
                disabled=not ctx.can_approve, help=help_text,
            ):  # fmt: skip
                _decided(control.decide(ctx, str(a["cluster"]), str(a["id"]), True))
            if c[2].button(
                "Reject", key=f"reject_{a['id']}", disabled=not ctx.can_approve, help=help_text
            ):
                _decided(control.decide(ctx, str(a["cluster"]), str(a["id"]), False, "rejected"))


def _decided(result: control.Outcome) -> None:
    st.session_state["last_decision"] = (result.ok, result.message)
    st.rerun()


def out_of_service(ctx: Context) -> None:
    """Each GPU or node gpufleet took out: grain, since when, latest repair and diagnostic,
    and its state; the ones a person must act on first, as errors."""
    out = data.out_of_service(ctx.url, ctx.cluster, data.now() - HISTORY)  # returns: a week
    away = data.away(out)
    st.subheader(f"Out of service ({len(away)})")
    if out.empty:
        st.caption("gpufleet has taken no GPU or node out of service.")
        return
    out = out.assign(order=out["state"].map(repairs.STATES.index)).sort_values(
        ["order", "since", "target"]
    )
    for _, r in out[out["state"] == repairs.MARKED].iterrows():
        st.error(
            f"**{r['target']}** on {r['node']} ({r['cluster']}): diagnostic {r['diagnostic']}, "
            "marked for hardware replacement: a person must replace or re-test it"
        )
    table = out.assign(
        since=out["since"].map(when),
        returned=out["returned_at"].map(when),
    )
    st.dataframe(
        table[["state", "target", "node", "grain", "since", "diagnostic", "repair", "taken_by",
               "returned", "cluster"]],
        hide_index=True,
        width="stretch",
    )  # fmt: skip


def history(ctx: Context) -> None:
    acts = data.actions(ctx.url, ctx.cluster, since=data.now() - HISTORY)
    st.subheader("History (7 days)")
    if acts.empty:
        st.caption("No action in the last 7 days.")
        return
    h = acts.assign(
        created=acts["created_at"].map(when),
        updated=acts["updated_at"].map(when),
        outcome=acts.apply(outcome, axis=1),
    )
    st.dataframe(
        h[["id", "cluster", "playbook", "target", "mode", "state", "outcome", "created",
           "updated"]],
        hide_index=True,
        width="stretch",
        column_config={
            "id": st.column_config.TextColumn(width="small"),
            "outcome": st.column_config.TextColumn(width="large"),
        },
    )  # fmt: skip
    opened(h)


def opened(h: pd.DataFrame) -> None:
    """One action's whole outcome as wrapping text: a table cell cuts a drain's list of evicted
    pods at 1,280 px ("…evicted 2 p…"). It opens on the first outcome longer than a cell."""
    rows = {str(r["id"]): r for _, r in h.head(PICK_ROWS).iterrows()}
    cut = [i for i, r in rows.items() if len(str(r["outcome"])) > CELL_CHARS]
    pick = st.selectbox(
        "Open an action (its whole outcome)",
        list(rows),
        index=list(rows).index(cut[0]) if cut else 0,
        format_func=lambda i: (
            f"{i[:8]} · {rows[i]['playbook']} on {rows[i]['target']} · {rows[i]['state']}"
        ),
        key="hist_pick",
    )
    if pick is None:
        return
    r = rows[pick]
    st.markdown(
        f"**{r['playbook']}** on `{r['target']}` ({r['mode']}, {r['state']}; created "
        f"{r['created']}, updated {r['updated']})"
    )
    st.text(str(r["outcome"]))


def trail(ctx: Context) -> None:
    st.subheader("Audit trail")
    log = data.audit(ctx.url, ctx.cluster)
    if log.empty:
        st.caption("The audit log is empty.")
        return
    log = log.assign(at=log["at"].map(when))
    st.dataframe(
        log[["id", "at", "cluster", "actor", "kind", "target", "message"]].head(500),
        hide_index=True,
        width="stretch",
    )


def render(ctx: Context) -> None:
    st.title("Remediation")
    done = st.session_state.pop("last_decision", None)
    if done:
        ok, message = done
        (st.success if ok else st.error)(message)
    controls(ctx)
    live(ctx, queue)
    out_of_service(ctx)
    history(ctx)
    trail(ctx)
