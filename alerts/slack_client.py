"""The Slack adapter: the only module that imports slack_sdk (an import-linter contract).

`SlackApi.call(method, payload)` is one Web API call through slack-sdk's `WebClient`, whose
`RateLimitErrorRetryHandler` honours a 429's `Retry-After` once in place; what still fails comes
back in gpufleet's error vocabulary: `SlackTemporary` (429 with its Retry-After as `delay`, 5xx,
connection errors; `ambiguous` when Slack may have acted before the answer was lost) or
`PermanentError` (Slack said no: `channel_not_found`, `invalid_auth`, ...). `SocketLink` is Socket
Mode (`slack_sdk.socket_mode`) for clusters without an inbound endpoint.
"""

from __future__ import annotations

import logging
import socket
import urllib.error
from collections.abc import Callable, Mapping
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
)
from slack_sdk.socket_mode.builtin.client import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from errors import PermanentError, TemporaryError

log = logging.getLogger(__name__)

_TEMPORARY_ERRORS = frozenset(
    {"ratelimited", "service_unavailable", "fatal_error", "internal_error", "request_timeout"}
)
_SETUP_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "missing_scope",
        "not_in_channel",
        "channel_not_found",
        "is_archived",
        "team_access_not_granted",
    }
)
"""Refusals a person fixes in the Slack app or the config, after which the same message can go:
kept and retried every SETUP_RETRY seconds (logged loudly), never dropped."""
SETUP_RETRY = 300.0


class SlackTemporary(TemporaryError):
    """Trying again may help. `delay` is Slack's Retry-After when it gave one, else 0 (the
    outbox then backs off on its own); `ambiguous`: the request may have been acted on."""

    def __init__(self, message: str, *, delay: float = 0.0, ambiguous: bool = False) -> None:
        super().__init__(message, delay=delay, source="slack")
        self.ambiguous = ambiguous


def _retry_after(headers: Mapping[str, Any]) -> float:
    for k, v in headers.items():
        if k.lower() == "retry-after":
            raw = v[0] if isinstance(v, list | tuple) else v
            try:
                return max(0.0, float(raw))
            except (TypeError, ValueError):
                return 0.0
    return 0.0


class SlackApi:
    """A bot-token Web API client with slack-sdk's retry handlers."""

    def __init__(
        self, token: str, base_url: str, timeout: float = 10.0, rate_limit_retries: int = 1
    ) -> None:
        self.web = WebClient(
            token=token,
            base_url=base_url if base_url.endswith("/") else base_url + "/",
            timeout=max(1, round(timeout)),
            retry_handlers=[
                ConnectionErrorRetryHandler(max_retry_count=0),
                RateLimitErrorRetryHandler(max_retry_count=rate_limit_retries),
            ],
        )

    def call(self, method: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        try:
            resp = self.web.api_call(method, json=dict(payload))
        except SlackApiError as exc:
            status = int(exc.response.status_code)
            data = exc.response.data if isinstance(exc.response.data, dict) else {}
            error = str(data.get("error", f"HTTP {status}"))
            if status == 429 or error == "ratelimited":
                delay = _retry_after(exc.response.headers or {}) or 1.0
                raise SlackTemporary(f"{method}: rate limited", delay=delay) from None
            if status >= 500 or error in _TEMPORARY_ERRORS:
                raise SlackTemporary(f"{method}: Slack answered {status} {error}") from None
            if error in _SETUP_ERRORS:
                log.error(
                    "slack %s: %s: fix the token, scopes or channel; kept for retry", method, error
                )
                raise SlackTemporary(f"{method}: {error} (setup)", delay=SETUP_RETRY) from None
            raise PermanentError(
                f"{method}: {error}", source="slack", hint="check the channel, token and scopes"
            ) from None
        except TimeoutError as exc:
            raise SlackTemporary(f"{method}: no answer ({exc})", ambiguous=True) from None
        except urllib.error.URLError as exc:
            sent = isinstance(exc.reason, TimeoutError | socket.timeout)
            raise SlackTemporary(f"{method}: {exc.reason}", ambiguous=sent) from None
        except (ConnectionError, OSError) as exc:
            raise SlackTemporary(f"{method}: {exc}", ambiguous=True) from None
        body: Any = resp.data
        return dict(body) if isinstance(body, dict) else {"ok": True}


Handler = Callable[[str, dict[str, Any]], dict[str, Any] | None]
"""(envelope type: `interactive` | `slash_commands`, payload) -> response payload or None."""


class SocketLink:
    """Socket Mode: Slack pushes interactions and slash commands over a WebSocket that we open
    (no inbound endpoint needed). Each envelope is acknowledged with the handler's answer."""

    def __init__(self, app_token: str, api: SlackApi, handler: Handler) -> None:
        self.handler = handler
        self.client = SocketModeClient(app_token=app_token, web_client=api.web)
        self.client.socket_mode_request_listeners.append(self._on_request)

    def _on_request(self, client: Any, req: SocketModeRequest) -> None:
        try:
            answer = self.handler(req.type, req.payload)
        except Exception:  # never leave Slack without an ack; the handler logged the cause
            log.exception("socket mode: handling a %s envelope failed", req.type)
            answer = None
        client.send_socket_mode_response(
            SocketModeResponse(envelope_id=req.envelope_id, payload=answer)
        )

    def connect(self) -> None:
        self.client.connect()

    def close(self) -> None:
        self.client.close()
