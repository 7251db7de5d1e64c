"""Alertmanager intake: its webhook (payload version 4) -> findings, so teams keep their rules.

Alerts are kept by fingerprint: Alertmanager re-sends a group on every `group_interval` and an HA
pair sends it once per replica (alertmanager #4108), and each delivery only refreshes the one
row. A `resolved` delivery (or an `endsAt` in the past) ends it; its finding then stops, and the
incident resolves through the engine's usual hysteresis. Which labels name the node, the GPU and
the job is configuration (`alerts.alertmanager.intake`).

Alerts are held to the detectors' evidence rules: one that started before gpufleet started
watching is `pre_existing` (reported, never acted on automatically); `last_seen` is its last
delivery (so the freshness gate judges the delivery, not the cycle); one not delivered again
within `stale_after_repeats` repeat intervals is stale and stops counting. The policy's
`intake.allow` says which (kind, severity) an alert may become; any other is an info anomaly.
Deliveries and the table are bounded (`max_alerts_per_request`, `max_alerts`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, or_, select
from sqlalchemy.orm import Session

from alerts.alerts_config import IntakeConfig
from database.handle import Database
from database.tables.alerts import IntakeRow
from detectors.findings import INTAKE_DETECTOR, Finding, FindingKind, Severity
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
log = logging.getLogger(__name__)
SOURCE = INTAKE_DETECTOR
OWN_PREFIX = "Gpufleet"
"""gpufleet's own alerts (see `am_output`) routed back to the webhook are ignored (no loop)."""


class BadPayload(ValueError):
    """Not an Alertmanager webhook payload of version 4."""


class TooManyAlerts(BadPayload):
    """More alerts in one delivery than `max_alerts_per_request` (the endpoint answers 413)."""


@dataclass(frozen=True, slots=True)
class Received:
    """What one delivery did: alerts stored or refreshed, and new ones refused (table full)."""

    kept: int
    refused: int = 0


Allows = Callable[[FindingKind, Severity], bool]
"""Whether the policy lets an alert become a finding of this kind and severity."""


def parse_time(raw: Any) -> float | None:
    """RFC 3339 -> epoch seconds; Alertmanager's zero time (year 1) -> None."""
    if not raw or not isinstance(raw, str) or raw.startswith("0001-"):
        return None
    text = re.sub(r"(\.\d{6})\d+", r"\1", raw.replace("Z", "+00:00"))
    try:
        return datetime.fromisoformat(text).timestamp()
    except (ValueError, OverflowError):
        raise BadPayload(f"not an RFC 3339 time: {raw!r}") from None


def _first(labels: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for n in names:
        v = labels.get(n)
        if v:
            return v
    return None


class Intake:
    def __init__(
        self,
        cfg: IntakeConfig,
        db: Database,
        *,
        started_at: float,
        allows: Allows | None = None,
    ) -> None:
        self.cfg = cfg
        self.engine = db.engine
        self.cluster = db.cluster
        self.started_at = started_at
        """When gpufleet started watching: alerts that started earlier are pre-existing."""
        self.allows: Allows = allows or (lambda kind, severity: False)

    def receive(self, payload: Any, now: float) -> Received:
        """Store one webhook delivery (refreshing known fingerprints, bounded in size)."""
        if not isinstance(payload, dict) or str(payload.get("version")) != "4":
            raise BadPayload('expected an Alertmanager webhook payload with version "4"')
        alerts = payload.get("alerts")
        if not isinstance(alerts, list):
            raise BadPayload("expected `alerts` to be a list")
        if len(alerts) > self.cfg.max_alerts_per_request:
            raise TooManyAlerts(
                f"{len(alerts)} alerts in one delivery (max {self.cfg.max_alerts_per_request})"
            )
        rows = [self._row(a, now) for a in alerts]
        rows = [r for r in rows if not r.labels.get("alertname", "").startswith(OWN_PREFIX)]
        refused = 0
        with Session(self.engine) as s, s.begin():
            self._prune(s, now)
            count = s.scalar(
                select(func.count()).select_from(IntakeRow).where(IntakeRow.cluster == self.cluster)
            )
            room = self.cfg.max_alerts - int(count or 0)
            for r in rows:
                old = s.get(IntakeRow, (self.cluster, r.fingerprint), with_for_update=True)
                if old is None:
                    if r.status != "firing":
                        continue  # a resolution of an alert not held: nothing to end
                    if room <= 0:
                        refused += 1
                        continue
                    room -= 1
                    s.add(r)
                    continue
                old.status, old.labels, old.annotations = r.status, r.labels, r.annotations
                old.starts_at, old.ends_at, old.updated_at = r.starts_at, r.ends_at, now
                old.deliveries += 1
        if refused:
            log.warning(
                "alertmanager intake full (%d alerts): %d new alerts refused",
                self.cfg.max_alerts,
                refused,
            )
        return Received(len(rows) - refused, refused)

    def _prune(self, s: Session, now: float) -> None:
        """Forget resolved, ended and stale alerts (they no longer count, and hold no room)."""
        s.execute(
            delete(IntakeRow).where(
                IntakeRow.cluster == self.cluster,
                or_(
                    IntakeRow.status != "firing",
                    IntakeRow.ends_at <= now,
                    IntakeRow.updated_at < now - self.cfg.stale_after,
                ),
            )
        )

    def _row(self, a: Any, now: float) -> IntakeRow:
        if not isinstance(a, dict) or not isinstance(a.get("labels"), dict):
            raise BadPayload("each alert needs a `labels` mapping")
        annotations = a.get("annotations") or {}
        if not isinstance(annotations, dict):
            raise BadPayload("an alert's `annotations` must be a mapping")
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
            annotations={str(k): str(v) for k, v in annotations.items()},
            starts_at=starts,
            ends_at=parse_time(a.get("endsAt")),
            received_at=now,
            updated_at=now,
            deliveries=1,
        )

    def held(self) -> list[IntakeRow]:
        """Every alert held, live or not yet pruned (`gpufleet alerts intake list`)."""
        q = select(IntakeRow).where(IntakeRow.cluster == self.cluster)
        with Session(self.engine, expire_on_commit=False) as s:
            return list(s.scalars(q.order_by(IntakeRow.updated_at.desc(), IntakeRow.fingerprint)))

    def clear(self, fingerprints: list[str] | None = None) -> int:
        """Forget held alerts (all, or these fingerprints); their findings stop next cycle."""
        q = delete(IntakeRow).where(IntakeRow.cluster == self.cluster)
        if fingerprints is not None:
            q = q.where(IntakeRow.fingerprint.in_(fingerprints))
        with Session(self.engine) as s, s.begin():
            return int(s.execute(q).rowcount or 0)  # type: ignore[attr-defined]

    def is_stale(self, r: IntakeRow, now: float) -> bool:
        return now - r.updated_at > self.cfg.stale_after

    def firing(self, now: float) -> list[IntakeRow]:
        """Alerts that count now: firing, not ended, delivered within the staleness window."""
        q = select(IntakeRow).where(IntakeRow.cluster == self.cluster, IntakeRow.status == "firing")
        with Session(self.engine, expire_on_commit=False) as s:
            rows = list(s.scalars(q.order_by(IntakeRow.fingerprint)))
        return [
            r for r in rows if (r.ends_at is None or r.ends_at > now) and not self.is_stale(r, now)
        ]

    def findings(self, now: float) -> list[Finding]:
        """One finding per firing alert (by fingerprint) that still counts."""
        return [self.finding(r) for r in self.firing(now)]

    def finding(self, r: IntakeRow) -> Finding:
        labels: dict[str, str] = dict(r.labels)
        name = labels.get("alertname", "")
        kind = FindingKind(self.cfg.kinds.get(name, self.cfg.default_kind))
        severity = SEVERITIES.get(labels.get("severity", "").lower(), Severity.WARNING)
        node = _first(labels, self.cfg.node_labels)
        if node and re.fullmatch(r"[^:/]+:\d+", node):
            node = node.rsplit(":", 1)[0]  # instance "host:9400"
        job = _first(labels, self.cfg.job_labels)
        ns = _first(labels, self.cfg.namespace_labels)
        if job and ns and "/" not in job:
            job = f"{ns}/{job}"
        ann = dict(r.annotations)
        evidence: dict[str, Any] = {
            "source": SOURCE,
            "alertname": name,
            "fingerprint": r.fingerprint,
        }
        if not self.allows(kind, severity):
            evidence["not_allowed"] = (
                f"{kind.value}/{severity.value}: not in the policy's intake.allow; "
                "reported as an info anomaly"
            )
            kind, severity = FindingKind.ANOMALY, Severity.INFO
        pre_existing = r.starts_at < self.started_at
        if pre_existing:
            evidence["pre_existing"] = "the alert started before gpufleet started watching"
        return Finding(
            kind=kind,
            severity=severity,
            summary=ann.get("summary") or ann.get("description") or name or "alert",
            first_seen=min(r.starts_at, r.updated_at),
            last_seen=r.updated_at,
            node=node,
            gpu_uuid=_first(labels, self.cfg.gpu_labels),
            job=job,
            evidence=evidence,
            detector=SOURCE,
            pre_existing=pre_existing,
        )
