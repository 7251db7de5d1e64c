"""Block Kit for gpufleet's Slack messages: pure functions from records to payloads.

One message per group (the incidents of one node, one job, or a fleet-wide storm), rendered
whole every time it changes so `chat.update` replaces it in place; short thread lines for the
timeline; an approval prompt with Approve/Reject buttons bound to the action id, and the same
prompt once decided (who and when, no buttons).

Everything that came from outside gpufleet (alert annotations and labels, node, pod, job and
GPU names, journal messages quoting them) goes through `esc` before it lands in mrkdwn, so
`<!channel>` or `<https://evil|runbook>` in an alert's summary is shown, never obeyed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from remediations.store.records import ActionRecord, IncidentRecord

APPROVE, REJECT = "gpufleet_approve", "gpufleet_reject"
SEVERITY_ICON = {
    "critical": ":red_circle:",
    "warning": ":large_orange_circle:",
    "info": ":blue_circle:",
}
RANK = {"info": 0, "warning": 1, "critical": 2}
SHOWN = 10
"""Incidents listed in one message; the rest are counted (Block Kit allows 50 blocks)."""


def esc(text: object) -> str:
    """Slack's escaping of `&`, `<` and `>` (the only control characters of its text)."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def worst(severities: Sequence[str]) -> str:
    return max(severities, key=lambda s: RANK.get(s, 0), default="info")


def when(t: float | None) -> str:
    return "-" if t is None else datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _link(dashboard: str | None, incident_id: str) -> str:
    if not dashboard:
        return f"`{incident_id}`"
    return f"<{dashboard.rstrip('/')}/?incident={incident_id}|{incident_id}>"


def _evidence(ev: Mapping[str, Any], limit: int = 4) -> str:
    parts = [f"{k}={v}" for k, v in list(ev.items())[:limit] if not isinstance(v, dict | list)]
    return esc(", ".join(parts))


def _incident_block(i: IncidentRecord, dashboard: str | None) -> list[dict[str, Any]]:
    state = ":white_check_mark: resolved" if i.status.value == "resolved" else "open"
    entity = esc(i.gpu_uuid or i.node or i.job or "fleet")
    text = (
        f"{SEVERITY_ICON.get(i.severity, '')} *{i.kind}* on `{entity}` ({state})\n{esc(i.summary)}"
    )
    fields = [f"*severity* {i.severity}", f"*incident* {_link(dashboard, i.id)}"]
    if i.job:
        fields.append(f"*job* {esc(i.job)}")
    if i.node:
        fields.append(f"*node* {esc(i.node)}")
    blocks: list[dict[str, Any]] = [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": text[:2900]},
            "fields": [{"type": "mrkdwn", "text": f} for f in fields],
        }
    ]
    ev = _evidence(i.evidence)
    if ev:
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": f"evidence: {ev}"[:2900]}]}
        )
    return blocks


def group_message(
    title: str, incidents: Sequence[IncidentRecord], cluster: str, dashboard: str | None
) -> dict[str, Any]:
    """The message of one node's (or job's) incidents."""
    open_ = [i for i in incidents if i.status.value == "open"]
    sev = worst([i.severity for i in (open_ or incidents)])
    head = f"{SEVERITY_ICON.get(sev, '')} {title}: {len(open_)} open of {len(incidents)}"
    if not open_:
        head = f":white_check_mark: {title}: all {len(incidents)} resolved"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": head[:150]}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": f"cluster *{esc(cluster)}*"}]},
    ]
    shown = sorted(incidents, key=lambda i: (i.status.value != "open", -RANK.get(i.severity, 0)))
    for i in shown[:SHOWN]:
        blocks += _incident_block(i, dashboard)
    if len(shown) > SHOWN:
        more = f"… and {len(shown) - SHOWN} more incidents"
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": more}]})
    return {"text": esc(head), "blocks": blocks}  # `text` (notifications) is mrkdwn


def storm_message(
    incidents: Sequence[IncidentRecord], cluster: str, dashboard: str | None
) -> dict[str, Any]:
    """One summary for a fleet-wide storm instead of hundreds of messages."""
    open_ = [i for i in incidents if i.status.value == "open"]
    nodes = Counter(i.node or "(no node)" for i in open_)
    kinds = Counter(f"{i.kind}/{i.severity}" for i in open_)
    sev = worst([i.severity for i in (open_ or incidents)])
    head = (
        f":rotating_light: Fleet-wide: {len(open_)} open incidents on {len(nodes)} nodes"
        if open_
        else f":white_check_mark: Fleet-wide storm over: {len(incidents)} incidents resolved"
    )
    lines = [f"• {k}: {n}" for k, n in kinds.most_common(8)]
    top = ", ".join(f"`{esc(n)}` ({c})" for n, c in nodes.most_common(10))
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": head[:150]}},
        {
            "type": "context",
            "elements": [
                {"type": "mrkdwn", "text": f"cluster *{esc(cluster)}* · worst severity *{sev}*"}
            ],
        },
    ]
    if lines:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)}})
    if top:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"nodes: {top}"}})
    if dashboard:
        link = f"<{dashboard.rstrip('/')}/?view=incidents|all incidents on the dashboard>"
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": link}]})
    return {"text": head, "blocks": blocks}


def thread_reply(lines: Sequence[str]) -> dict[str, Any]:
    text = "\n".join(lines)
    if len(text) > 3000:
        text = text[:2950] + f"\n… ({len(lines)} lines)"
    return {"text": text}


def prompt_message(action: ActionRecord, expires_at: float) -> dict[str, Any]:
    """Approve/Reject buttons bound to the action id."""
    text = (
        f":raising_hand: Approve *{action.playbook}* on `{esc(action.target)}`? "
        f"(incident `{action.incident_id}`, rule `{esc(action.rule)}`)"
    )
    reasons = esc("; ".join(action.reasons)[:500] or "-")
    about = f"action `{action.id}` · reasons: {reasons} · expires {when(expires_at)}"
    return {
        "text": text,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": text}},
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": about,
                    }
                ],
            },
            {
                "type": "actions",
                "block_id": f"gpufleet_approval:{action.id}",
                "elements": [
                    {
                        "type": "button",
                        "action_id": APPROVE,
                        "value": action.id,
                        "style": "primary",
                        "text": {"type": "plain_text", "text": "Approve"},
                    },
                    {
                        "type": "button",
                        "action_id": REJECT,
                        "value": action.id,
                        "style": "danger",
                        "text": {"type": "plain_text", "text": "Reject"},
                    },
                ],
            },
        ],
    }


DECIDED_ICON = {
    "approved": ":white_check_mark:",
    "rejected": ":no_entry:",
    "expired": ":hourglass:",
}


def decided_prompt(
    playbook: str, target: str, action_id: str, state: str, by: str, at: float
) -> dict[str, Any]:
    """The prompt once decided: who and when, no buttons left to press."""
    who = f" by {by}" if by else ""
    text = (
        f"{DECIDED_ICON.get(state, '')} *{playbook}* on `{esc(target)}` {state}{who} at {when(at)}"
    )
    return {
        "text": text,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": text}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": f"action `{action_id}`"}]},
        ],
    }
