"""Alertmanager intake: its webhook (payload version 4) -> findings, so teams keep their rules.

Alerts are kept by fingerprint: Alertmanager re-sends a group on every `group_interval` and an HA
pair sends it once per replica (alertmanager #4108), and each delivery only refreshes the one
row. A `resolved` delivery (or an `endsAt` in the past) ends it; its finding then stops, and the
incident resolves through the engine's usual hysteresis. Which labels name the node, the GPU and
the job is configuration (`alerts.alertmanager.intake`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from alerts.config import IntakeConfig
from alerts.schema import IntakeRow
from detectors.findings import Finding, FindingKind, Severity
from remediations.store import Store
from remediations.types import stable_id

SEVERITIES = {
    "critical": Severity.CRITICAL,
    "page": Severity.CRITICAL,
    "error": Severity.CRITICAL,
    "warning": Severity.WARNING,
    "warn": Severity.WARNING,
    "info": Severity.INFO,
    "none": Severity.INFO,
}
SOURCE = "alertmanager"
OWN_PREFIX = "Gpufleet"
"""gpufleet's own alerts (see `am_output`) routed back to the webhook are ignored (no loop)."""


class BadPayload(ValueError):
    """Not an Alertmanager webhook payload of version 4."""


def parse_time(raw: Any) -> float | None:
    """RFC 3339 -> epoch seconds; Alertmanager's zero time (year 1) -> None."""
    if not raw or not isinstance(raw, str) or raw.startswith("0001-"):
        return None
    text = re.sub(r"(\.\d{6})\d+", r"\1", raw.replace("Z", "+00:00"))
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise BadPayload(f"not an RFC 3339 time: {raw!r}") from None


def _first(labels: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for n in names:
        v = labels.get(n)
        if v:
            return v
    return None


class Intake:
    def __init__(self, cfg: IntakeConfig, journal: Store) -> None:
        self.cfg = cfg
        self.engine = journal.engine
        self.cluster = journal.cluster

    def receive(self, payload: Any, now: float) -> int:
        """Store one webhook delivery; returns the number of alerts kept from it."""
        if not isinstance(payload, dict) or str(payload.get("version")) != "4":
            raise BadPayload('expected an Alertmanager webhook payload with version "4"')
        alerts = payload.get("alerts")
        if not isinstance(alerts, list):
            raise BadPayload("expected `alerts` to be a list")
        rows = [self._row(a, now) for a in alerts]
        rows = [r for r in rows if not r.labels.get("alertname", "").startswith(OWN_PREFIX)]
        with Session(self.engine) as s, s.begin():
            for r in rows:
                old = s.get(IntakeRow, (self.cluster, r.fingerprint), with_for_update=True)
                if old is None:
                    s.add(r)
                    continue
                old.status, old.labels, old.annotations = r.status, r.labels, r.annotations
                old.starts_at, old.ends_at, old.updated_at = r.starts_at, r.ends_at, now
                old.deliveries += 1
        return len(rows)

    def _row(self, a: Any, now: float) -> IntakeRow:
        if not isinstance(a, dict) or not isinstance(a.get("labels"), dict):
            raise BadPayload("each alert needs a `labels` mapping")
        labels = {str(k): str(v) for k, v in a["labels"].items()}
        status = str(a.get("status", "firing"))
        if status not in ("firing", "resolved"):
            raise BadPayload(f"alert status must be firing or resolved, not {status!r}")
        fp = str(a.get("fingerprint") or stable_id(*sorted(labels.items())))
        starts = parse_time(a.get("startsAt")) or now
        return IntakeRow(
            cluster=self.cluster,
            fingerprint=fp[:64],
            status=status,
            labels=labels,
            annotations={str(k): str(v) for k, v in (a.get("annotations") or {}).items()},
            starts_at=starts,
            ends_at=parse_time(a.get("endsAt")),
            received_at=now,
            updated_at=now,
            deliveries=1,
        )

    def firing(self, now: float) -> list[IntakeRow]:
        q = select(IntakeRow).where(IntakeRow.cluster == self.cluster, IntakeRow.status == "firing")
        with Session(self.engine, expire_on_commit=False) as s:
            rows = list(s.scalars(q.order_by(IntakeRow.fingerprint)))
        return [r for r in rows if r.ends_at is None or r.ends_at > now]

    def findings(self, now: float) -> list[Finding]:
        """One finding per firing alert (by fingerprint), seen now."""
        return [self.finding(r, now) for r in self.firing(now)]

    def finding(self, r: IntakeRow, now: float) -> Finding:
        labels: dict[str, str] = dict(r.labels)
        name = labels.get("alertname", "")
        kind = FindingKind(self.cfg.kinds.get(name, self.cfg.default_kind))
        node = _first(labels, self.cfg.node_labels)
        if node and re.fullmatch(r"[^:/]+:\d+", node):
            node = node.rsplit(":", 1)[0]  # instance "host:9400"
        job = _first(labels, self.cfg.job_labels)
        ns = _first(labels, self.cfg.namespace_labels)
        if job and ns and "/" not in job:
            job = f"{ns}/{job}"
        ann = dict(r.annotations)
        return Finding(
            kind=kind,
            severity=SEVERITIES.get(labels.get("severity", "").lower(), Severity.WARNING),
            summary=ann.get("summary") or ann.get("description") or name or "alert",
            first_seen=min(r.starts_at, now),
            last_seen=now,
            node=node,
            gpu_uuid=_first(labels, self.cfg.gpu_labels),
            job=job,
            evidence={"source": SOURCE, "alertname": name, "fingerprint": r.fingerprint},
            detector=SOURCE,
        )
