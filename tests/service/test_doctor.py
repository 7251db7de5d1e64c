"""`gpufleet doctor` against the simulator's Kubernetes API, a real Prometheus scraping it, the
local Slack Web API server and a real Alertmanager: a healthy setup passes (exit 0), and each
failure in turn shows its row with the fix, exit 1 only for what would stop the service."""

from __future__ import annotations

import copy
import io
import time
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.cli import main
from harness.k8s_sim import small_scenario
from harness.slack_server import SlackServer
from simulator.serve import SimulationHandle, start_simulation
from tests.alerts.alertmanager_fixture import Alertmanager, alertmanager, available
from tests.live_prometheus import scraping_prometheus, wait_for_every_target, wait_for_series
from tests.prometheus_fixture import PrometheusHandle

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulationHandle]:
    tmp = tmp_path_factory.mktemp("doctor")
    sc = small_scenario().model_copy(update={"start": float(int(time.time()))})
    h = start_simulation(sc, speed=20.0, kubeconfig_out=tmp / "kubeconfig")
    yield h
    h.stop()


@pytest.fixture(scope="module")
def prom(
    sim: SimulationHandle, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusHandle]:
    workdir = tmp_path_factory.mktemp("doctor-prom")
    p = scraping_prometheus(sim, workdir)
    wait_for_every_target(p, workdir)
    wait_for_series(p, "DCGM_FI_DEV_FB_USED")
    yield p
    p.stop()


@pytest.fixture(scope="module")
def slack() -> Iterator[SlackServer]:
    s = SlackServer()
    yield s
    s.close()


@pytest.fixture(scope="module")
def am(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Alertmanager]:
    if not available():
        pytest.skip("no alertmanager binary: `make test` installs prometheus-alertmanager")
    with alertmanager(tmp_path_factory.mktemp("doctor-am"), "http://127.0.0.1:9/hook") as a:
        yield a


@pytest.fixture
def config(
    sim: SimulationHandle, prom: PrometheusHandle, slack: SlackServer, am: Alertmanager,
    tmp_path: Path,
) -> dict[str, Any]:  # fmt: skip
    return {
        "cluster": "small",
        "store_url": f"sqlite:///{tmp_path / 'journal.db'}",
        "kubeconfig": str(sim.kubeconfig),
        "service": {
            "source": {"prometheus": {"url": prom.url, "timeout": 5, "retries": 0}},
            "leader_election": {"enabled": True},
        },
        "alerts": {
            "slack": {"token": "xoxb-test", "base_url": slack.url, "default_channel": "C0FLEET",
                      "timeout": 3},
            "alertmanager": {"url": am.url},
        },
    }  # fmt: skip


def _doctor(tmp_path: Path, config: dict[str, Any]) -> tuple[int, dict[str, str], str]:
    f = tmp_path / "gpufleet.yaml"
    f.write_text(yaml.safe_dump(config))
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(["doctor", "--config", str(f)])
    text = out.getvalue()
    rows = {}
    for line in text.splitlines()[1:-1]:
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[0] != "fix:" and not line.startswith(" "):
            name_status = line.split("  ")
            cells = [c.strip() for c in name_status if c.strip()]
            rows[cells[0]] = cells[1]
    return rc, rows, text


def test_a_healthy_setup_passes(tmp_path: Path, config: dict[str, Any]) -> None:
    rc, rows, text = _doctor(tmp_path, config)
    print(text)  # what docs/deploy-on-your-cluster.md shows
    assert rc == 0, text
    for check in ("prometheus", "label layout", "kube-state-metrics", "kubernetes api", "dra",
                  "slack", "slack C0FLEET", "alertmanager"):  # fmt: skip
        assert rows.get(check) == "ok", text
    assert rows["store"] in ("ok", "warn")  # a fresh database: run migrates it at start
    assert "0 failed" in text


def _unreachable_kubeconfig(c: dict[str, Any], tmp: Path) -> None:
    kc = yaml.safe_load(Path(c["kubeconfig"]).read_text())
    kc["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9"
    (tmp / "dead-kubeconfig").write_text(yaml.safe_dump(kc))
    c["kubeconfig"] = str(tmp / "dead-kubeconfig")


FAILURES: dict[str, tuple[Callable[[dict[str, Any], Path], None], str, str, int, str]] = {
    "prometheus down": (
        lambda c, t: c["service"]["source"]["prometheus"].update(url="http://127.0.0.1:9"),
        "prometheus", "FAIL", 1, "fix:",
    ),
    "kubernetes unreachable": (_unreachable_kubeconfig, "kubernetes api", "FAIL", 1, "fix:"),
    "store unreachable": (
        lambda c, t: c.update(store_url="postgresql://nobody@127.0.0.1:9/none"),
        "store", "FAIL", 1, "DATABASE_URL",
    ),
    "slack token refused": (
        lambda c, t: c["alerts"]["slack"].update(token="xoxb-wrong"),
        "slack", "warn", 0, "SLACK_BOT_TOKEN",
    ),
    "bot not in channel": (
        lambda c, t: c["alerts"]["slack"].update(default_channel="C0JOBS"),
        "slack C0JOBS", "warn", 0, "/invite the bot to C0JOBS",
    ),
    "alertmanager down": (
        lambda c, t: c["alerts"]["alertmanager"].update(url="http://127.0.0.1:9"),
        "alertmanager", "warn", 0, "alerts.alertmanager.url",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(FAILURES))
def test_each_failure_shows_its_row_and_fix(
    case: str, tmp_path: Path, config: dict[str, Any], slack: SlackServer
) -> None:
    mutate, row, status, code, fix = FAILURES[case]
    broken = copy.deepcopy(config)
    mutate(broken, tmp_path)
    slack.state.member_of.discard("C0JOBS")
    rc, rows, text = _doctor(tmp_path, broken)
    assert rows.get(row) == status, text
    assert fix in text and rc == code, text
