"""Where a message goes and when it may go: routes by kind and severity, quiet hours, and a
per-channel rate budget (so a noisy trigger cannot flood a channel, robusta #687)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from alerts.alerts_config import QuietHours, SlackConfig
from alerts.blocks import RANK


def route(cfg: SlackConfig, kind: str, severity: str) -> str:
    """The first route matching the kind and at least its severity; else the default channel."""
    for r in cfg.routes:
        if r.kinds and kind not in r.kinds:
            continue
        if RANK.get(severity, 0) < RANK[r.min_severity]:
            continue
        return r.channel
    return cfg.default_channel


def quiet_until(q: QuietHours | None, severity: str, now: float) -> float | None:
    """When a message of `severity` may be sent if `now` is inside quiet hours (else None)."""
    if q is None or RANK.get(severity, 0) >= RANK[q.min_severity]:
        return None
    tz = ZoneInfo(q.timezone)
    local = datetime.fromtimestamp(now, UTC).astimezone(tz)
    start, end = q.times()
    t = local.timetz().replace(tzinfo=None)
    inside = (start <= t < end) if start <= end else (t >= start or t < end)
    if not inside:
        return None
    day = local.date() if t < end else local.date() + timedelta(days=1)
    return datetime.combine(day, end, tzinfo=tz).timestamp()


class RateBudget:
    """A token bucket per channel: `per_minute` messages, refilled continuously."""

    def __init__(self, per_minute: int) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(max(1, min(per_minute, 5)))
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, channel: str, now: float) -> bool:
        tokens, at = self._buckets.get(channel, (self.burst, now))
        tokens = min(self.burst, tokens + max(0.0, now - at) * self.rate)
        if tokens < 1.0:
            self._buckets[channel] = (tokens, now)
            return False
        self._buckets[channel] = (tokens - 1.0, now)
        return True
