"""What every page shares: settings, who is looking, the cluster selector and the auth banner.

Settings come from the JSON file `gpufleet dashboard` wrote (its path after `--` on the
Streamlit command line, or preset in session state by tests). Approving needs an approver:
with st.login configured ([auth] in secrets.toml), a logged-in user whose e-mail the
`dashboard.approvers` list names; without it, only when `dashboard.unauthenticated_approvals`
says so (the demo), and every page then says that nobody is logged in.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import streamlit as st

from dashboards import data
from dashboards.settings import DashboardSettings, load_settings

SETTINGS_KEY = "gpufleet_settings_path"
CLUSTER_KEY = "cluster"
NO_LOGIN_ACTOR = "dashboard (no login)"


@dataclass(frozen=True, slots=True)
class Context:
    settings: DashboardSettings
    cluster: str
    """The selector's value: one cluster, or `data.ALL`."""
    clusters: tuple[str, ...]
    auth: bool
    """st.login is configured."""
    user: str | None
    """The logged-in user's e-mail (None: nobody logged in, or no auth configured)."""
    can_approve: bool
    why_not: str
    """Why approving is not allowed here ("" when it is)."""

    @property
    def url(self) -> str:
        return self.settings.store_url

    @property
    def actor(self) -> str:
        return self.user or NO_LOGIN_ACTOR

    @property
    def one_cluster(self) -> str | None:
        return None if self.cluster == data.ALL else self.cluster


def settings_path(argv: list[str] | None = None) -> str:
    preset = st.session_state.get(SETTINGS_KEY)
    if preset:
        return str(preset)
    p = argparse.ArgumentParser(prog="dashboards/app.py", add_help=False)
    p.add_argument("--settings", required=True)
    args, _ = p.parse_known_args(sys.argv[1:] if argv is None else argv)
    return str(args.settings)


@st.cache_resource(show_spinner=False)
def _settings(path: str, mtime: float) -> DashboardSettings:
    return load_settings(Path(path))


def settings() -> DashboardSettings:
    path = settings_path()
    return _settings(path, Path(path).stat().st_mtime)


def _auth_configured() -> bool:
    return st.secrets.load_if_toml_exists() and "auth" in st.secrets


def who(s: DashboardSettings) -> tuple[bool, str | None, bool, str]:
    """(auth configured, user, may approve, why not)."""
    if _auth_configured():
        if not st.user.is_logged_in:
            return True, None, False, "log in to approve"
        email = str(st.user.get("email") or "")
        if email and email in s.dashboard.approvers:
            return True, email, True, ""
        return True, email or None, False, f"{email or 'this user'} is not an approver"
    if s.dashboard.unauthenticated_approvals:
        return False, None, True, ""
    return False, None, False, "no login is configured (st.login) and approvals need one"


def context() -> Context:
    s = settings()
    known = data.clusters(s.store_url)
    clusters = tuple(sorted({*known, s.cluster}))
    auth, user, can, why = who(s)
    cluster = st.session_state.get(CLUSTER_KEY, s.cluster)
    if cluster != data.ALL and cluster not in clusters:
        cluster = s.cluster
    return Context(s, cluster, clusters, auth, user, can, why)


def sidebar(ctx: Context) -> None:
    """Cluster selector (when there is more than one) and login state."""
    with st.sidebar:
        if len(ctx.clusters) > 1:
            options = [data.ALL, *ctx.clusters]
            st.selectbox(
                "Cluster",
                options,
                index=options.index(ctx.cluster),
                key=CLUSTER_KEY,
            )
        else:
            st.caption(f"Cluster: **{ctx.clusters[0]}**")
        if ctx.auth:
            if ctx.user is None:
                st.button("Log in", on_click=st.login, type="primary")
            else:
                st.caption(f"Logged in as {ctx.user}" + (" (approver)" if ctx.can_approve else ""))
                st.button("Log out", on_click=st.logout)


def banner(ctx: Context) -> None:
    """Every page says when nobody is logged in."""
    if ctx.auth:
        return
    if ctx.can_approve:
        st.warning(
            "Demo mode: no login is configured, so anyone who can open this page can approve "
            "actions (recorded as 'dashboard (no login)'). Configure st.login for real use.",
            icon=":material/lock_open:",
        )
    else:
        st.info(
            "No login is configured (st.login): this dashboard is read-only.",
            icon=":material/lock:",
        )


def when(t: float | None) -> str:
    if t is None or t != t:
        return "-"
    return datetime.fromtimestamp(float(t), UTC).strftime("%Y-%m-%d %H:%M:%S")


def ago(t: float | None, now: float) -> str:
    if t is None or t != t:
        return "-"
    d = max(0.0, now - float(t))
    if d < 90:
        return f"{d:.0f}s ago"
    if d < 5400:
        return f"{d / 60:.0f}m ago"
    if d < 129600:
        return f"{d / 3600:.1f}h ago"
    return f"{d / 86400:.1f}d ago"


def run_page(render: Callable[[Context], None]) -> None:
    """A page file's whole body: context, sidebar (cluster, login), banner, the page."""
    ctx = context()
    sidebar(ctx)
    banner(ctx)
    render(ctx)


def live(ctx: Context, part: Callable[[Context], None]) -> None:
    """Draw `part` as a fragment that re-runs every `dashboard.refresh_seconds` on its own (the
    rest of the page stays as it is), so a queue or KPIs follow the fleet without a reload."""
    st.fragment(run_every=ctx.settings.dashboard.refresh_seconds)(part)(ctx)
