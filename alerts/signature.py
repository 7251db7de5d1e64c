"""Slack request signing, v0: `X-Slack-Signature: v0=hex(HMAC-SHA256(secret, "v0:{ts}:{body}"))`.

Checked on the raw body bytes, compared in constant time, and refused when the timestamp is more
than five minutes from now (replays); an exact repeat inside the window is refused by the
caller's seen-request record. No signing secret configured: every request is refused.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

WINDOW = 300.0


class Refused(Exception):
    """The request is not from Slack (or too old): answer 401 and change nothing."""


def sign(secret: str, timestamp: str, body: bytes) -> str:
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def _header(headers: Mapping[str, str], name: str) -> str:
    for k, v in headers.items():
        if k.lower() == name.lower():
            return v
    return ""


def verify(secret: str | None, headers: Mapping[str, str], body: bytes, now: float) -> str:
    """Return the signature (the request's identity for replay checks) or raise Refused."""
    if not secret:
        raise Refused("no signing secret configured: refusing every request")
    ts = _header(headers, "X-Slack-Request-Timestamp")
    given = _header(headers, "X-Slack-Signature")
    if not ts or not given:
        raise Refused("unsigned request")
    if not ts.isascii() or not ts.isdigit() or len(ts) > 12:
        raise Refused("malformed timestamp")  # seconds since 1970; a 400-digit one overflows
    t = float(ts)
    if abs(now - t) > WINDOW:
        raise Refused("timestamp outside the 5-minute window")
    if not hmac.compare_digest(sign(secret, ts, body).encode(), given.encode()):
        raise Refused("bad signature")
    return given
