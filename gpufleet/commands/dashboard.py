"""`gpufleet dashboard --config F [--port 8501]`: the Streamlit dashboard over the journal.

Validates the config and the policy first (a mistake exits 2 naming file and field), prints the
URL, starts Streamlit on 127.0.0.1 as a child process and waits; Ctrl-C stops it, and on Linux
it dies with this process even on `kill -9` (gpufleet.children). Who may approve is the
config's `dashboard:` section (see dashboards.settings); st.login is configured in
`.streamlit/secrets.toml` ([auth]) in the directory you start it from.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dashboards.launcher import start
from dashboards.settings import DashboardSettings
from gpufleet.children import die_with_this_process
from gpufleet.config import GpufleetConfig, add_arguments, config_path, load_all, load_config
from remediations.policy import DEFAULT_POLICY
from simulator.serve import stop_on_signal


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "dashboard",
        help="serve the web dashboard (Streamlit) over the journal",
        description=__doc__,
    )
    add_arguments(p)
    p.add_argument(
        "--port", type=int, metavar="P", help="port on 127.0.0.1 (default: the config's, 8501)"
    )
    p.set_defaults(func=run)


def settings_of(cfg: GpufleetConfig, policy: Path | None, **dashboard: Any) -> DashboardSettings:
    """The dashboard's settings from a validated config (`dashboard` overrides its section);
    the job-name label keys are the service's source section's, so What-if names jobs as the
    service does."""
    section = cfg.dashboard.model_copy(update=dashboard) if dashboard else cfg.dashboard
    return DashboardSettings(
        store_url=cfg.store_url,
        cluster=cfg.cluster,
        policy=str(policy.resolve()) if policy is not None else None,
        dashboard=section,
        metering=cfg.metering,
        job_label_keys=tuple(cfg.service.source.job_label_keys),
    )


def policy_path(args: argparse.Namespace) -> Path | None:
    """The policy file the engine would use (None: the shipped default)."""
    if getattr(args, "policy", None):
        return Path(args.policy)
    cfg, cfg_path = load_config(config_path(getattr(args, "config", None)))
    if cfg.policy is None:
        return None
    base = cfg_path.parent if cfg_path is not None else Path.cwd()
    p = base / cfg.policy
    return None if p.resolve() == DEFAULT_POLICY.resolve() else p


def run(args: argparse.Namespace) -> int:
    cfg, _policy = load_all(args)  # ConfigError -> exit 2 before anything starts
    settings = settings_of(cfg, policy_path(args))
    port = args.port if args.port is not None else settings.dashboard.port
    with stop_on_signal() as stop:
        dash = start(settings, port, quiet=False, child_setup=die_with_this_process())
        print(f"gpufleet dashboard: {dash.url}", flush=True)
        try:
            if not dash.wait_ready():
                print("gpufleet dashboard: Streamlit did not start (see above)", file=sys.stderr)
                return 1
            while not stop.wait(0.5):
                if not dash.alive():
                    print("gpufleet dashboard: Streamlit exited", file=sys.stderr)
                    return 1
        finally:
            dash.stop()
    return 0
