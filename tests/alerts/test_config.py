"""The `alerts:` section: defaults, and mistakes named by file and field path (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from alerts import AlertsConfig, load_alerts_config
from alerts.routing import RateBudget, quiet_until, route
from errors import ConfigError
from gpufleet.config import load_config


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "gpufleet.yaml"
    p.write_text(text)
    return p


def test_defaults_without_a_section(tmp_path: Path) -> None:
    cfg = load_alerts_config(write(tmp_path, "cluster: c1\n"))
    assert cfg == AlertsConfig(base_dir=str(tmp_path))
    assert cfg.secret("token") is None and cfg.slack.approvers.users == ()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "alerts: {slack: {routes: [{channel: C1, kinds: [gpu_xyz]}]}}",
            "alerts.slack.routes[0].kinds",
        ),
        ("alerts: {slack: {approvers: {users: [alice]}}}", "alerts.slack.approvers.users"),
        (
            "alerts: {slack: {quiet_hours: {start: '25:00', end: '07:00'}}}",
            "alerts.slack.quiet_hours.start",
        ),
        (
            "alerts: {slack: {quiet_hours: {start: '22:00', end: '07:00', timezone: Mars/Base}}}",
            "timezone",
        ),
        ("alerts: {alertmanager: {url: 'localhost:9093'}}", "alerts.alertmanager.url"),
        ("alerts: {slack: {token: x, token_file: y}}", "alerts.slack"),
        ("alerts: {slak: {}}", "alerts.slak: unknown field"),
    ],
)
def test_mistakes_name_file_and_field_path(tmp_path: Path, text: str, problem: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_alerts_config(path)
    assert str(path) in str(err.value) and problem in str(err.value)
    with pytest.raises(ConfigError) as err2:  # the top-level config says the same
        load_config(path)
    assert problem in str(err2.value)


def test_secret_files_are_read_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("s3cret\n")
    cfg = load_alerts_config(write(tmp_path, "alerts: {slack: {signing_secret_file: secret}}"))
    assert cfg.secret("signing_secret") == "s3cret"
    with pytest.raises(ConfigError, match=r"alerts\.slack\.token_file: cannot read"):
        load_alerts_config(write(tmp_path, "alerts: {slack: {token_file: missing}}"))


def test_routing_quiet_hours_and_budget() -> None:
    cfg = AlertsConfig.model_validate(
        {
            "slack": {
                "routes": [
                    {"channel": "C1", "kinds": ["nccl_hang"]},
                    {"channel": "C2", "min_severity": "critical"},
                ],
                "quiet_hours": {"start": "22:00", "end": "07:00", "timezone": "UTC"},
            }
        }
    ).slack
    assert route(cfg, "nccl_hang", "info") == "C1"
    assert route(cfg, "gpu_xid", "critical") == "C2"
    assert route(cfg, "gpu_xid", "warning") == cfg.default_channel
    night = 1_800_000_000.0 - (1_800_000_000 % 86400) + 23 * 3600  # 23:00 UTC
    held = quiet_until(cfg.quiet_hours, "warning", night)
    assert held == night + 8 * 3600  # 07:00 next morning
    assert quiet_until(cfg.quiet_hours, "critical", night) is None
    assert quiet_until(cfg.quiet_hours, "warning", night - 12 * 3600) is None
    b = RateBudget(per_minute=60)
    assert all(b.take("C1", 0.0) for _ in range(5)) and not b.take("C1", 0.0)
    assert b.take("C2", 0.0) and b.take("C1", 1.0)


def test_top_level_config_section_with_secret_files(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("xoxb-from-file\n")
    path = write(
        tmp_path, "cluster: c1\nalerts: {slack: {token_file: token, signing_secret_file: gone}}\n"
    )
    cfg, _ = load_config(path)
    alerts = cfg.alerts.relative_to(path)
    assert alerts.secret("token") == "xoxb-from-file"
    with pytest.raises(ConfigError, match=r"alerts\.slack\.signing_secret_file: cannot read"):
        alerts.secret("signing_secret")
