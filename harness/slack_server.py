"""A local Slack Web API server, as slack-sdk's own tests use one (`WebClient(base_url=...)`).

It records every request, keeps posted messages per channel (with their metadata, so
`conversations.history`/`replies` can find them), resolves channel names to IDs on post, and
refuses `chat.update` with a channel name (`channel_not_found`, as Slack does: slack-sdk #1410).
Faults are scripted per method: `fail(method, status, times, retry_after)` answers HTTP errors,
`slow(method, seconds)` applies the call but answers after the client gave up (a lost answer).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHANNELS = {"#gpufleet": "C0FLEET", "#gpu-critical": "C0CRIT", "#gpu-jobs": "C0JOBS"}


@dataclass
class Call:
    method: str
    body: dict[str, Any]
    headers: dict[str, str]
    status: int = 200


@dataclass
class Fault:
    status: int
    times: int
    retry_after: int | None = None
    slow: float = 0.0
    error: str = ""


@dataclass
class SlackState:
    calls: list[Call] = field(default_factory=list)
    messages: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    faults: dict[str, list[Fault]] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)
    token: str = "xoxb-test"
    app_token: str = "xapp-test"
    socket_url: str = ""
    ts: int = 1_700_000_000
    member_of: set[str] = field(default_factory=lambda: set(CHANNELS.values()))
    """Channel IDs the bot is in (`conversations.info` answers `is_member`)."""


class SlackServer:
    def __init__(self) -> None:
        self.state = SlackState()
        self.lock = threading.Lock()
        handler = type("H", (_Handler,), {"server_ref": self})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/api/"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # ---- scripting and reading ---------------------------------------------------------------

    def fail(
        self, method: str, status: int, times: int = 1, retry_after: int | None = None
    ) -> None:
        with self.lock:
            self.state.faults.setdefault(method, []).append(Fault(status, times, retry_after))

    def refuse(self, method: str, error: str, times: int = 1) -> None:
        """Answer `{"ok": false, "error": error}` (HTTP 200), as Slack refuses a call."""
        with self.lock:
            self.state.faults.setdefault(method, []).append(Fault(200, times, error=error))

    def slow(self, method: str, seconds: float, times: int = 1) -> None:
        with self.lock:
            self.state.faults.setdefault(method, []).append(Fault(200, times, slow=seconds))

    def calls(self, method: str | None = None, ok_only: bool = False) -> list[Call]:
        with self.lock:
            return [
                c
                for c in self.state.calls
                if (method is None or c.method == method) and (not ok_only or c.status == 200)
            ]

    def posted(self, channel_id: str) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.state.messages.get(channel_id, []))

    def all_posted(self) -> list[dict[str, Any]]:
        with self.lock:
            return [m for ms in self.state.messages.values() for m in ms]

    # ---- the API -----------------------------------------------------------------------------

    def handle(
        self, method: str, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[int, dict[str, Any], dict[str, str], float]:
        with self.lock:
            fault = None
            queue = self.state.faults.get(method) or []
            if queue:
                fault = queue[0]
                fault.times -= 1
                if fault.times <= 0:
                    queue.pop(0)
            status = fault.status if fault and fault.status != 200 else 200
            self.state.calls.append(Call(method, body, headers, status))
            if method == "apps.connections.open":
                if headers.get("authorization") != f"Bearer {self.state.app_token}":
                    return 200, {"ok": False, "error": "invalid_auth"}, {}, 0.0
                return 200, {"ok": True, "url": self.state.socket_url}, {}, 0.0
            if headers.get("authorization") != f"Bearer {self.state.token}":
                return 200, {"ok": False, "error": "invalid_auth"}, {}, 0.0
            if status == 429:
                ra = str(fault.retry_after if fault and fault.retry_after is not None else 1)
                return 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": ra}, 0.0
            if status >= 500:
                return status, {"ok": False, "error": "internal_error"}, {}, 0.0
            if fault and fault.error:
                return 200, {"ok": False, "error": fault.error}, {}, 0.0
            answer = self._apply(method, body)
            return 200, answer, {}, fault.slow if fault else 0.0

    def _apply(self, method: str, b: dict[str, Any]) -> dict[str, Any]:
        st = self.state
        if method == "auth.test":
            return {"ok": True, "team": "gpufleet-test", "user": "gpufleet", "user_id": "U0BOT",
                    "bot_id": "B0BOT"}  # fmt: skip
        if method == "conversations.info":
            ch = str(b.get("channel"))
            if ch not in CHANNELS.values():
                return {"ok": False, "error": "channel_not_found"}
            return {"ok": True, "channel": {"id": ch, "is_member": ch in st.member_of}}
        if method == "chat.postMessage":
            ch = CHANNELS.get(str(b.get("channel")), str(b.get("channel")))
            if ch not in CHANNELS.values():
                return {"ok": False, "error": "channel_not_found"}
            st.ts += 1
            ts = f"{st.ts}.000100"
            if "thread_ts" in b and not any(
                m["ts"] == b["thread_ts"] for m in st.messages.get(ch, [])
            ):
                return {"ok": False, "error": "thread_not_found"}
            msg: dict[str, Any] = {
                "ts": ts,
                "channel": ch,
                **{k: b[k] for k in ("text", "blocks", "thread_ts", "metadata") if k in b},
            }
            st.messages.setdefault(ch, []).append(msg)
            return {"ok": True, "channel": ch, "ts": ts, "message": msg}
        if method == "chat.update":
            ch = str(b.get("channel"))
            for m in st.messages.get(ch, []):
                if m["ts"] == b.get("ts"):
                    m.update({k: b[k] for k in ("text", "blocks") if k in b})
                    m["edited"] = m.get("edited", 0) + 1
                    return {"ok": True, "channel": ch, "ts": m["ts"]}
            return {
                "ok": False,
                "error": "channel_not_found" if ch not in st.messages else "message_not_found",
            }
        if method == "chat.postEphemeral":
            st.ts += 1
            return {"ok": True, "message_ts": f"{st.ts}.000200"}
        if method in ("conversations.history", "conversations.replies"):
            ch = str(b.get("channel"))
            ms = st.messages.get(ch, [])
            if method == "conversations.replies":
                ms = [m for m in ms if m.get("thread_ts") == b.get("ts") or m["ts"] == b.get("ts")]
            else:
                ms = [m for m in ms if "thread_ts" not in m]
            keep = bool(b.get("include_all_metadata"))
            return {
                "ok": True,
                "messages": [{k: v for k, v in m.items() if keep or k != "metadata"} for m in ms],
            }
        if method == "usergroups.users.list":
            users = st.groups.get(str(b.get("usergroup")))
            if users is None:
                return {"ok": False, "error": "no_such_subteam"}
            return {"ok": True, "users": users}
        return {"ok": False, "error": "unknown_method"}


class _Handler(BaseHTTPRequestHandler):
    server_ref: SlackServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        method = self.path.rsplit("/", 1)[-1]
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, answer, extra, delay = self.server_ref.handle(method, body, headers)
        if delay:
            time.sleep(delay)
        data = json.dumps(answer).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
