"""Alertmanager output: gpufleet's incidents as alerts in the team's own Alertmanager.

Each open incident is one alert (`POST /api/v2/alerts`) with labels `alertname`, `kind`,
`severity`, `node`, `gpu`, `job`, `namespace`, `cluster` (empty ones left out), `startsAt` = when
it opened and `endsAt` = now + validity, re-sent when half the validity is left so it never lapses
while open; when the incident resolves it is sent once more with `endsAt` = the resolve time.
The rows are stored first (a restart resumes re-sending and ending). Incidents that came from
Alertmanager itself are not sent back (no loop).
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from alerts.alerts_config import AlertmanagerConfig
from alerts.am_intake import OWN_PREFIX, SOURCE
from database.handle import Database
from database.tables.alerts import AmOutputRow
from remediations.incidents import Change, IncidentChange
from remediations.store import IncidentRecord

log = logging.getLogger(__name__)
RETRY = 30.0


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def alertname(kind: str) -> str:
    return OWN_PREFIX + "".join(p.capitalize() for p in kind.split("_"))


def labels_of(i: IncidentRecord) -> dict[str, str]:
    namespace, job = "", i.job or ""
    if "/" in job:
        namespace, job = job.split("/", 1)
    raw = {
        "alertname": alertname(i.kind),
        "kind": i.kind,
        "severity": i.severity,
        "node": i.node or "",
        "gpu": i.gpu_uuid or "",
        "job": job,
        "namespace": namespace,
        "cluster": i.cluster,
    }
    return {k: v for k, v in raw.items() if v}


class AmOutput:
    def __init__(
        self, cfg: AlertmanagerConfig, db: Database, dashboard_url: str | None = None
    ) -> None:
        self.cfg = cfg
        self.engine = db.engine
        self.cluster = db.cluster
        self.dashboard = dashboard_url

    def on_cycle(self, changes: Sequence[IncidentChange], now: float) -> None:
        if self.cfg.url is None or not changes:
            return
        with Session(self.engine) as s, s.begin():
            for c in changes:
                i = c.incident
                if i.evidence.get("source") == SOURCE:
                    continue
                row = s.get(AmOutputRow, i.id)
                if c.change is Change.RESOLVED:
                    if row is not None and row.state == "firing":
                        row.state, row.ends_at, row.next_at = "ending", i.resolved_at or now, now
                    continue
                ann = {"summary": i.summary, "incident": i.id}
                if self.dashboard:
                    ann["dashboard"] = f"{self.dashboard.rstrip('/')}/?incident={i.id}"
                if row is None:
                    s.add(
                        AmOutputRow(
                            incident_id=i.id,
                            cluster=self.cluster,
                            labels=labels_of(i),
                            annotations=ann,
                            starts_at=i.opened_at,
                            ends_at=None,
                            next_at=now,
                            state="firing",
                            sent_at=None,
                        )
                    )
                elif row.state == "firing":
                    row.labels, row.annotations, row.next_at = labels_of(i), ann, now

    def push(self, now: float) -> int:
        """Send every due alert in one request; returns how many were sent."""
        if self.cfg.url is None:
            return 0
        q = select(AmOutputRow).where(
            AmOutputRow.cluster == self.cluster,
            AmOutputRow.state.in_(("firing", "ending")),
            AmOutputRow.next_at <= now,
        )
        with Session(self.engine) as s, s.begin():
            rows = list(s.scalars(q.order_by(AmOutputRow.incident_id).limit(1000)))
            if not rows:
                return 0
            body = [self._alert(r, now) for r in rows]
            try:
                self._post(body)
            except (urllib.error.URLError, OSError, ValueError) as exc:
                log.warning("alertmanager %s: %s; again in %.0f s", self.cfg.url, exc, RETRY)
                for r in rows:
                    r.next_at = now + RETRY
                return 0
            for r in rows:
                r.sent_at = now
                if r.state == "ending":
                    r.state = "ended"
                else:
                    r.next_at = now + self.cfg.validity / 2
            return len(rows)

    def _alert(self, r: AmOutputRow, now: float) -> dict[str, Any]:
        ends = r.ends_at if r.state == "ending" and r.ends_at else now + self.cfg.validity
        alert: dict[str, Any] = {
            "labels": dict(r.labels),
            "annotations": dict(r.annotations),
            "startsAt": rfc3339(r.starts_at),
            "endsAt": rfc3339(ends),
        }
        if "dashboard" in r.annotations:
            alert["generatorURL"] = r.annotations["dashboard"]
        return alert

    def _post(self, body: list[dict[str, Any]]) -> None:
        req = urllib.request.Request(
            f"{self.cfg.url}/api/v2/alerts",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=self.cfg.timeout) as resp:
            if resp.status >= 300:
                raise ValueError(f"HTTP {resp.status}")
