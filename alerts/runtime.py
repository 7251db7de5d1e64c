"""`AlertsRuntime`: the one object the service (`gpufleet run`) drives.

    rt = AlertsRuntime(config.alerts, store, loop.engine, started_at=loop.engine.started_at)
    findings = [*detected, *rt.intake_findings(now)]    # before a cycle
    result, _ = loop.tick(findings, now)
    rt.on_cycle(result, now)                            # after it: messages -> outbox
    rt.run_outbox(now)                                  # a job every ~2 s (leader only)
    server = rt.serve()                                 # Slack endpoints (signed)
    webhook = rt.serve_webhook()                        # Alertmanager webhook (bearer token)
    link = rt.socket_mode()                             # or Socket Mode instead of serve()

Without a Slack token the outbox is still written and "sent" to the log, so the demo and the
dashboard show every message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from sqlalchemy.orm import Session

from alerts.alerts_config import AlertsConfig
from alerts.alerts_store import AlertsStore
from alerts.am_intake import Intake
from alerts.am_output import AmOutput
from alerts.bounded_http import OnRefused
from alerts.http_server import SLACK_PATHS, WEBHOOK_PATHS, AlertsServer, Endpoints
from alerts.interactions import BadRequest, Interactions
from alerts.notify import Notifier
from alerts.outbox import LogTransport, OutboxWorker, Transport
from alerts.slack_client import SlackApi, SocketLink
from detectors.findings import Finding
from errors import ConfigError
from remediations.decision_journal import DecisionJournal
from remediations.incidents import IncidentChange
from remediations.store import IncidentRecord, Store

log = logging.getLogger(__name__)


class HasChanges(Protocol):
    """What `on_cycle` reads of a cycle: its incident changes."""

    @property
    def changes(self) -> Sequence[IncidentChange]: ...


class AlertsRuntime:
    def __init__(
        self,
        config: AlertsConfig,
        store: Store,
        engine: DecisionJournal,
        *,
        transport: Transport | None = None,
        clock: Callable[[], float] = time.time,
        started_at: float | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.engine = engine
        self.clock = clock
        self.astore = AlertsStore.on(store)
        self.astore.start_cursor()
        token = config.secret("token")
        self.api: SlackApi | None = None
        if transport is None and token:
            self.api = SlackApi(token, config.slack.base_url, config.slack.timeout)
            transport = self.api
        self.transport: Transport = transport or LogTransport()
        self.notifier = Notifier(config, store, self.astore)
        self.worker = OutboxWorker(self.astore, self.transport, config.slack)
        self.interactions = Interactions(
            config, store, engine, self.astore, self.notifier, self._group_members
        )
        self.intake = Intake(
            config.alertmanager.intake,
            store,
            started_at=clock() if started_at is None else started_at,
            allows=engine.policy.intake.allows,
        )
        self.am_output = AmOutput(config.alertmanager, store, config.slack.dashboard_url)

    # ---- the service's calls ------------------------------------------------------------------

    def intake_findings(self, now: float) -> list[Finding]:
        """Alertmanager alerts firing now, as findings (one per fingerprint)."""
        return self.intake.findings(now)

    def on_cycle(self, result: HasChanges, now: float) -> None:
        """Incidents opened/updated/resolved and journal events since the last call -> outbox.
        `result`: the engine's CycleResult, or gpufleet.live_cycle's CycleReport."""
        if not self.config.enabled:
            return
        self.notifier.on_cycle(result.changes, now)
        self.am_output.on_cycle(result.changes, now)

    def unannounced(self, incidents: Sequence[IncidentRecord]) -> list[IncidentRecord]:
        """The incidents no message carries: opened by a leader that died between journaling
        them and writing their messages (two transactions), so the next leader says them."""
        if not self.config.enabled or not incidents:
            return []
        with Session(self.astore.engine) as s:
            where = self.astore.message_of(s, [i.id for i in incidents])
        return [i for i in incidents if i.id not in where]

    def run_outbox(self, now: float) -> int:
        """Send what is due (Slack outbox and Alertmanager output); returns calls that succeeded."""
        if not self.config.enabled:
            return 0
        return self.worker.run(now) + self.am_output.push(now)

    def backlog(self, now: float) -> dict[str, float]:
        """Outbox health: `unsent`, `dead` (refused for good) and `oldest_unsent_seconds`."""
        return self.astore.backlog(now)

    def _endpoints(self) -> Endpoints:
        return Endpoints(
            self.interactions,
            self.intake,
            self.astore,
            self.config.secret("signing_secret"),
            self.config.webhook_token(),
            self.clock,
        )

    def serve(
        self, host: str | None = None, port: int | None = None, on_refused: OnRefused | None = None
    ) -> AlertsServer:
        """The Slack listener (interactivity, slash command) on `host` (default
        `alerts.http.host`): signed requests only, the one listener to expose for Slack."""
        h = self.config.http
        return AlertsServer(
            self._endpoints(),
            host or h.host,
            h.port if port is None else port,
            paths=SLACK_PATHS,
            name="slack",
            on_refused=on_refused,
        )

    def serve_webhook(
        self, host: str | None = None, port: int | None = None, on_refused: OnRefused | None = None
    ) -> AlertsServer:
        """The Alertmanager webhook's listener (default `alerts.webhook_http`); anything but
        loopback without the bearer token is refused with a ConfigError before a port opens."""
        h = self.config.webhook_http
        host = host or h.host
        self.config.check_exposure(host)
        return AlertsServer(
            self._endpoints(),
            host,
            h.port if port is None else port,
            paths=WEBHOOK_PATHS,
            name="alertmanager",
            on_refused=on_refused,
        )

    def socket_mode(self) -> SocketLink:
        app_token = self.config.secret("app_token")
        if not app_token or self.api is None:
            raise ConfigError(
                "(config)", ["alerts.slack.app_token: Socket Mode needs an app token and a token"]
            )
        link = SocketLink(app_token, self.api, self.handle_envelope)
        link.connect()
        return link

    def handle_envelope(self, kind: str, payload: dict[str, Any]) -> dict[str, Any] | None:
        """A Socket Mode envelope (Slack authenticated the socket itself: no signature)."""
        now = self.clock()
        try:
            if kind == "interactive":
                return self.interactions.on_block_action(payload, now)
            if kind == "slash_commands":
                form = {k: str(v) for k, v in payload.items()}
                return self.interactions.on_slash(form, now)
        except BadRequest as exc:
            log.warning("socket mode: malformed %s envelope: %s", kind, exc)
        return None

    # ---- helpers ------------------------------------------------------------------------------

    def _group_members(self, usergroup: str) -> set[str]:
        answer = self.transport.call("usergroups.users.list", {"usergroup": usergroup})
        return {str(u) for u in answer.get("users", [])}
