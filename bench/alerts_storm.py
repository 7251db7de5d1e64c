"""Benchmark: Slack API calls per incident, and a 500-GPU storm (issue 13: a handful of messages).

Each scenario runs the real engine (SQLite file journal) and the alerts runtime against the local
Slack Web API server the tests use too (harness/slack_server.py; slack-sdk's WebClient over
HTTP), from the first cycle to the last incident resolved, draining the outbox between cycles
(simulated time, 2 s per worker pass, the default budget of 20 messages per channel per
minute). Counted: every Web API call the server received, top-level messages (posts outside
threads), and the wall time of `on_cycle` and of the outbox drain for the opening cycle.

- single GPU: one critical XID, an approval prompt, a click (through `decide`), resolve;
- one node: 8 GPUs of one node at once;
- storm: 500 GPUs on 63 nodes at once, and 5,000 on 625 (the shipped default policy).
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from pathlib import Path

from alerts import AlertsRuntime, parse_alerts_config
from bench.performance_doc import stamp, table
from detectors.findings import Finding, FindingKind, Severity
from harness.slack_server import SlackServer
from remediations.decision_journal import RemediationEngine
from remediations.policy import load_policy
from remediations.store import Store
from remediations.types import ActionState

TITLE = "Slack alerts: API calls per incident, 500-GPU storm (alerts/)"
T0 = 1_800_000_000.0
STEP = 30.0


def _finding(node: str, gpu: int, t: float) -> Finding:
    return Finding(
        FindingKind.GPU_XID,
        Severity.CRITICAL,
        f"XID 79 on {node} GPU {gpu}",
        t,
        t,
        node=node,
        gpu_uuid=f"GPU-{node}-{gpu}",
        evidence={"xid": 79},
    )


def scenario(name: str, gpus: list[tuple[str, int]], click: bool) -> list[object]:
    slack = SlackServer()
    tmp = tempfile.mkdtemp(prefix="gpufleet-bench-alerts-")
    store = Store.open(f"sqlite:///{Path(tmp) / 'journal.db'}", cluster="bench")
    try:
        engine = RemediationEngine(load_policy(), store, started_at=0.0)
        cfg = parse_alerts_config(
            {
                "slack": {
                    "token": "xoxb-test",
                    "base_url": slack.url,
                    "default_channel": "C0FLEET",
                    "signing_secret": "x",
                    "approvers": {"users": ["U0ALICE"]},
                }
            }
        )
        rt = AlertsRuntime(cfg, store, engine)
        now = T0

        def drain(until: float) -> float:
            t = now
            while t < until or rt.astore.outbox(["pending", "sending"]):
                rt.run_outbox(t)
                t += 2.0
                if t > until + 3600:
                    break
            return t

        findings = [_finding(n, g, now) for n, g in gpus]
        result = engine.cycle(findings, None, now)  # the engine's own time is not counted
        t_cycle = time.perf_counter()
        rt.on_cycle(result, now)
        on_cycle_s = time.perf_counter() - t_cycle
        t_drain = time.perf_counter()
        drain(now)
        drain_s = time.perf_counter() - t_drain
        incidents = len(store.open_incidents())
        for _ in range(2):  # still firing
            now += STEP
            rt.on_cycle(engine.cycle([_finding(n, g, now) for n, g in gpus], None, now), now)
            drain(now)
        if click:
            for a in store.actions([ActionState.AWAITING_APPROVAL]):
                rt.interactions.decide(a.id, True, "U0ALICE", "alice", now)
        for _ in range(5):  # healthy cycles until every incident resolved
            now += STEP
            rt.on_cycle(engine.cycle([], None, now), now)
            drain(now)
        calls = Counter(c.method for c in slack.calls())
        top = sum(1 for c in slack.calls("chat.postMessage") if "thread_ts" not in c.body)
        total = sum(calls.values())
        methods = ", ".join(f"{m} {n}" for m, n in sorted(calls.items()))
        return [
            name,
            len(gpus),
            incidents,
            top,
            total,
            f"{total / max(1, incidents):.2f}",
            f"{on_cycle_s * 1000:.0f}",
            f"{drain_s * 1000:.0f}",
            methods,
        ]
    finally:
        store.close()
        slack.close()


def run(runs: int, quick: bool) -> str:
    storm = [(f"n{n:03d}", g) for n in range(63) for g in range(8)][:500]
    rows = [
        scenario("single GPU (approval clicked)", [("n001", 0)], click=True),
        scenario("one node, 8 GPUs", [("n001", g) for g in range(8)], click=False),
        scenario("storm: 500 GPUs on 63 nodes", storm[:100] if quick else storm, click=False),
    ]
    if not quick:
        big = [(f"n{n:04d}", g) for n in range(625) for g in range(8)]
        rows.append(scenario("storm: 5,000 GPUs on 625 nodes", big, click=False))
    body = table(
        [
            "scenario",
            "GPUs",
            "incidents",
            "top-level messages",
            "API calls (open to resolved)",
            "calls per incident",
            "on_cycle ms (opening)",
            "outbox drain ms (opening)",
            "calls by method",
        ],
        rows,
    )
    return (
        f"{stamp()}\n\n{body}\n\n"
        "One run per scenario (the counts are deterministic; the two times are single "
        "measurements, for scale only). A node's incidents share one message; above "
        "`storm_threshold` (10) new nodes in a cycle every incident joins one fleet-wide summary, "
        "updated in place, with one thread line per cycle and no approval buttons (a person looks "
        "at the whole first). Updates waiting for the same message are coalesced into one call."
    )
