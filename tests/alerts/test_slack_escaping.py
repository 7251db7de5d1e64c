"""Text from outside gpufleet (an alert's annotations and labels, node and job names) reaches
Slack escaped: `<!channel>` or a disguised link in an alert is shown, never obeyed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from alerts.am_output import rfc3339
from alerts.blocks import esc
from harness.slack_server import SlackServer
from tests.alerts.conftest import Rig

HOSTILE = "<!channel> look & act: <https://evil.example/run|runbook>"


def mrkdwn(obj: Any) -> Iterator[str]:
    """Every text Slack parses as mrkdwn in a payload: a message's `text` and every text object
    but `plain_text` ones (those show `<!here>` literally, mentions and links unparsed)."""
    if isinstance(obj, list):
        for x in obj:
            yield from mrkdwn(x)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if k == "text" and isinstance(v, str) and obj.get("type") != "plain_text":
                yield v
            else:
                yield from mrkdwn(v)


def test_escaping_the_three_control_characters() -> None:
    assert esc("a & <b> <!here>") == "a &amp; &lt;b&gt; &lt;!here&gt;"


def test_alert_text_and_names_are_escaped_in_every_slack_call(rig: Any, slack: SlackServer) -> None:
    r: Rig = rig(am={"intake": {"kinds": {"GPUXidErrors": "gpu_xid"}}})
    now = time.time()
    alert = {
        "status": "firing",
        "labels": {
            "alertname": "GPUXidErrors",
            "severity": "critical",
            "node": "h100-0001<!here>",
            "job_name": "train<@U0BOSS>",
            "namespace": "ml",
        },
        "annotations": {"summary": HOSTILE},
        "startsAt": rfc3339(now),
    }
    r.rt.intake.receive({"version": "4", "alerts": [alert]}, now)
    findings = r.rt.intake_findings(now)
    assert findings and findings[0].summary == HOSTILE
    r.cycle(findings, now)
    r.rt.run_outbox(now)
    calls = slack.calls(ok_only=True)
    assert calls, "nothing was sent"
    sent = "\n".join(t for c in calls for t in mrkdwn(c.body))
    for raw in ("<!channel>", "<!here>", "<https://evil", "<@U0BOSS>"):
        assert raw not in sent, raw
    assert "&lt;!channel&gt; look &amp; act: &lt;https://evil.example/run|runbook&gt;" in sent
    assert "h100-0001&lt;!here&gt;" in sent
    prompts = [c for c in calls if "Approve *cordon*" in str(c.body)]
    assert prompts, "the approval prompt was sent"  # its target is escaped like the rest
