"""The Alertmanager webhook as an attacker meets it: authentication whenever it is exposed, and
alerts held to the detectors' evidence rules (cold start, last delivery, staleness, what the
policy allows from intake, bounded rows)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alerts import AlertsRuntime, parse_alerts_config
from alerts.am_output import rfc3339
from detectors.findings import Finding, FindingKind, Severity
from errors import ConfigError
from gpufleet.cli import main
from gpufleet.config import load_config
from remediations.cluster_view import ClusterView, NodeView
from remediations.decision_journal import DecisionJournal
from remediations.decisions import COLD_START
from remediations.policy import policy_from_dict
from remediations.store import Store
from remediations.types import ActionState, Verdict
from tests.alerts.conftest import post

TOKEN = "s3cret-webhook-token"
AUTO_POLICY: dict[str, Any] = {
    "version": 1,
    "actuation": "live",
    "hysteresis": {"open_after": 1, "resolve_after": 1},
    "gates": {
        "blast_radius": {"max_nodes": 100, "max_percent_of_pool": 100},
        "breaker": {"threshold_percent": 100, "window": 300, "min_nodes": 1000},
    },
    "intake": {"allow": [{"kinds": ["gpu_xid"], "severities": ["critical"]}]},
    "rules": [
        {
            "name": "quarantine-xid",
            "match": {"kinds": ["gpu_xid"], "severities": ["critical"]},
            "playbook": "quarantine",
            "mode": "auto",
        }
    ],
}


def alert(node: str, starts: float, name: str = "GPUXidErrors", **labels: str) -> dict[str, Any]:
    return {
        "status": "firing",
        "labels": {"alertname": name, "severity": "critical", "node": node, **labels},
        "annotations": {"summary": f"XID on {node}"},
        "startsAt": rfc3339(starts),
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": f"fp-{node}-{name}",
    }


def delivery(*alerts: dict[str, Any]) -> bytes:
    return json.dumps({"version": "4", "status": "firing", "alerts": list(alerts)}).encode()


class Intake:
    """An engine with an automatic quarantine rule and a runtime whose webhook needs TOKEN."""

    def __init__(
        self, tmp_path: Path, started_at: float, gates: dict[str, Any] | None = None, **intake: Any
    ) -> None:
        token_file = tmp_path / "webhook-token"
        token_file.write_text(TOKEN + "\n")
        self.store = Store.open(f"sqlite:///{tmp_path / 'journal.db'}", cluster="test")
        policy = {**AUTO_POLICY, "gates": {**AUTO_POLICY["gates"], **(gates or {})}}
        self.journal = DecisionJournal(policy_from_dict(policy), self.store, started_at=started_at)
        cfg = parse_alerts_config(
            {
                "alertmanager": {
                    "intake": {
                        "bearer_token_file": str(token_file),
                        "kinds": {"GPUXidErrors": "gpu_xid"},
                        **intake,
                    }
                },
                "webhook_http": {"enabled": True, "host": "0.0.0.0", "port": 0},
            },
            "test-config.yaml",
        )
        self.rt = AlertsRuntime(cfg, self.store, self.journal, started_at=started_at)


@pytest.fixture
def intake(tmp_path: Path) -> Iterator[Intake]:
    it = Intake(tmp_path, started_at=time.time())
    yield it
    it.store.close()


def test_forged_alerts_get_401_and_an_old_alert_never_acts_automatically(intake: Intake) -> None:
    start = intake.journal.started_at
    server = intake.rt.serve_webhook(host="127.0.0.1", port=0)
    url = server.url + "/alertmanager/webhook"
    try:
        forged = delivery(alert("h100-0000", start + 1))
        assert post(url, forged, {})[0] == 401
        assert post(url, forged, {"Authorization": "Bearer guessed"})[0] == 401
        assert post(url, forged, {"Authorization": TOKEN})[0] == 401  # no scheme
        assert intake.rt.intake.held() == []  # nothing stored

        auth = {"Authorization": f"Bearer {TOKEN}"}
        old = alert("h100-0000", start - 30 * 86400)  # fired before gpufleet watched
        fresh = alert("h100-0001", time.time())  # the control: seen while watching
        assert post(url, delivery(old, fresh), auth) == (200, {"received": 2})
    finally:
        server.close()

    decisions = []
    for i in range(3):
        now = time.time() + i
        findings = intake.rt.intake_findings(now)
        decisions += intake.journal.cycle(findings, None, now).decisions
    by_target = {d.target: d for d in decisions}
    cold, live = by_target["node/h100-0000"], by_target["node/h100-0001"]
    assert cold.decision is Verdict.AWAIT_APPROVAL and COLD_START in cold.reasons
    assert live.decision is Verdict.EXECUTE  # the same alert seen while watching would act
    approved = intake.store.actions([ActionState.APPROVED, ActionState.EXECUTING])
    assert [a.target for a in approved] == ["node/h100-0001"]


def test_an_exposed_webhook_without_a_token_refuses_to_start(
    tmp_path: Path, intake: Intake
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_alerts_config({"webhook_http": {"enabled": True, "host": "0.0.0.0"}}, "gpufleet.yaml")
    assert "gpufleet.yaml: alerts.webhook_http: expected a bearer token" in str(err.value)
    parse_alerts_config({"webhook_http": {"enabled": True, "host": "127.0.0.1"}}, "gpufleet.yaml")
    # the Slack listener may face the internet: its requests are signed, no webhook token
    parse_alerts_config({"http": {"enabled": True, "host": "0.0.0.0"}}, "gpufleet.yaml")

    bare = AlertsRuntime(parse_alerts_config({}), intake.store, intake.journal)
    with pytest.raises(ConfigError, match=r"webhook_http\.host: 0\.0\.0\.0 is not loopback"):
        bare.serve_webhook(host="0.0.0.0", port=0)
    token = tmp_path / "gone"
    token.write_text("t")
    with_file = {"alertmanager": {"intake": {"bearer_token_file": str(token)}}}
    cfg = parse_alerts_config(with_file)
    token.unlink()  # the Secret is no longer mounted when the server starts
    with pytest.raises(ConfigError, match="bearer_token_file: cannot read the file"):
        AlertsRuntime(cfg, intake.store, intake.journal).serve_webhook(host="0.0.0.0", port=0)
    with pytest.raises(ConfigError, match="bearer_token_file: cannot read the file"):
        parse_alerts_config(with_file)


def test_the_token_comes_from_a_file_or_the_environment_never_the_config_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exposed = "alerts:\n  webhook_http: {enabled: true, host: 0.0.0.0, port: 8086}\n"
    cfg_file = tmp_path / "gpufleet.yaml"
    cfg_file.write_text(exposed + "  alertmanager: {intake: {bearer_token: hunter2}}\n")
    assert main(["run", "--config", str(cfg_file)]) == 2
    err = capsys.readouterr().err
    assert f"{cfg_file}: alerts.alertmanager.intake.bearer_token: expected no token" in err
    assert "hunter2" not in err

    cfg_file.write_text(exposed)
    with pytest.raises(ConfigError, match="expected a bearer token"):
        load_config(cfg_file, environ={})
    cfg, _ = load_config(cfg_file, environ={"ALERTMANAGER_WEBHOOK_TOKEN": TOKEN})
    assert cfg.alerts.webhook_token() == TOKEN
    assert TOKEN not in cfg.model_dump_json()  # never echoed with the config

    (tmp_path / "token").write_text(TOKEN)
    cfg_file.write_text(exposed + "  alertmanager: {intake: {bearer_token_file: token}}\n")
    cfg, path = load_config(cfg_file, environ={})
    assert cfg.alerts.relative_to(path).webhook_token() == TOKEN


def test_last_seen_is_the_last_delivery_and_an_alert_not_redelivered_goes_stale(
    intake: Intake,
) -> None:
    start = intake.journal.started_at
    t0 = float(int(start)) + 10
    body = json.loads(delivery(alert("h100-0002", t0)))
    intake.rt.intake.receive(body, t0)
    (f,) = intake.rt.intake_findings(t0 + 600)
    assert (f.first_seen, f.last_seen, f.pre_existing) == (t0, t0, False)
    # the freshness gate judges the delivery: ten minutes later it no longer acts
    later = intake.journal.cycle([f], None, t0 + 600).decisions
    assert [d.decision for d in later] == [Verdict.DENY]
    assert "freshness" in later[0].reasons[0]

    stale_after = 4 * 3600 * 2  # repeat_interval 4h (Alertmanager's default) x 2
    intake.rt.intake.receive(body, t0 + 3600)  # re-delivered
    assert intake.rt.intake_findings(t0 + 3600 + stale_after - 1)[0].last_seen == t0 + 3600
    assert intake.rt.intake_findings(t0 + 3600 + stale_after + 1) == []  # a lost "resolved"


def test_alerts_become_only_what_the_policy_allows_from_intake(intake: Intake) -> None:
    t = intake.journal.started_at + 5
    warn = alert("h100-0003", t)
    warn["labels"]["severity"] = "warning"
    other = alert("h100-0004", t, name="GPUTooHot")
    intake.rt.intake.receive(json.loads(delivery(warn, other, alert("h100-0005", t))), t)
    got = {f.node: f for f in intake.rt.intake_findings(t)}
    assert (got["h100-0005"].kind.value, got["h100-0005"].severity.value) == ("gpu_xid", "critical")
    for node, asked in (("h100-0003", "gpu_xid/warning"), ("h100-0004", "anomaly/critical")):
        f = got[node]
        assert (f.kind.value, f.severity.value) == ("anomaly", "info")
        assert f.evidence["not_allowed"].startswith(asked)
    # the policy allows nothing by default: every alert is an info anomaly
    assert policy_from_dict({"version": 1}).intake.allow == []


def test_rows_are_limited_per_request_and_in_total(tmp_path: Path) -> None:
    it = Intake(tmp_path, time.time(), max_alerts_per_request=3, max_alerts=4)
    server = it.rt.serve_webhook(host="127.0.0.1", port=0)
    url, auth = server.url + "/alertmanager/webhook", {"Authorization": f"Bearer {TOKEN}"}
    t = time.time()
    try:
        four = delivery(*(alert(f"n{i}", t) for i in range(4)))
        code, answer = post(url, four, auth)
        assert code == 413 and "4 alerts in one delivery (max 3)" in answer["error"]
        assert it.rt.intake.held() == []
        assert post(url, delivery(*(alert(f"n{i}", t) for i in range(3))), auth)[0] == 200
        code, answer = post(url, delivery(*(alert(f"n{i}", t) for i in range(2, 5))), auth)
        assert (code, answer["received"], answer["refused"]) == (429, 2, 1)  # n2 refreshed
        assert sorted(r.labels["node"] for r in it.rt.intake.held()) == ["n0", "n1", "n2", "n3"]
        assert next(r for r in it.rt.intake.held() if r.labels["node"] == "n2").deliveries == 2
    finally:
        server.close()
        it.store.close()


def test_cli_lists_and_clears_the_held_alerts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    it = Intake(tmp_path, time.time())
    t = time.time()
    it.rt.intake.receive(json.loads(delivery(alert("h100-0006", t), alert("h100-0007", t))), t)
    it.rt.intake.receive(json.loads(delivery(alert("h100-0008", t - 86400))), t - 86400)
    it.store.close()
    (tmp_path / "policy.yaml").write_text(json.dumps(AUTO_POLICY))
    cfg = tmp_path / "gpufleet.yaml"
    cfg.write_text(
        f"cluster: test\nstore_url: sqlite:///{tmp_path / 'journal.db'}\npolicy: policy.yaml\n"
        "alerts: {alertmanager: {intake: {kinds: {GPUXidErrors: gpu_xid}}}}\n"
    )
    assert main(["alerts", "intake", "list", "--config", str(cfg)]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["fp-h100-0006-GPUXidErrors"][3:5] == ["yes", "gpu_xid/critical"]
    assert rows["fp-h100-0008-GPUXidErrors"][3] == "stale"  # a day without a delivery

    fp = "fp-h100-0006-GPUXidErrors"
    assert main(["alerts", "intake", "clear", "--fingerprint", fp, "--config", str(cfg)]) == 0
    assert "1 alert(s) cleared" in capsys.readouterr().out
    main(["alerts", "intake", "list", "--config", str(cfg)])
    assert "fp-h100-0006" not in capsys.readouterr().out
    store = Store.open(f"sqlite:///{tmp_path / 'journal.db'}", cluster="test")
    try:
        assert any(a.kind == "intake_clear" and fp in a.message for a in store.audit_log())
    finally:
        store.close()


def _fleet(n: int, cordoned: tuple[str, ...] = ()) -> ClusterView:
    names = [f"h100-{i:04d}" for i in range(n)]
    return ClusterView(
        {name: NodeView(name, gpu_count=8, unschedulable=name in cordoned) for name in names}
    )


def _xid(node: str, t: float) -> Finding:
    return Finding(
        FindingKind.GPU_XID, Severity.CRITICAL, f"XID 48 on {node}", t, t, node=node,
        gpu_uuid=f"GPU-{node}", evidence={"xid": 48}, detector="gpu_xid",
    )  # fmt: skip


def test_alert_derived_findings_use_their_own_blast_radius_and_breaker(tmp_path: Path) -> None:
    gates = {
        "blast_radius": {"max_nodes": 1, "max_percent_of_pool": 100},  # the detectors' budget
        "breaker": {"threshold_percent": 50, "window": 300, "min_nodes": 3},
    }
    it = Intake(tmp_path, time.time(), gates)
    view, t = _fleet(10), time.time() + 1

    def verdicts(findings: list[Finding], now: float) -> dict[str, Verdict]:
        return {d.target: d.decision for d in it.journal.cycle(findings, view, now).decisions}

    try:
        # one alert quarantines its node, on the intake's budget (intake.blast_radius: 1 node)
        it.rt.intake.receive(json.loads(delivery(alert("h100-0000", t))), t)
        assert verdicts(it.rt.intake_findings(t), t) == {"node/h100-0000": Verdict.EXECUTE}
        view = _fleet(10, cordoned=("h100-0000",))  # the quarantine is done: cordoned
        it.rt.intake.receive(json.loads(delivery(alert("h100-0001", t))), t + 1)
        got = verdicts(it.rt.intake_findings(t + 1), t + 1)
        assert got == {"node/h100-0001": Verdict.DENY}  # the intake's one node is in use
        # a real XID on another node still acts: the detectors' budget (1 node) is untouched
        real = [*it.rt.intake_findings(t + 2), _xid("h100-0009", t + 2)]
        assert verdicts(real, t + 2)["node/h100-0009"] is Verdict.EXECUTE

        # alerts for 6 of 10 nodes: the intake's breaker stops alert actions, not the engine
        flood = delivery(*(alert(f"h100-{i:04d}", t) for i in range(6)))
        it.rt.intake.receive(json.loads(flood), t + 3)
        findings = [*it.rt.intake_findings(t + 3), _xid("h100-0008", t + 3)]
        decisions = it.journal.cycle(findings, view, t + 3).decisions
        reasons = {d.target: d.reasons for d in decisions}
        for node in ("h100-0002", "h100-0003", "h100-0004", "h100-0005"):
            assert reasons[f"node/{node}"][0].startswith("intake_breaker: alert-derived faults")
        assert not it.store.engine_state().breaker_tripped  # automation goes on
        assert {d.target: d.decision for d in decisions}["node/h100-0008"] is Verdict.EXECUTE
    finally:
        it.store.close()
