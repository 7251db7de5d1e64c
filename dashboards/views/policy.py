"""Policy: the effective policy and its schedule, the budgets in use now, the cooldowns running,
and why recent actions were denied (by the decision gates or, after an approval, by the runner)."""

from __future__ import annotations

import pandas as pd  # type: ignore[import-untyped]
import streamlit as st
import yaml

from dashboards import data
from dashboards.shell import Context, when
from remediations.decision_journal import summarize
from remediations.policy import DEFAULT_POLICY, Policy, load_policy

DENIALS = 86400.0


@st.cache_resource(show_spinner=False)
def policy(path: str | None) -> Policy:
    return load_policy(path)


def budgets(ctx: Context, p: Policy, cluster: str, now: float) -> None:
    g = p.gates
    horizon = now - max(g.attempts.window, 3600.0, g.attempts.cooldown)
    briefs = data.store(ctx.url, cluster).briefs(horizon)
    open_ids = set(data.incidents(ctx.url, cluster, now)["id"].astype(str))
    ledger = summarize(briefs, open_ids, cluster=cluster).ledger
    started = sum(1 for t in ledger.times if t >= now - 3600.0)
    c = st.columns(3)
    c[0].metric("Actions started in the last hour", f"{started} / {g.rate.max_actions_per_hour}")
    held = f"{len(ledger.held)} / {g.blast_radius.max_nodes}"
    c[1].metric("GPU nodes held by disruptive actions", held)
    c[2].metric("Max share of a pool", f"{g.blast_radius.max_percent_of_pool:g}%")
    rows = [
        {
            "playbook": pb,
            "target": target,
            "last action": when(times[-1]),
            "cooldown ends": when(times[-1] + g.attempts.cooldown),
            "attempts in window": sum(1 for t in times if t >= now - g.attempts.window),
        }
        for (pb, target), times in ledger.by_target.items()
        if times and times[-1] + g.attempts.cooldown > now
    ]
    a = g.attempts
    st.markdown(
        f"**Cooldowns running** (cooldown {a.cooldown:.0f}s, "
        f"max {a.max_attempts} attempts per {a.window:.0f}s)"
    )
    if rows:
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    else:
        st.caption("No target is cooling down.")


def denials(ctx: Context, now: float) -> None:
    st.subheader("Why recent actions were denied (24 h)")
    log = data.audit(ctx.url, ctx.cluster, since=now - DENIALS, kinds=("decision", "transition"))
    if log.empty:
        st.caption("Nothing denied.")
        return
    msg = log["message"].fillna("")
    denied = log[msg.str.endswith(": deny") | msg.str.startswith("approved -> expired (")]
    if denied.empty:
        st.caption("Nothing denied.")
        return

    def why(row: pd.Series) -> str:
        reasons = (row["detail"] or {}).get("reasons")
        if reasons:
            return "; ".join(str(r) for r in reasons)
        m = str(row["message"])
        return m[m.find("(") + 1 : -1] if "(" in m else m

    shown = collapse(denied.assign(why=denied.apply(why, axis=1)))
    st.dataframe(
        shown[["last", "times", "cluster", "target", "message", "why"]],
        hide_index=True,
        width="stretch",
        column_config={"times": st.column_config.NumberColumn("times", format="%d ×")},
    )


def collapse(denied: pd.DataFrame) -> pd.DataFrame:
    """One row per (cluster, target, message, why) with how many times and the latest time,
    newest first: eight identical notify-only denials are one row with a count."""
    keys = ["cluster", "target", "message", "why"]
    g = denied.groupby(keys, sort=False, dropna=False)["at"].agg(["max", "size"]).reset_index()
    g = g.sort_values("max", ascending=False)
    return g.assign(last=g["max"].map(when), times=g["size"])


def schedule(ctx: Context, p: Policy) -> None:
    """The policy's maintenance windows and the service's scheduled jobs, side by side: a
    maintenance job that drains every other minute is a schedule too."""
    st.subheader("Schedule")
    left, right = st.columns(2)
    mw = p.gates.maintenance
    with left:
        st.markdown("**Maintenance windows** (policy)")
        if mw.windows:
            st.dataframe(
                pd.DataFrame(
                    [
                        {"days": ", ".join(d.value for d in w.days), "start": w.start,
                         "end": w.end, "timezone": w.timezone}
                        for w in mw.windows
                    ]
                ),
                hide_index=True,
            )  # fmt: skip
            st.caption(f"Applies to: {', '.join(mw.applies_to)}")
        else:
            st.caption("None in the policy: approved actions may run at any time.")
    with right:
        st.markdown("**Scheduled jobs** (the service's last run of each)")
        runs = data.job_runs(ctx.url, ctx.cluster)
        if runs.empty:
            st.caption("No scheduled job has run yet (`service.schedule` of `gpufleet run`).")
            return
        shown = runs.assign(
            last_run=runs["last_fire"].map(when),
            ok=runs["last_ok"].map(lambda v: "-" if v is None or v != v else "yes" if v else "no"),
        )
        st.dataframe(
            shown[["job", "kind", "last_run", "ok", "last_outcome"]],
            hide_index=True,
            width="stretch",
        )


def render(ctx: Context) -> None:
    st.title("Policy")
    path = ctx.settings.policy
    p = policy(path)
    now = data.now()
    st.caption(f"Policy file: `{path or DEFAULT_POLICY}` · actuation **{p.actuation.value}**"
               + (" (decisions are journaled, nothing is written to Kubernetes)"
                  if p.actuation.value == "shadow" else ""))  # fmt: skip
    rules = pd.DataFrame(
        [
            {
                "rule": r.name,
                "kinds": ", ".join(k.value for k in r.match.kinds) or "any",
                "severities": ", ".join(s.value for s in r.match.severities) or "any",
                "playbook": r.playbook,
                "mode": r.mode.value,
                "actuation": p.actuation_of(r).value,
            }
            for r in p.rules
        ]
    )
    st.subheader("Rules")
    st.dataframe(rules, hide_index=True, width="stretch")
    schedule(ctx, p)
    st.subheader("Budgets in use")
    for cluster in [ctx.cluster] if ctx.one_cluster else list(ctx.clusters):
        if not ctx.one_cluster:
            st.markdown(f"**{cluster}**")
        budgets(ctx, p, cluster, now)
    denials(ctx, now)
    with st.expander("Effective policy (YAML)"):
        st.code(yaml.safe_dump(p.model_dump(mode="json"), sort_keys=False), language="yaml")
