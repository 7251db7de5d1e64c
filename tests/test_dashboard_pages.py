"""The dashboard's pages under Streamlit's AppTest, on journals the real engine wrote."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd  # type: ignore[import-untyped]
import pytest
from streamlit.testing.v1 import AppTest

from dashboards import data
from dashboards.shell import SETTINGS_KEY
from detectors.findings import FindingKind, Severity
from gpufleet.service.job_runs import JobRuns
from harness.dashboard_seed import (
    BROKEN,
    HELD,
    REPAIRED,
    seed_cluster,
    seed_fleet,
    seed_repairs,
    write_settings,
)
from harness.fake_cluster import FakeCluster
from remediations.decision_journal import DecisionJournal
from remediations.store import Store
from remediations.types import ActionState
from remediations.validation import record_diagnosis
from tests.remediations.helpers import finding, live_policy

APP = Path(__file__).resolve().parents[1] / "dashboards" / "app.py"
PAGES = ("page_files/incidents.py", "page_files/remediation.py", "page_files/policy.py")


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    """Streamlit's caches are per process: each test starts from its own journal."""
    data.changed()
    data.store.clear()
    yield
    data.store.clear()


@pytest.fixture
def journal(tmp_path: Path) -> tuple[str, Store]:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    return url, Store.open(url, cluster="alpha")


def app(settings: Path, page: str | None = None, **user: object) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=30)
    at.session_state[SETTINGS_KEY] = str(settings)
    if user:
        at.secrets["auth"] = {"redirect_uri": "http://localhost:8501/oauth2callback",
                              "cookie_secret": "x" * 32}  # fmt: skip
        at.user = dict(user)
    at.run()
    assert not at.exception
    if page is not None:
        at.switch_page(page).run()
        assert not at.exception, at.exception
    return at


def texts(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [w.value for w in at.warning]
    parts += [i.value for i in at.info] + [c.value for c in at.caption]
    return "\n".join(str(p) for p in parts)


def frame_with(at: AppTest, column: str) -> pd.DataFrame:
    """The page's first table with this column (the History table has `outcome`)."""
    return next(f.value for f in at.dataframe if column in f.value.columns)


def test_every_page_renders_an_empty_journal(journal: tuple[str, Store], tmp_path: Path) -> None:
    url, _ = journal
    settings = write_settings(tmp_path / "s.json", url, "alpha")
    for page in PAGES:
        at = app(settings, page)
        assert "read-only" in texts(at)  # no login, no demo approvals: it says so on every page
    at = app(settings, "page_files/incidents.py")
    assert "No incidents in this period." in texts(at)
    at = app(settings, "page_files/remediation.py")
    assert "Nothing waits for a person." in texts(at)


def test_demo_mode_approves_through_the_engine(journal: tuple[str, Store], tmp_path: Path) -> None:
    url, store = journal
    ids = seed_cluster(store)
    settings = write_settings(tmp_path / "s.json", url, "alpha", unauthenticated_approvals=True)
    at = app(settings, "page_files/remediation.py")
    assert "Demo mode" in texts(at)
    at.button(key=f"approve_{ids['pending']}").click().run()
    assert not at.exception
    a = store.get_action(ids["pending"])
    assert a is not None and a.state is ActionState.APPROVED
    assert a.approved_by == "dashboard (no login)"
    trail = [r for r in store.audit_log() if r.action_id == a.id and r.kind == "approval"]
    assert trail and trail[-1].actor == "dashboard (no login)"
    assert any(ids["pending"] in s.value for s in at.success)
    assert f"approve_{ids['pending']}" not in [b.key for b in at.button]


def test_an_approval_the_gate_refused_shows_as_denied_with_its_reason(
    journal: tuple[str, Store], tmp_path: Path
) -> None:
    url, store = journal
    ids = seed_cluster(store)
    settings = write_settings(tmp_path / "s.json", url, "alpha")
    at = app(settings, "page_files/remediation.py")
    history = frame_with(at, "outcome")
    row = history[history["id"] == ids["denied"]].iloc[0]
    assert row["state"] == "expired"
    assert row["outcome"] == (
        "approved by alice@example.com, then denied by the gate: protected: node pool-b-0003 "
        "is protected (gpufleet.io/protected=true)"
    )
    at = app(settings, "page_files/policy.py")
    why = at.dataframe[-1].value
    assert why["why"].str.contains("protected: node pool-b-0003 is protected").any()


def test_read_only_without_login_and_the_buttons_say_why(
    journal: tuple[str, Store], tmp_path: Path
) -> None:
    url, store = journal
    ids = seed_cluster(store)
    settings = write_settings(tmp_path / "s.json", url, "alpha")
    at = app(settings, "page_files/remediation.py")
    button = at.button(key=f"approve_{ids['pending']}")
    assert button.disabled
    assert "approvals need one" in (button.help or "")


def test_only_logged_in_approvers_may_approve(journal: tuple[str, Store], tmp_path: Path) -> None:
    url, store = journal
    ids = seed_cluster(store)
    settings = write_settings(tmp_path / "s.json", url, "alpha", approvers=["alice@example.com"])
    key = f"approve_{ids['pending']}"
    bob = app(settings, "page_files/remediation.py", is_logged_in=True, email="bob@example.com")
    assert bob.button(key=key).disabled
    assert "bob@example.com is not an approver" in (bob.button(key=key).help or "")
    assert "Demo mode" not in texts(bob) and "read-only" not in texts(bob)
    alice = app(settings, "page_files/remediation.py", is_logged_in=True, email="alice@example.com")
    assert not alice.button(key=key).disabled
    alice.button(key=f"reject_{ids['pending']}").click().run()
    a = store.get_action(ids["pending"])
    assert a is not None and a.state is ActionState.REJECTED
    assert a.approved_by == "alice@example.com"


def test_incident_detail_shows_evidence_and_history(
    journal: tuple[str, Store], tmp_path: Path
) -> None:
    url, store = journal
    ids = seed_cluster(store)
    settings = write_settings(tmp_path / "s.json", url, "alpha")
    at = app(settings, "page_files/incidents.py")
    incidents = at.dataframe[0].value
    assert set(incidents["kind"]) == {"gpu_xid", "nccl_hang", "gpu_throttle"}
    hang = store.get_action(ids["hang"])
    assert hang is not None
    at.selectbox(key="inc_pick").set_value(hang.incident_id).run()
    assert not at.exception
    assert "Evidence the detector used" in texts(at)
    acts = at.dataframe[1].value
    assert list(acts["playbook"]) == ["restart_job"]
    at.multiselect(key="inc_kind").set_value(["gpu_throttle"]).run()
    assert set(at.dataframe[0].value["kind"]) == {"gpu_throttle"}


def test_two_clusters_have_a_selector_and_an_all_clusters_view(
    journal: tuple[str, Store], tmp_path: Path
) -> None:
    url, alpha = journal
    seed_cluster(alpha)
    beta = Store.open(url, cluster="beta")
    seed_cluster(beta)
    beta.set_paused(True, "carol", "maintenance", 0.0)
    settings = write_settings(tmp_path / "s.json", url, "alpha")
    at = app(settings, "page_files/incidents.py")
    sel = at.sidebar.selectbox(key="cluster")
    assert sel.options == [data.ALL, "alpha", "beta"] and sel.value == "alpha"
    assert set(at.dataframe[0].value["cluster"]) == {"alpha"}
    sel.set_value(data.ALL).run()
    assert set(at.dataframe[0].value["cluster"]) == {"alpha", "beta"}
    at.sidebar.selectbox(key="cluster").set_value("beta").run()
    assert set(at.dataframe[0].value["cluster"]) == {"beta"}
    at.switch_page("page_files/remediation.py").run()
    assert at.toggle(key="pause_beta").value is True
    assert set(at.dataframe[0].value["cluster"]) == {"beta"}


def test_out_of_service_shows_each_gpus_repair_state_and_the_one_a_person_must_replace(
    journal: tuple[str, Store], tmp_path: Path
) -> None:
    url, store = journal
    seed_repairs(store)
    settings = write_settings(tmp_path / "s.json", url, "alpha")
    at = app(settings, "page_files/remediation.py")
    out = frame_with(at, "diagnostic").set_index("target")
    assert list(out.index[:1]) == [f"gpu/{BROKEN}"]  # a person's first
    broken, repaired = out.loc[f"gpu/{BROKEN}"], out.loc[f"gpu/{REPAIRED}"]
    assert broken["state"] == "marked for replacement (needs a person)"
    assert (broken["grain"], broken["diagnostic"]) == ("GPU", "failed")
    assert broken["repair"].startswith("reset_gpu: done")
    assert repaired["state"] == "returned" and repaired["diagnostic"] == "passed"
    assert repaired["repair"].startswith("reset_gpu: done") and repaired["returned"] != "-"
    held = out.loc[f"gpu/{HELD}"]
    assert (held["state"], held["repair"], held["diagnostic"]) == (
        "waiting for pods to leave",
        "",
        "",
    )
    assert "Out of service (2)" in [h.value for h in at.subheader]
    assert any(f"gpu/{BROKEN}" in e.value and "a person must" in e.value for e in at.error)
    later = data.out_of_service(url, "alpha", data.now() + 3600)  # the return is older: not read
    assert set(later["target"]) == {f"gpu/{BROKEN}", f"gpu/{HELD}"}
    record_diagnosis(store, time.time(), f"gpu/{HELD}", "waived", node="pool-c-0002",
                     actor="erin", note="checked by hand")  # fmt: skip
    data.changed()
    held = data.out_of_service(url, "alpha", 0.0).set_index("target").loc[f"gpu/{HELD}"]
    assert (held["state"], held["diagnostic"]) == (
        "returning (diagnostic passed)",
        "waived by erin",
    )
    seed_fleet(store, 64, cycles=1)
    data.changed()  # the first run's Fleet page cached an empty fleet
    at = app(settings, "page_files/fleet.py")
    assert {m.label: m.value for m in at.metric}["Out of service (of 64)"] == "2 GPUs"


def test_policy_page_lists_scheduled_jobs_and_counts_repeated_denials(
    journal: tuple[str, Store], tmp_path: Path
) -> None:
    url, store = journal
    now = time.time()
    busy = {"reasons": ["cooldown: cordon on node/a-0003"]}
    for i in range(8):  # the same cordon denied every cycle
        t = now - 300 + 30 * i
        store.audit(t, "decision", "cordon on node/a-0003: deny", target="node/a-0003",
                    detail=busy)  # fmt: skip
    store.audit(now - 10, "decision", "drain on node/a-0001: deny", target="node/a-0001",
                detail={"reasons": ["cooldown: drain on node/a-0001"]})  # fmt: skip
    runs = JobRuns(store.engine, "alpha")
    assert runs.claim("demo-maintenance", "maintenance_window", now - 60, "me", now - 60)
    runs.finish("demo-maintenance", now - 60, True, "0 drain(s) journaled", now - 59)
    at = app(write_settings(tmp_path / "s.json", url, "alpha"), "page_files/policy.py")

    frames = [d.value for d in at.dataframe]
    jobs = next(f for f in frames if "kind" in f.columns and "last_outcome" in f.columns)
    assert list(jobs["job"]) == ["demo-maintenance"] and list(jobs["ok"]) == ["yes"]
    denied = next(f for f in frames if "times" in f.columns)
    assert list(denied["target"]) == ["node/a-0001", "node/a-0003"]  # newest first
    assert list(denied["times"]) == [1, 8]  # eight identical rows are one, with their count
    assert denied["why"].iloc[1] == "cooldown: cordon on node/a-0003"


def test_a_notify_only_rule_is_not_a_denial_on_the_dashboard(
    journal: tuple[str, Store], tmp_path: Path
) -> None:
    """The shipped throttle-notify rule (playbook cordon, mode notify), as the engine journals
    it: the audit trail says the rule only notifies, and the Policy page lists no denial."""
    url, store = journal
    now = time.time()
    eng = DecisionJournal(live_policy(), store, started_at=now - 60)
    hot = finding(FindingKind.GPU_THROTTLE, Severity.WARNING, node="a-0003", first_seen=now - 60)
    for t in (now - 60, now - 30, now):
        eng.cycle([hot], FakeCluster({"a": 10}).view(t), t)
    settings = write_settings(tmp_path / "s.json", url, "alpha")

    trail = frame_with(app(settings, "page_files/remediation.py"), "message")
    assert "node/a-0003: rule throttle-notify only notifies; no action taken" in set(
        trail["message"]
    ), trail
    assert not trail["message"].str.contains("deny").any(), trail
    at = app(settings, "page_files/policy.py")
    assert not [f for f in at.dataframe if "times" in f.value.columns]
    assert "Nothing denied." in texts(at)


def test_a_stale_request_is_marked_before_anyone_clicks_and_approving_it_says_why(
    journal: tuple[str, Store], tmp_path: Path
) -> None:
    """The incident of the pending drain on pool-a-0001 ended after the request: the queue
    marks it stale with that reason; approving it expires it, and the message says why."""
    from dataclasses import replace

    from remediations.types import IncidentStatus

    url, store = journal
    ids = seed_cluster(store)
    a = store.get_action(ids["pending"])
    assert a is not None
    inc = store.get_incident(a.incident_id)
    assert inc is not None
    store.save_incidents([replace(inc, status=IncidentStatus.RESOLVED, resolved_at=time.time())])
    settings = write_settings(tmp_path / "s.json", url, "alpha", unauthenticated_approvals=True)
    at = app(settings, "page_files/remediation.py")
    stale = [w.value for w in at.warning if str(w.value).startswith("Stale:")]
    assert len(stale) == 1 and f"its incident {inc.id[:12]}" in stale[0], stale
    at.button(key=f"approve_{ids['pending']}").click().run()
    assert not at.exception
    done = store.get_action(ids["pending"])
    assert done is not None and done.state is ActionState.EXPIRED
    said = [str(e.value) for e in at.error] + [str(w.value) for w in at.warning]
    assert any("not approved, expired on approval: its incident" in s for s in said), said


def test_an_actions_whole_outcome_is_readable_beside_the_history_table(
    journal: tuple[str, Store], tmp_path: Path
) -> None:
    """A table cell cuts a long outcome at 1,280 px; the opened action shows all of it."""
    url, store = journal
    ids = seed_cluster(store)
    settings = write_settings(tmp_path / "s.json", url, "alpha")
    at = app(settings, "page_files/remediation.py")
    assert len(at.text[0].value) > 40  # it opens on an outcome the table cuts, not a short one
    at.selectbox(key="hist_pick").set_value(ids["denied"]).run()
    assert not at.exception, at.exception
    whole = (
        "approved by alice@example.com, then denied by the gate: protected: node pool-b-0003 "
        "is protected (gpufleet.io/protected=true)"
    )
    assert whole in [t.value for t in at.text]
