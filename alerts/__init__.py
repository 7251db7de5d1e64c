"""Slack and Alertmanager: messages, threads, approvals, the slash command, the durable outbox,
Alertmanager intake and output. `AlertsRuntime` is what the service drives."""

from alerts.alerts_config import AlertsConfig, load_alerts_config, parse_alerts_config
from alerts.runtime import AlertsRuntime

__all__ = ["AlertsConfig", "AlertsRuntime", "load_alerts_config", "parse_alerts_config"]
