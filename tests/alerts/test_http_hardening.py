"""Both inbound servers (the alerts endpoints and the service's probes) against hostile clients,
over real sockets: malformed requests get 4xx and no stack trace, bodies are capped before they
are read, slow clients are cut off and cannot starve the probes, and Hypothesis fuzzes every
endpoint (signed and authenticated requests too, so the payload parsers are reached)."""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alerts.bounded_http import Limits
from alerts.http_server import AlertsServer, Endpoints
from gpufleet.service.http import HealthServer
from tests.alerts.conftest import SECRET, Rig, sign

TOKEN = "fuzz-token"
CASES: dict[str, int] = {}
"""Fuzz cases run per server (printed at the end of each fuzz test: pytest -s shows it)."""


def raw(port: int, data: bytes, timeout: float = 10.0) -> tuple[int, bytes]:
    """Send `data` as is; (status, whole response). Status 0: closed without an answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server answered and closed before reading everything: fine
        chunks = []
        while True:
            try:
                got = s.recv(65536)
            except ConnectionResetError:
                break
            if not got:
                break
            chunks.append(got)
    out = b"".join(chunks)
    if not out.startswith(b"HTTP/1."):
        return 0, out
    return int(out.split(b" ", 2)[1]), out


def request(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: gpufleet\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode("latin-1") + b"\r\n" + body


def assert_clean(status: int, response: bytes) -> None:
    assert 200 <= status < 500, response[:300]
    assert b"Traceback" not in response and b'File "' not in response


class Listeners:
    """The Slack listener and the webhook's, as `gpufleet run` starts them."""

    def __init__(self, slack: AlertsServer, webhook: AlertsServer) -> None:
        self.slack, self.webhook = slack, webhook

    def port(self, path: str) -> int:
        return (self.webhook if path.startswith("/alertmanager") else self.slack).port


@pytest.fixture
def listeners(rig: Any) -> Iterator[Listeners]:
    r: Rig = rig(am={"intake": {"bearer_token": TOKEN, "kinds": {"GPUXidErrors": "gpu_xid"}}})
    slack, webhook = r.rt.serve(port=0), r.rt.serve_webhook(port=0)
    yield Listeners(slack, webhook)
    slack.close()
    webhook.close()


def test_slack_and_the_webhook_listen_apart(listeners: Listeners) -> None:
    body = b'{"version": "4", "alerts": []}'
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Length": str(len(body))}
    webhook = request("POST", "/alertmanager/webhook", auth, body)
    assert raw(listeners.webhook.port, webhook)[0] == 200
    assert raw(listeners.slack.port, webhook)[0] == 404  # not on the internet-facing listener
    slash = request("POST", "/slack/commands", {**sign(b"x=1"), "Content-Length": "3"}, b"x=1")
    assert raw(listeners.webhook.port, slash)[0] == 404
    assert raw(listeners.slack.port, slash)[0] == 400  # signed, reached, malformed


@pytest.fixture
def health() -> Iterator[HealthServer]:
    server = HealthServer(
        "127.0.0.1",
        0,
        lambda: (True, {"role": "leader"}),
        lambda: b"# HELP x\n",
        Limits(max_body=0, workers=4, read_timeout=2.0),
    ).start()
    yield server
    server.stop()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_malformed_requests_get_4xx_without_a_stack_trace(listeners: Listeners) -> None:
    port = listeners.webhook.port
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    def webhook(body: bytes, **extra: str) -> tuple[int, bytes]:
        headers = {**auth, "Content-Length": str(len(body)), **extra}
        return raw(port, request("POST", "/alertmanager/webhook", headers, body))

    cases: dict[str, tuple[int, bytes]] = {}
    ts = "9" * 400  # a 400-digit Slack timestamp (OverflowError before)
    body = b"command=/gpufleet&text=status"
    slack_headers = {
        **sign(body),
        "X-Slack-Request-Timestamp": ts,
        "Content-Length": str(len(body)),
    }
    cases["slack 400-digit timestamp"] = raw(
        listeners.slack.port, request("POST", "/slack/commands", slack_headers, body)
    )
    alert = {"labels": {"alertname": "X"}, "annotations": ["a", "list"]}
    cases["annotations as a list"] = webhook(
        json.dumps({"version": "4", "alerts": [alert]}).encode()
    )
    deep = b"[" * 100_000 + b"]" * 100_000
    cases["JSON nested 100k deep"] = webhook(deep)
    cases["Content-Length: abc"] = webhook(b"{}", **{"Content-Length": "abc"})
    cases["Content-Length: -1"] = webhook(b"{}", **{"Content-Length": "-1"})
    cases["Content-Length twice"] = raw(
        port,
        request("POST", "/alertmanager/webhook", {**auth, "Content-Length": "2"}, b"")[:-2]
        + b"Content-Length: 3\r\n\r\n{}",
    )
    cases["not JSON"] = webhook(b"\xff\xfe not json")
    cases["chunked"] = raw(
        port,
        request("POST", "/alertmanager/webhook", {**auth, "Transfer-Encoding": "chunked"})
        + b"2\r\n{}\r\n0\r\n\r\n",
    )
    cases["bad request line"] = raw(port, b"POST\r\n\r\n")
    cases["header without colon"] = raw(port, b"GET /healthz HTTP/1.1\r\nnonsense\r\n\r\n")
    cases["100 headers"] = raw(
        port, request("GET", "/healthz", {f"X-H{i}": "v" for i in range(100)})
    )
    cases["a 20 KiB header"] = raw(port, request("GET", "/healthz", {"X-Big": "a" * 20_000}))
    expected = {
        "slack 400-digit timestamp": 401,
        "annotations as a list": 400,
        "JSON nested 100k deep": 400,
        "Content-Length: abc": 400,
        "Content-Length: -1": 400,
        "Content-Length twice": 400,
        "not JSON": 400,
        "chunked": 411,
        "bad request line": 400,
        "header without colon": 400,
        "100 headers": 431,
        "a 20 KiB header": 431,
    }
    assert {k: v[0] for k, v in cases.items()} == expected
    for status, response in cases.values():
        assert_clean(status, response)


def test_a_body_over_the_cap_is_refused_before_it_is_read(listeners: Listeners) -> None:
    server = listeners.webhook
    head = request(
        "POST",
        "/alertmanager/webhook",
        {"Authorization": f"Bearer {TOKEN}", "Content-Length": str(64 << 20)},
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        t0 = time.monotonic()
        s.sendall(head)  # the 64 MiB never follow: the answer must not wait for them
        answer = s.recv(4096)
        assert answer.startswith(b"HTTP/1.1 413") and time.monotonic() - t0 < 3


def test_refused_requests_are_counted_in_the_services_metrics() -> None:
    from gpufleet.service.service_config import TelemetryConfig
    from gpufleet.service.telemetry import Telemetry

    t = Telemetry(TelemetryConfig(), "test")
    server = HealthServer(
        "127.0.0.1", 0, lambda: (True, {}), t.exposition, on_refused=t.refused
    ).start()
    try:
        port = _port(server.url)
        assert raw(port, request("GET", "/nope", {}))[0] == 404
        assert raw(port, b"GET /healthz HTTP/1.1\r\nContent-Length: -1\r\n\r\n")[0] == 400
        assert raw(port, request("GET", "/healthz", {}))[0] == 200  # not counted
        body = raw(port, request("GET", "/metrics", {}))[1]
    finally:
        server.stop()
        t.close()
    counted = {
        (m.group(1), m.group(2)): float(m.group(3))
        for m in re.finditer(
            r'^gpufleet_http_refused_total\{listener="(\w+)",.*status="(\d+)"\} (\S+)$',
            body.decode(),
            re.MULTILINE,
        )
    }
    assert counted == {("probes", "404"): 1.0, ("probes", "400"): 1.0}


def test_expect_100_continue_and_head(listeners: Listeners, health: HealthServer) -> None:
    body = b'{"version": "4", "alerts": []}'
    head = request(
        "POST",
        "/alertmanager/webhook",
        {"Authorization": f"Bearer {TOKEN}", "Content-Length": str(len(body)),
         "Expect": "100-continue"},
    )  # fmt: skip
    with socket.create_connection(("127.0.0.1", listeners.webhook.port), timeout=5) as s:
        s.sendall(head)  # like curl: the body only after "100 Continue"
        assert s.recv(4096).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(body)
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
    status, response = raw(_port(health.url), request("HEAD", "/healthz", {}))
    assert status == 200 and response.endswith(b"\r\n\r\n")  # headers only


def test_slow_clients_are_cut_off_and_the_probes_answer_meanwhile(health: HealthServer) -> None:
    port = _port(health.url)
    slow = []
    try:
        for _ in range(300):  # half-sent requests: the head never ends
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            slow.append(s)
        t0 = time.monotonic()
        status, body = raw(port, request("GET", "/healthz", {}), timeout=5)
        assert (status, body.endswith(b"ok\n")) == (200, True)
        assert time.monotonic() - t0 < 2.0, "the probe waited behind slow clients"
        # each slow client is answered 408 once read_timeout (2 s here) has passed
        for s in slow[:5]:
            assert s.recv(4096).startswith(b"HTTP/1.1 408")
    finally:
        for s in slow:
            s.close()


def test_connections_beyond_the_bound_get_503_at_once(rig: Any) -> None:
    r: Rig = rig()
    endpoints = Endpoints(r.rt.interactions, r.rt.intake, r.rt.astore, SECRET, None)
    server = AlertsServer(endpoints, "127.0.0.1", 0, Limits(max_connections=5, read_timeout=5))
    held = []
    try:
        for _ in range(5):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            s.sendall(b"GET /healthz HTTP/1.1\r\n")
            held.append(s)
        time.sleep(0.3)  # let the server accept them
        status, _ = raw(server.port, request("GET", "/healthz", {}), timeout=5)
        assert status == 503
    finally:
        for s in held:
            s.close()
        server.close()
    # once they are gone, it answers again
    server2 = AlertsServer(endpoints, "127.0.0.1", 0, Limits(max_connections=5))
    try:
        assert raw(server2.port, request("GET", "/healthz", {}))[0] == 200
    finally:
        server2.close()


# ---- fuzz ----------------------------------------------------------------------------------

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
ALERT = st.fixed_dictionaries(
    {},
    optional={
        "status": st.sampled_from(["firing", "resolved", "pending"]) | JSONISH,
        "labels": st.dictionaries(
            st.sampled_from(["alertname", "severity", "node", "UUID", "instance", "job_name"])
            | st.text(max_size=8),
            st.text(max_size=30) | JSONISH,
            max_size=5,
        )
        | JSONISH,
        "annotations": st.dictionaries(st.text(max_size=8), st.text(max_size=30)) | JSONISH,
        "startsAt": st.sampled_from(
            ["2026-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "9" * 40, "2026-13-45T99:00:00Z"]
        )
        | JSONISH,
        "endsAt": st.sampled_from(["0001-01-01T00:00:00Z", "2020-01-01T00:00:00.123456789Z"])
        | JSONISH,
        "fingerprint": st.text(max_size=80) | JSONISH,
    },
)
GOOD_ALERT = st.fixed_dictionaries(
    {
        "labels": st.fixed_dictionaries(
            {"alertname": st.sampled_from(["GPUXidErrors", "Other"])},
            optional={
                "severity": st.sampled_from(["critical", "warning", "page", "x"]),
                "node": st.text(max_size=20),
                "instance": st.sampled_from(["h:9400", "h", ":1"]),
            },
        ),
        "status": st.sampled_from(["firing", "resolved"]),
    },
    optional={
        "annotations": st.dictionaries(st.text(max_size=8), st.text(max_size=30), max_size=3),
        "startsAt": st.sampled_from(["2026-01-01T00:00:00Z", "0001-01-01T00:00:00Z"]),
        "fingerprint": st.text(max_size=80),
    },
)
WEBHOOK_BODY = st.one_of(
    st.fixed_dictionaries(
        {"version": st.just("4"), "alerts": st.lists(GOOD_ALERT | ALERT, max_size=4)}
    ).map(lambda d: json.dumps(d).encode()),
    st.fixed_dictionaries(
        {"version": st.sampled_from(["4", 4, "3"]) | JSONISH, "alerts": JSONISH}
    ).map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=200),
    JSONISH.map(lambda d: json.dumps(d).encode()),
)
SLACK_PAYLOAD = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["block_actions", "view_submission"]) | JSONISH,
        "user": st.fixed_dictionaries({}, optional={"id": st.text(max_size=12) | JSONISH})
        | JSONISH,
        "actions": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "action_id": st.sampled_from(["gpufleet_approve", "gpufleet_reject"]) | JSONISH,
                    "value": st.text(max_size=20) | JSONISH,
                },
            ),
            max_size=3,
        )
        | JSONISH,
        "channel": JSONISH,
    },
)
SLACK_BODY = st.one_of(
    SLACK_PAYLOAD.map(lambda p: urllib.parse.urlencode({"payload": json.dumps(p)}).encode()),
    st.fixed_dictionaries(
        {
            "command": st.just("/gpufleet"),
            "user_id": st.sampled_from(["U0ALICE", "U0MALLORY"]),
            "text": st.sampled_from(["status", "actions", "approve", "pause x", "resume"])
            | st.text(max_size=40),
        },
        optional={"user_name": st.text(max_size=10), "x": st.text(max_size=10)},
    ).map(lambda f: urllib.parse.urlencode(f).encode()),
    st.binary(max_size=200),
)
HEADER_VALUE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30)
EXTRA_HEADERS = st.dictionaries(
    st.sampled_from(["Content-Length", "Transfer-Encoding", "Expect", "X-Slack-Signature"])
    | st.from_regex(r"X-[A-Za-z]{1,8}", fullmatch=True),
    HEADER_VALUE,
    max_size=3,
)


def _case(server: str) -> None:
    CASES[server] = CASES.get(server, 0) + 1


FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(
    endpoint=st.sampled_from(["webhook", "slack/interactions", "slack/commands", "other"]),
    method=st.sampled_from(["POST"] * 6 + ["GET", "PUT", "DELETE", "OPTIONS"]),
    signed=st.sampled_from([True, True, True, False]),
    webhook_body=WEBHOOK_BODY,
    slack_body=SLACK_BODY,
    extra=st.just({}) | st.just({}) | EXTRA_HEADERS,
    path=st.from_regex(r"/[a-z/]{0,20}", fullmatch=True),
)
def test_fuzz_the_alerts_endpoints(
    listeners: Listeners,
    endpoint: str,
    method: str,
    signed: bool,
    webhook_body: bytes,
    slack_body: bytes,
    extra: dict[str, str],
    path: str,
) -> None:
    _case("alerts")
    headers: dict[str, str] = {}
    if endpoint == "webhook":
        target, body = "/alertmanager/webhook", webhook_body
        if signed:
            headers["Authorization"] = f"Bearer {TOKEN}"
    elif endpoint.startswith("slack"):
        target, body = f"/{endpoint}", slack_body
        if signed:  # a fresh timestamp per case: the replay check never refuses it
            headers.update(sign(body, int(time.time()) - CASES["alerts"] % 200))
    else:
        target, body = path, slack_body
    headers["Content-Length"] = str(len(body))
    headers.update(extra)
    port = listeners.port(target) if CASES["alerts"] % 2 else listeners.slack.port
    status, response = raw(port, request(method, target, headers, body))
    assert_clean(status, response)


@FUZZ
@given(
    method=st.sampled_from(["GET", "HEAD", "POST", "PUT", "TRACE"]),
    path=st.sampled_from(["/healthz", "/readyz", "/metrics"])
    | st.from_regex(r"/[\x21-\x7e]{0,30}", fullmatch=True),
    extra=EXTRA_HEADERS,
    body=st.binary(max_size=64),
)
def test_fuzz_the_probe_endpoints(
    health: HealthServer, method: str, path: str, extra: dict[str, str], body: bytes
) -> None:
    _case("probes")
    headers = {"Content-Length": str(len(body)), **extra}
    status, response = raw(_port(health.url), request(method, path, headers, body))
    assert_clean(status, response)


def test_fuzz_case_counts() -> None:
    """Runs after the fuzz tests in this module (file order): how many cases each ran."""
    print(f"\nfuzz cases run: {CASES}")
    if CASES:
        assert all(n >= 300 for n in CASES.values()), CASES
