"""`service:` config: bad keys, bad cron expressions, unknown time zones and bad job params exit
2 naming the file and the field path; a good file loads with every default filled in."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.cli import main
from gpufleet.config import load_config

GOOD = """
cluster: test
service:
  interval: 15s
  schedule:
    - name: nightly
      kind: maintenance_window
      cron: "0 22 * * mon-fri"
      timezone: Europe/Berlin
      params: {window: 6h, max_nodes: 2}
    - name: diag
      kind: diagnose_and_return
      cron: "*/30 * * * *"
      params: {image: registry.local/dcgm:4, wait: 5m}
"""


def _run(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    f = tmp_path / "gpufleet.yaml"
    f.write_text(text)
    rc = main(["run", "--config", str(f)])
    return rc, capsys.readouterr().err


def test_good_config_loads_with_defaults(tmp_path: Path) -> None:
    f = tmp_path / "gpufleet.yaml"
    f.write_text(GOOD)
    cfg, _ = load_config(f)
    svc = cfg.service
    assert svc.interval == 15.0
    assert [e.name for e in svc.schedule] == ["nightly", "diag"]
    assert svc.schedule[0].misfire_grace == 600.0
    assert svc.schedule[0].parsed_params().model_dump()["window"] == 6 * 3600.0
    assert svc.leader_election.enabled is False
    assert svc.http.port == 8080


@pytest.mark.parametrize(
    ("patch", "where", "expected"),
    [
        (('cron: "0 22 * * mon-fri"', 'cron: "0 25 * * *"'), "service.schedule[0].cron", "crontab"),
        (
            ('cron: "0 22 * * mon-fri"', 'cron: "every night"'),
            "service.schedule[0].cron",
            "crontab",
        ),
        (
            ("timezone: Europe/Berlin", "timezone: Mars/Olympus"),
            "service.schedule[0].timezone",
            "IANA",
        ),
        (("interval: 15s", "intervall: 15s"), "service.intervall", "unknown field"),
        (
            ("kind: maintenance_window", "kind: reboot_everything"),
            "service.schedule[0].kind",
            "one of",
        ),
        (("max_nodes: 2", "max_node: 2"), "service.schedule[0].params", "max_node"),
        (("wait: 5m", "wait: soon"), "service.schedule[1].params", "wait"),
    ],
)
def test_bad_config_exits_2_naming_file_and_field(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    patch: tuple[str, str],
    where: str,
    expected: str,
) -> None:
    assert patch[0] in GOOD
    rc, err = _run(tmp_path, GOOD.replace(patch[0], patch[1]), capsys)
    assert rc == 2
    assert "gpufleet.yaml" in err
    assert where in err
    assert expected in err


def test_duplicate_names_and_renew_period(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, err = _run(tmp_path, GOOD.replace("name: diag", "name: nightly"), capsys)
    assert rc == 2 and "service.schedule" in err and "twice" in err
    bad = GOOD + "  leader_election: {enabled: true, lease_duration: 10s, renew_every: 10s}\n"
    rc, err = _run(tmp_path, bad, capsys)
    assert rc == 2 and "service.leader_election.renew_every" in err
