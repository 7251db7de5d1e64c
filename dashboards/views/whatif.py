"""What-if: pick a past window and a policy file, run the backtest (progress and time left
shown), and see what the detectors would have found and the policy would have done, beside what
actually happened in the journal over the same window."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pandas as pd  # type: ignore[import-untyped]
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from backtesting.backtest import Backtest
from dashboards import data, whatif
from dashboards.shell import Context, when
from errors import ConfigError, GpufleetError

STEPS = {"15 s": 15.0, "30 s": 30.0, "1 min": 60.0, "5 min": 300.0}


def _ts(v: object) -> float:
    assert isinstance(v, datetime)
    return (v if v.tzinfo else v.replace(tzinfo=UTC)).timestamp()


def names(v: object) -> str:
    """A node or job name, or "-" where the finding names none (not "None")."""
    return v if isinstance(v, str) and v else "-"


def actual(ctx: Context, start: float, end: float) -> None:
    st.markdown("**What actually happened** (journal)")
    inc = data.incidents(ctx.url, ctx.cluster, start, end)
    acts = data.actions(ctx.url, ctx.cluster, since=start)
    acts = acts[acts["created_at"] <= end] if not acts.empty else acts
    if inc.empty and acts.empty:
        st.caption("Nothing in the journal for this window.")
        return
    if not inc.empty:
        inc = inc.assign(node=inc["node"].map(names), job=inc["job"].map(names))
        st.dataframe(inc[["kind", "severity", "node", "job", "summary"]], hide_index=True,
                     width="stretch")  # fmt: skip
    if not acts.empty:
        st.dataframe(acts[["playbook", "target", "state", "decision"]], hide_index=True,
                     width="stretch")  # fmt: skip


def render(ctx: Context) -> None:
    st.title("What-if")
    url = ctx.settings.dashboard.prometheus_url
    if not url:
        st.info("Set `dashboard.prometheus_url` in the gpufleet config to replay history here "
                "(or run `gpufleet backtest` on the command line).")  # fmt: skip
        return
    # The inputs hold whole minutes: the default end is the next one (the run stops at now), so
    # the last minute, where the newest incident is, is in the window.
    now = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    c = st.columns(4)
    t0 = c[0].datetime_input("Start (UTC)", value=now - timedelta(hours=1), key="wi_start")
    t1 = c[1].datetime_input("End (UTC)", value=now, key="wi_end", help="a later end stops at now")
    step = STEPS[c[2].selectbox("Step", list(STEPS), index=1, key="wi_step") or "30 s"]
    choices = whatif.policies(ctx.settings.policy)
    label = c[3].selectbox("Policy", list(choices), key="wi_policy") or next(iter(choices))
    cluster = ctx.one_cluster or ctx.settings.cluster
    if not st.button("Run backtest", type="primary", key="wi_run"):
        return
    start, end = _ts(t0), _ts(t1)
    bar = st.progress(0.0, text="starting")
    partial = st.empty()
    show = _progress(bar, partial)
    try:
        result = whatif.run(url, start, end, step, choices[label], cluster, show,
                            job_label_keys=ctx.settings.job_label_keys)  # fmt: skip
    except ConfigError as exc:
        st.error(exc.render())
        return
    except (GpufleetError, ValueError) as exc:
        st.error(f"The backtest could not run: {exc}")
        return
    partial.empty()
    st.success(result.summary())
    left, right = st.columns(2)
    with left:
        _replayed(result, label)
    with right:
        actual(ctx, start, end)


def _progress(bar: DeltaGenerator, partial: DeltaGenerator) -> Callable[[whatif.Eta], None]:
    """A progress callback: the bar moves, and the findings so far show while the run goes on."""
    shown = [0]

    def show(eta: whatif.Eta) -> None:
        bar.progress(eta.fraction, text=eta.text())
        if len(eta.episodes) > shown[0]:
            shown[0] = len(eta.episodes)
            so_far = pd.DataFrame([f.to_json() for f in eta.episodes])
            so_far["first_seen"] = so_far["first_seen"].map(when)
            so_far = so_far.assign(node=so_far["node"].map(names), job=so_far["job"].map(names))
            with partial.container():
                st.caption(f"Found so far: {len(eta.episodes)} finding episodes")
                st.dataframe(so_far[["kind", "severity", "node", "job", "first_seen"]],
                             hide_index=True, width="stretch")  # fmt: skip

    return show


def _replayed(result: Backtest, label: str) -> None:
    """What the detectors would have found in the window and what the policy would have done."""
    st.markdown(f"**What the detectors would have found and {label} would have done**")
    found = pd.DataFrame([f.to_json() for f in result.episodes])
    if found.empty:
        st.caption("No findings.")
    else:
        found["first_seen"] = found["first_seen"].map(when)
        found = found.assign(node=found["node"].map(names), job=found["job"].map(names))
        st.dataframe(found[["kind", "severity", "node", "job", "first_seen", "summary"]],
                     hide_index=True, width="stretch")  # fmt: skip
    acts = pd.DataFrame([a.to_json() for a in result.actions])
    if not acts.empty:
        acts["decided_at"] = acts["decided_at"].map(when)
        st.dataframe(acts[["playbook", "target", "decision", "decided_at", "reasons"]],
                     hide_index=True, width="stretch")  # fmt: skip
