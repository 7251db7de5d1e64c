"""A Kubernetes API server (the REST subset gpufleet and kubectl use) over a simulated cluster.

No API server binary can run here, yet the collectors and the actuator must be tested with the
real `kubernetes` client and kubectl must be able to get, cordon and drain. So this stdlib HTTP
server speaks the wire protocol: discovery documents, JSON lists and objects, chunked watch
streams, `v1 Status` errors, and injectable faults (410, 429 with Retry-After, 500, slowness).
Every request is authenticated (bearer tokens, `authn`) and authorised by RBAC (`rbac`), and
`SelfSubjectAccessReview` answers what the caller may do. It binds 127.0.0.1 on a free port by
default and writes kubeconfigs with the admin's or a service account's token.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from simulator.cluster import SimCluster
from simulator.kube_api import discovery as disc
from simulator.kube_api import protobuf
from simulator.kube_api.access_review import InvalidReview, access_review, rules_review
from simulator.kube_api.authn import (
    Authenticator,
    ImpersonationForbidden,
    Unauthorized,
    impersonation_headers,
)
from simulator.kube_api.faults import FaultInjector, status_body
from simulator.kube_api.kubeconfig import write_kubeconfig
from simulator.kube_api.query import BadRequest
from simulator.kube_api.rbac import Attributes, Identity, Rbac, forbidden_message
from simulator.kube_api.tls import ca_pem, maybe_wrap
from simulator.kube_api.verbs import Reply, Request, Verbs, error

log = logging.getLogger(__name__)
NOT_FOUND = "the server could not find the requested resource"


def _parse_path(parts: list[str]) -> tuple[str, str, list[str]] | None:
    if len(parts) >= 2 and parts[0] == "api":
        return "", parts[1], parts[2:]
    if len(parts) >= 3 and parts[0] == "apis":
        return parts[1], parts[2], parts[3:]
    return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    identity: Identity

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("k8s-sim %s", format % args)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    # --- wire ---------------------------------------------------------------------------------

    def _read_body(self) -> Any:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                raw += self.rfile.read(size)
                self.rfile.readline()
        else:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return None
        if self.headers.get("Content-Type", "").startswith(protobuf.CONTENT_TYPE):
            return protobuf.decode(raw)
        try:
            return json.loads(raw)
        except ValueError:
            raise BadRequest("the request body is not valid JSON") from None

    def _send(self, reply: Reply) -> None:
        data = json.dumps(reply.body, separators=(",", ":")).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in reply.headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _stream(self, events: Any) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        try:
            for ev in events:
                line = json.dumps(ev, separators=(",", ":")).encode() + b"\n"
                self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):  # the client went away
            pass
        except Exception:  # headers are sent: end the stream rather than answer twice
            log.exception("k8s-sim: watch %s failed", self.path)
        self.close_connection = True

    # --- routing ------------------------------------------------------------------------------

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        query = url.query
        try:
            body = self._read_body()
            if path.startswith("/_sim/"):
                self._send(self.server.control(method, path, body))
                return
            try:
                who = self.server.authn.authenticate(self.headers.get("Authorization"))
                self.identity = self.server.authn.impersonate(
                    who, *impersonation_headers(self.headers)
                )
            except Unauthorized:
                self._send(error(401, "Unauthorized", "Unauthorized"))
                return
            except ImpersonationForbidden as exc:
                self._send(error(403, str(exc), "Forbidden"))
                return
            rule = self.server.faults.take(method, path, query)
            if rule is not None:
                if rule.delay:
                    time.sleep(rule.delay)
                if rule.status < 0:  # the connection drops without an answer
                    self.close_connection = True
                    return
                if rule.status:
                    headers = (
                        (("Retry-After", str(rule.retry_after)),) if rule.status == 429 else ()
                    )
                    details = (
                        {"retryAfterSeconds": rule.retry_after} if rule.status == 429 else None
                    )
                    self._send(
                        Reply(rule.status, status_body(rule.status, details=details), headers)
                    )
                    return
            self.server.cluster.tick()
            self._route(method, path, dict(parse_qsl(query)), body)
        except BadRequest as exc:
            self._send(error(400, str(exc), "BadRequest"))
        except protobuf.Unsupported as exc:
            self._send(error(415, str(exc), "UnsupportedMediaType"))
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True
        except Exception as exc:  # the server must answer, never hang a client
            log.exception("k8s-sim: %s %s failed", method, self.path)
            self._send(error(500, f"Internal error occurred: {exc!r}", "InternalError"))

    def _allowed(self, attrs: Attributes, details: dict[str, Any] | None = None) -> bool:
        """Authorise the request; on refusal answer 403 as the real server does."""
        if self.server.rbac.authorize(self.identity, attrs).allowed:
            return True
        extra: dict[str, Any] = details if details is not None else {}
        self._send(error(403, forbidden_message(self.identity, attrs), "Forbidden", None, **extra))
        return False

    def _route(self, method: str, path: str, params: dict[str, str], body: Any) -> None:
        parts = [p for p in path.split("/") if p]
        parsed = _parse_path(parts)
        rest: list[str] = parsed[2] if parsed is not None else []
        if (parsed is None or not rest) and not self._allowed(
            Attributes(verb=method.lower(), path=path)
        ):
            return
        if path == "/version":
            self._send(Reply(200, self.server.profile.server_version()))
            return
        if path == "/healthz" or path == "/readyz" or path == "/livez":
            self._send_text("ok")
            return
        if path == "/api":
            self._send(Reply(200, disc.api_versions(f"127.0.0.1:{self.server.server_address[1]}")))
            return
        if path == "/apis":
            self._send(Reply(200, self.server.profile.group_list()))
            return
        if len(parts) == 2 and parts[0] == "apis":
            doc = self.server.profile.group(parts[1])
            self._send(Reply(200, doc) if doc else error(404, NOT_FOUND, "NotFound"))
            return
        if parsed is None:
            self._send(error(404, "the server could not find the requested resource", "NotFound"))
            return
        group, version, rest = parsed
        if not rest:
            doc = self.server.profile.resource_list(group, version)
            self._send(
                Reply(200, doc)
                if doc
                else error(404, "the server could not find the requested resource", "NotFound")
            )
            return
        ns: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        res = self.server.profile.find(group, version, rest[0])
        if res is None or (ns is not None and not res.namespaced):
            self._send(error(404, "the server could not find the requested resource", "NotFound"))
            return
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        req = Request(
            method,
            res,
            ns,
            name,
            sub,
            params,
            body,
            self.headers.get("Content-Type", "application/json"),
            self.headers.get("Accept", "application/json"),
        )
        self._dispatch(req)

    def _send_text(self, text: str) -> None:
        data = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self, req: Request) -> None:
        verbs = self.server.verbs
        m, name, sub = req.method, req.name, req.subresource
        self.server.count(_verb(req), req.resource.plural + (f"/{sub}" if sub else ""))
        res = req.resource
        attrs = Attributes(
            verb=_verb(req),
            group=res.group,
            resource=res.plural,
            subresource=sub or "",
            # RequestInfo: a request for a namespace object is in that namespace
            namespace=req.namespace or (name or "" if res.plural == "namespaces" else ""),
            name=name or "",
        )
        details: dict[str, Any] = {"name": name} if name else {}
        details.update({"group": res.group} if res.group else {}, kind=res.plural)
        if not self._allowed(attrs, details):
            return
        if res.plural in disc.REVIEWS:
            self._send(self._review(req))
            return
        if sub not in (None, "status", "eviction"):
            self._send(error(404, "the server could not find the requested resource", "NotFound"))
            return
        if m == "GET" and name is None and req.params.get("watch") in ("true", "1"):
            self._stream(verbs.watch(req, self.server.stopping))
        elif m == "GET" and name is None:
            self._send(verbs.list(req))
        elif m == "GET":
            self._send(verbs.get(req))
        elif m == "POST" and sub == "eviction" and req.resource.plural == "pods":
            self._send(verbs.evict(req))
        elif m == "POST" and name is None and "create" in req.resource.verbs:
            self._send(verbs.create(req))
        elif m == "PUT" and name and "update" in req.resource.verbs:
            self._send(verbs.update(req))
        elif m == "PATCH" and name and "patch" in req.resource.verbs:
            self._send(verbs.patch(req))
        elif m == "DELETE" and name and "delete" in req.resource.verbs:
            self._send(verbs.delete(req))
        else:
            self._send(
                error(
                    405,
                    "the server does not allow this method on the requested resource",
                    "MethodNotAllowed",
                )
            )

    def _review(self, req: Request) -> Reply:
        if req.method != "POST" or req.name is not None:
            return error(
                405,
                "the server does not allow this method on the requested resource",
                "MethodNotAllowed",
            )
        access = req.resource.plural == "selfsubjectaccessreviews"
        review = access_review if access else rules_review
        try:
            out = review(self.server.rbac, self.identity, req.body)
        except InvalidReview as exc:
            cause = {"reason": "FieldValueInvalid", "message": str(exc), "field": exc.field}
            return error(
                422,
                f'{req.resource.kind}.authorization.k8s.io "" is invalid: {exc}',
                "Invalid",
                kind=req.resource.kind,
                group="authorization.k8s.io",
                causes=[cause],
            )
        return Reply(201, out)


def _verb(req: Request) -> str:
    """The Kubernetes verb of a request, as RBAC and the API server's metrics name it."""
    if req.method == "GET":
        if req.name is not None:
            return "get"
        return "watch" if req.params.get("watch") in ("true", "1") else "list"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        req.method, req.method.lower()
    )


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, addr: tuple[str, int], cluster: SimCluster, faults: FaultInjector, verbs: Verbs
    ) -> None:
        super().__init__(addr, _Handler)
        self.cluster = cluster
        self.faults = faults
        self.verbs = verbs
        self.authn = Authenticator()
        self.rbac = Rbac()
        sc = cluster.scenario
        self.profile = disc.Profile(
            sc.kubernetes_version, sc.dra_device_taint_gate, tuple(sc.dra_api_versions)
        )
        """The Kubernetes release served (resources, discovery, `/version`)."""
        self._stop = threading.Event()
        self._counts_lock = threading.Lock()
        self.requests: Counter[tuple[str, str]] = Counter()
        """(verb, resource[/subresource]) -> requests served since start or the last reset."""

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Serve one connection, over TLS when the client starts a TLS handshake."""
        try:
            conn = maybe_wrap(request)
        except (ssl.SSLError, OSError) as exc:
            log.debug("k8s-sim: TLS handshake from %s failed: %s", client_address, exc)
            return
        try:
            super().finish_request(conn, client_address)
        finally:
            if conn is not request:
                conn.close()

    def count(self, verb: str, resource: str) -> None:
        with self._counts_lock:
            self.requests[(verb, resource)] += 1

    def request_counts(self, reset: bool = False) -> dict[str, int]:
        with self._counts_lock:
            out = {f"{v} {r}": n for (v, r), n in sorted(self.requests.items())}
            if reset:
                self.requests.clear()
            return out

    def stopping(self) -> bool:
        return self._stop.is_set()

    def control(self, method: str, path: str, body: Any) -> Reply:
        """`/_sim/faults`: GET lists, POST adds a rule (FaultInjector.add fields), DELETE clears.
        `/_sim/requests`: GET counts API requests by verb and resource, DELETE resets them."""
        if path == "/_sim/requests":
            return Reply(200, {"requests": self.request_counts(reset=method == "DELETE")})
        if path != "/_sim/faults":
            return error(404, "unknown simulator control endpoint", "NotFound")
        if method == "POST":
            if not isinstance(body, dict) or "path" not in body:
                return error(400, "a fault rule needs at least `path`", "BadRequest")
            allowed = {"path", "status", "count", "retry_after", "delay", "method", "query"}
            rule = self.faults.add(**{k: v for k, v in body.items() if k in allowed})
            return Reply(201, rule.as_dict())
        if method == "DELETE":
            self.faults.clear()
        return Reply(200, {"rules": [r.as_dict() for r in self.faults.rules()]})


class KubeApiServer:
    """The simulated API server: `start()`, `url`, `write_kubeconfig(path)`, `stop()`."""

    def __init__(
        self,
        cluster: SimCluster,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        bookmark_interval: float = 10.0,
        rbac: Rbac | None = None,
    ) -> None:
        self.cluster = cluster
        self.host = host
        self.faults = FaultInjector()
        self._server = _Server(
            (host, port), cluster, self.faults, Verbs(cluster, bookmark_interval=bookmark_interval)
        )
        if rbac is not None:
            self._server.rbac = rbac
        self._thread: threading.Thread | None = None

    @property
    def rbac(self) -> Rbac:
        """The Roles, ClusterRoles and bindings requests are authorised against (plus the
        bootstrap policy); replace it to change what identities may do."""
        return self._server.rbac

    @rbac.setter
    def rbac(self, value: Rbac) -> None:
        self._server.rbac = value

    @property
    def admin_token(self) -> str:
        """The bearer token of the cluster admin (`system:masters`)."""
        return self._server.authn.admin_token

    def service_account_token(self, namespace: str, name: str) -> str:
        """A bearer token that authenticates as the service account `namespace/name`."""
        return self._server.authn.service_account_token(namespace, name)

    def request_counts(self, reset: bool = False) -> dict[str, int]:
        """API requests served by `"<verb> <resource>"` (e.g. `"list pods"`, `"watch nodes"`)."""
        return self._server.request_counts(reset)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """Plain HTTP: the simulator's control endpoints and raw probes."""
        return f"http://{self.host}:{self.port}"

    @property
    def https_url(self) -> str:
        """The same port over TLS: what kubeconfigs point at (kubectl sends credentials only
        over TLS)."""
        return f"https://{self.host}:{self.port}"

    def start(self) -> KubeApiServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="k8s-sim-api",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server._stop.set()
        self.cluster.store.close()
        if self._thread is not None:  # shutdown() would wait forever for a loop never started
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()

    def __enter__(self) -> KubeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def write_kubeconfig(
        self, path: str | Path, *, context: str = "gpufleet-sim", token: str | None = None
    ) -> Path:
        """A kubeconfig for this server, as the admin unless `token` says otherwise."""
        return write_kubeconfig(
            path,
            self.https_url,
            context=context,
            token=token or self.admin_token,
            ca_pem=ca_pem(),
        )

    def service_account_kubeconfig(
        self, path: str | Path, namespace: str, name: str, *, context: str = "gpufleet-sim"
    ) -> Path:
        """A kubeconfig that authenticates as the service account `namespace/name`, as
        gpufleet's pod does in-cluster."""
        return self.write_kubeconfig(
            path, context=context, token=self.service_account_token(namespace, name)
        )


__all__ = ["KubeApiServer", "write_kubeconfig"]
