"""Messages through the outbox to a local Slack Web API server: one per incident group, updated
in place with channel IDs, a thread timeline, storms summarised, 429/5xx/lost answers, restarts."""

from __future__ import annotations

import logging

import pytest

from alerts.outbox import LogTransport
from detectors.findings import Severity
from harness.slack_server import SlackServer
from remediations.store import Store
from tests.alerts.conftest import Rig, alerts_config, xid

T0 = 1_800_000_000.0


def test_one_message_per_node_updated_in_place_with_channel_ids(rig, slack: SlackServer) -> None:
    r: Rig = rig(default_channel="#gpufleet")
    findings = [xid("n1", 0, T0), xid("n1", 1, T0), xid("n1", 2, T0)]
    r.cycle(findings, T0)
    r.rt.run_outbox(T0)
    posts = slack.calls("chat.postMessage", ok_only=True)
    top = [c for c in posts if "thread_ts" not in c.body]
    assert len(top) == 1 and top[0].body["channel"] == "#gpufleet"
    assert "3 open of 3" in top[0].body["text"]
    assert any(b["type"] == "header" for b in top[0].body["blocks"])
    assert "http://dash.example/?incident=" in str(top[0].body["blocks"])
    replies = [c for c in posts if "thread_ts" in c.body]
    assert replies and all(c.body["channel"] == "C0FLEET" for c in replies)
    assert "XID 79" in replies[0].body["text"]

    r.cycle([], T0 + 60)  # healthy: every incident resolves (resolve_after 1)
    r.rt.run_outbox(T0 + 60)
    updates = slack.calls("chat.update", ok_only=True)
    assert updates, slack.calls()
    assert all(u.body["channel"] == "C0FLEET" for u in updates)  # the ID, never "#gpufleet"
    (msg,) = [m for m in slack.posted("C0FLEET") if "thread_ts" not in m]
    assert "all 3 resolved" in msg["text"] and msg["edited"] >= 1
    assert "resolved" in slack.posted("C0FLEET")[-1]["text"]


def test_routing_by_kind_and_severity(rig, slack: SlackServer) -> None:
    r: Rig = rig(routes=[{"channel": "C0CRIT", "kinds": ["gpu_xid"], "min_severity": "critical"}])
    r.cycle([xid("n1", 0, T0), xid("n2", 0, T0, Severity.WARNING)], T0)
    r.cycle([xid("n1", 0, T0 + 30), xid("n2", 0, T0 + 30, Severity.WARNING)], T0 + 30)
    r.rt.run_outbox(T0 + 30)
    assert [m for m in slack.posted("C0CRIT") if "thread_ts" not in m]
    assert [m for m in slack.posted("C0FLEET") if "thread_ts" not in m]


def test_fleet_wide_storm_is_one_summary(rig, slack: SlackServer) -> None:
    r: Rig = rig(rate_per_minute=600)
    storm = [xid(f"n{n:03d}", g, T0) for n in range(63) for g in range(8)][:500]
    r.cycle(storm, T0)
    for k in range(5):
        r.rt.run_outbox(T0 + k * 2)
    top = [c for c in slack.calls("chat.postMessage", ok_only=True) if "thread_ts" not in c.body]
    assert len(top) == 1
    assert "500 open incidents on 63 nodes" in top[0].body["text"]
    assert len(slack.calls()) <= 5  # post, one thread reply, the approval prompts' thread...


def test_429_honours_retry_after_and_sends_once(rig, slack: SlackServer) -> None:
    r: Rig = rig()
    slack.fail("chat.postMessage", 429, times=2, retry_after=1)  # slack-sdk retries once itself
    r.cycle([xid("n1", 0, T0)], T0)
    r.rt.run_outbox(T0)
    assert len(slack.calls("chat.postMessage")) == 2  # the original and the in-place retry
    waiting = r.rt.astore.outbox(["pending"])
    assert waiting[0].op == "post" and waiting[0].next_at == pytest.approx(T0 + 1, abs=0.01)
    r.rt.run_outbox(T0 + 0.5)  # Retry-After not over yet: nothing sent
    assert len(slack.calls("chat.postMessage")) == 2
    r.rt.run_outbox(T0 + 2)
    top = [m for m in slack.posted("C0FLEET") if "thread_ts" not in m]
    assert len(top) == 1


def test_5xx_backs_off_then_delivers_in_order(rig, slack: SlackServer) -> None:
    r: Rig = rig()
    slack.fail("chat.postMessage", 503, times=3)
    r.cycle([xid("n1", 0, T0)], T0)
    now = T0
    for _ in range(3):
        r.rt.run_outbox(now)
        row = r.rt.astore.outbox(["pending"])[0]
        assert row.op == "post" and row.next_at > now
        now = row.next_at
    r.rt.run_outbox(now)
    msgs = slack.posted("C0FLEET")
    # the post, then its thread: the timeline line, then the approval prompt
    assert [("thread_ts" in m) for m in msgs] == [False, True, True]
    assert "opened" in msgs[1]["text"] and "Approve" in msgs[2]["text"]
    assert not r.rt.astore.outbox(["pending", "sending"])


def test_lost_answer_is_found_in_history_not_posted_twice(rig, slack: SlackServer) -> None:
    r: Rig = rig()
    slack.slow("chat.postMessage", 2.5)  # Slack posts it, the client (timeout 1 s) gives up
    r.cycle([xid("n1", 0, T0)], T0)
    r.rt.run_outbox(T0)
    assert next(o.state for o in r.rt.astore.outbox()) == "sending"
    r.rt.run_outbox(T0 + 10)
    assert slack.calls("conversations.history")
    top = [m for m in slack.posted("C0FLEET") if "thread_ts" not in m]
    assert len(top) == 1
    assert all(o.state == "sent" for o in r.rt.astore.outbox())


def test_restart_with_unsent_messages_loses_nothing_sends_nothing_twice(
    rig, slack: SlackServer
) -> None:
    r: Rig = rig()
    slack.fail("chat.postMessage", 500, times=100)
    r.cycle([xid("n1", 0, T0), xid("n2", 0, T0)], T0)
    r.rt.run_outbox(T0)
    assert not slack.posted("C0FLEET")
    r.restart()
    slack.state.faults.clear()
    for k in range(10):
        r.rt.run_outbox(T0 + 400 + k)
    top = [m for m in slack.posted("C0FLEET") if "thread_ts" not in m]
    assert len(top) == 2
    texts = [m["text"] for m in slack.posted("C0FLEET")]
    assert len(texts) == len(set(texts))
    assert not r.rt.astore.outbox(["pending", "sending", "dead"])


def test_a_refused_message_is_parked_and_its_lane_moves_on(rig, slack: SlackServer) -> None:
    r: Rig = rig()
    slack.refuse("chat.postMessage", "invalid_blocks")
    r.cycle([xid("n1", 0, T0)], T0)
    r.rt.run_outbox(T0)
    states = [(o.op, o.state) for o in r.rt.astore.outbox()]
    assert states[0] == ("post", "dead")
    assert {s for _, s in states[1:]} == {"dead"}  # its thread cannot exist: parked too


def test_setup_errors_keep_messages_until_fixed(rig, slack: SlackServer) -> None:
    r: Rig = rig()
    slack.refuse("chat.postMessage", "not_in_channel")  # until someone invites the bot
    r.cycle([xid("n1", 0, T0)], T0)
    r.rt.run_outbox(T0)
    head = r.rt.astore.outbox()[0]
    assert (head.op, head.state, head.next_at) == ("post", "pending", T0 + 300)
    r.rt.run_outbox(T0 + 299)
    assert len(slack.calls("chat.postMessage")) == 1
    assert r.rt.backlog(T0 + 299) == {"unsent": 3, "dead": 0, "oldest_unsent_seconds": 299}
    r.rt.run_outbox(T0 + 300)
    assert len([m for m in slack.posted("C0FLEET") if "thread_ts" not in m]) == 1
    assert not r.rt.astore.outbox(["pending", "sending", "dead"])
    assert r.rt.backlog(T0 + 300)["unsent"] == 0


def test_quiet_hours_hold_warnings_until_they_end(rig, slack: SlackServer) -> None:
    r: Rig = rig(quiet_hours={"start": "00:00", "end": "23:59", "min_severity": "critical"})
    r.cycle([xid("n2", 0, T0, Severity.WARNING)], T0)
    r.cycle([xid("n2", 0, T0 + 30, Severity.WARNING)], T0 + 30)
    r.rt.run_outbox(T0 + 30)
    assert not slack.calls("chat.postMessage")
    held = r.rt.astore.outbox(["pending"])
    assert held and held[0].next_at > T0 + 30
    r.cycle([xid("n1", 0, T0 + 60)], T0 + 60)  # critical goes at once
    r.rt.run_outbox(T0 + 60)
    assert len(slack.calls("chat.postMessage")) >= 1


def test_rate_budget_per_channel(rig, slack: SlackServer) -> None:
    r: Rig = rig(rate_per_minute=2, storm_threshold=50)
    r.cycle([xid(f"n{k}", 0, T0) for k in range(6)], T0)
    r.rt.run_outbox(T0)
    assert len(slack.calls("chat.postMessage")) == 2  # burst of the budget
    r.rt.run_outbox(T0 + 30)
    assert len(slack.calls("chat.postMessage")) == 3


def test_without_a_token_messages_go_to_the_log_and_the_store(
    journal: Store, tmp_path, caplog: pytest.LogCaptureFixture, db_url: str
) -> None:
    r = Rig(db_url, tmp_path, None)
    assert r.rt.config == alerts_config(None)
    with caplog.at_level(logging.INFO, logger="alerts.slack.log_only"):
        r.cycle([xid("n1", 0, T0)], T0)
        r.rt.run_outbox(T0)
    assert any(
        rec.name == "alerts.slack.log_only" and rec.getMessage().startswith("chat.postMessage")
        for rec in caplog.records
    )
    log = r.rt.astore.sent_log()
    assert log and all(e["state"] == "sent" for e in log)
    r.close()


def test_first_start_on_an_old_journal_does_not_replay_its_history(
    journal: Store, slack: SlackServer, db_url: str, tmp_path
) -> None:
    journal.set_paused(True, "bob", "old news", T0 - 3600)
    journal.set_paused(False, "bob", "old news", T0 - 3500)
    r = Rig(db_url, tmp_path, slack)
    r.cycle([], T0)
    r.rt.run_outbox(T0)
    assert not slack.calls()
    r.store.set_paused(True, "carol", "now", T0 + 1)
    r.cycle([], T0 + 30)
    r.rt.run_outbox(T0 + 30)
    (told,) = slack.calls("chat.postMessage")
    assert "automation paused: now (carol" in told.body["text"]
    r.close()


@pytest.mark.postgres
def test_restart_and_click_on_postgresql(pg_url: str, tmp_path, slack: SlackServer) -> None:
    import time

    from remediations.types import ActionState

    slack.fail("chat.postMessage", 500, times=100)
    r = Rig(pg_url, tmp_path, slack)
    now = time.time()
    r.cycle([xid("n1", 0, now)], now)
    r.rt.run_outbox(now)
    (action,) = r.store.actions([ActionState.AWAITING_APPROVAL])
    r.restart()
    slack.state.faults.clear()
    for k in range(5):
        r.rt.run_outbox(now + 400 + k)
    assert r.rt.interactions.decide(action.id, True, "U0ALICE", "alice", now + 410).startswith(
        "cordon"
    )
    r.rt.run_outbox(now + 420)
    texts = [c.body["text"] for c in slack.calls("chat.postMessage", ok_only=True)]
    assert len(texts) == 3 and len(set(texts)) == 3  # post, thread line, prompt: once each
    assert "approved by <@U0ALICE>" in slack.calls("chat.update", ok_only=True)[-1].body["text"]
    r.close()


def test_severity_change_updates_the_message_and_the_thread(rig, slack: SlackServer) -> None:
    r: Rig = rig()
    r.cycle([xid("n1", 0, T0, Severity.WARNING)], T0)
    r.cycle([xid("n1", 0, T0 + 30, Severity.WARNING)], T0 + 30)  # opens (open_after 1)
    r.rt.run_outbox(T0 + 30)
    r.cycle([xid("n1", 0, T0 + 60)], T0 + 60)  # now critical
    r.rt.run_outbox(T0 + 60)
    top = [c for c in slack.calls("chat.postMessage", ok_only=True) if "thread_ts" not in c.body]
    assert len(top) == 1
    (msg,) = [m for m in slack.posted("C0FLEET") if "thread_ts" not in m]
    assert msg["text"].startswith(":red_circle:")  # re-rendered in place as critical
    assert any("now critical" in m["text"] for m in slack.posted("C0FLEET") if "thread_ts" in m)


def test_on_cycle_takes_the_live_cycle_report_too(rig, slack: SlackServer) -> None:
    from gpufleet.live_cycle import CycleReport

    r: Rig = rig()
    result = r.engine.cycle([xid("n1", 0, T0)], None, T0)
    r.rt.on_cycle(CycleReport(now=T0, changes=tuple(result.changes)), T0)
    r.rt.run_outbox(T0)
    assert len([m for m in slack.posted("C0FLEET") if "thread_ts" not in m]) == 1


def test_two_workers_at_once_send_each_message_once(rig, slack: SlackServer) -> None:
    import threading

    a: Rig = rig(rate_per_minute=600, storm_threshold=50)
    b: Rig = rig(rate_per_minute=600, storm_threshold=50)  # a second process on the same journal
    a.cycle([xid(f"n{k}", 0, T0) for k in range(8)], T0)
    workers = [threading.Thread(target=x.rt.run_outbox, args=(T0,)) for x in (a, b)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for k in range(20):  # the rest, within the channel budget
        a.rt.run_outbox(T0 + 200 + 10 * k)
    texts = [c.body["text"] for c in slack.calls("chat.postMessage", ok_only=True)]
    assert len(texts) == 24 and len(set(texts)) == 24  # 8 posts, 8 thread lines, 8 prompts


def test_a_needs_person_row_is_posted_to_the_default_channel(rig, slack: SlackServer) -> None:
    """The diagnostic job's `needs_person` row (a GPU failed its diagnostic) reaches a person
    through the outbox, like a pause or a tripped breaker, with no incident needed."""
    r = rig()
    r.cycle([], T0)
    r.store.audit(
        T0 + 1,
        "needs_person",
        "gpu/GPU-x on h100-0003 failed `dcgmi diag -r 2 -i 5`: marked for hardware replacement",
        target="gpu/GPU-x",
    )
    r.cycle([], T0 + 30)
    r.rt.run_outbox(T0 + 30)
    (told,) = slack.calls("chat.postMessage")
    assert told.body["text"].startswith(":wrench: gpu/GPU-x on h100-0003 failed")


def test_messages_without_a_token_go_to_their_own_logger(caplog: pytest.LogCaptureFixture) -> None:
    """The demo (no Slack token) logs what it would send; those lines have their own logger so
    they can be kept out of the service's story (the demo writes them to slack.log)."""
    caplog.set_level(logging.INFO)
    reply = LogTransport().call("chat.postMessage", {"channel": "#gpufleet", "text": "XID 48"})
    assert reply["ok"] and reply["ts"]
    (rec,) = [r for r in caplog.records if "XID 48" in r.getMessage()]
    assert rec.name == "alerts.slack.log_only"
    assert rec.getMessage() == "chat.postMessage #gpufleet: XID 48"


def test_a_notify_only_rule_is_told_in_the_thread_as_notify_only(
    rig, slack: SlackServer, tmp_path
) -> None:
    """A notify-only rule (playbook cordon, mode notify) refused nothing: its thread line says
    the rule only notifies, with no "deny" and no "no entry" sign."""
    from alerts import AlertsRuntime
    from remediations.decision_journal import DecisionJournal
    from remediations.policy import load_policy
    from tests.alerts.conftest import POLICY

    r: Rig = rig()
    path = tmp_path / "notify.yaml"
    path.write_text(POLICY.replace("mode: approval", "mode: notify"))
    r.engine = DecisionJournal(load_policy(path), r.store, started_at=0.0)
    r.rt = AlertsRuntime(alerts_config(slack), r.store, r.engine)
    r.cycle([xid("n1", 0, T0)], T0)
    r.cycle([xid("n1", 0, T0 + 30)], T0 + 30)
    r.rt.run_outbox(T0 + 30)
    replies = [c.body["text"] for c in slack.calls("chat.postMessage") if "thread_ts" in c.body]
    lines = [line for t in replies for line in t.splitlines()]
    told = [line for line in lines if "cordon-xid" in line]
    assert told == [":bell: node/n1: rule cordon-xid only notifies; no action taken"], replies
    assert not any("deny" in t or ":no_entry_sign:" in t for t in replies), replies
