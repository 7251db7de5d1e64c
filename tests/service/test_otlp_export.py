"""OTLP export of gpufleet's own telemetry, against a wire-level OTLP/HTTP collector.

A local HTTP server on 127.0.0.1 speaks the OTLP/HTTP protobuf protocol (`/v1/traces`,
`/v1/metrics`) and decodes what the real exporters send, so the test checks what an operator's
collector would receive: the span tree of a cycle and the service's metrics, with the service's
resource attributes. A collector that rejects exports must not break the service.
"""

from __future__ import annotations

import gzip
import re
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from gpufleet.service.service_config import TelemetryConfig
from gpufleet.service.telemetry import Telemetry


@dataclass
class Received:
    status: int = 200
    traces: list[ExportTraceServiceRequest] = field(default_factory=list)
    metrics: list[ExportMetricsServiceRequest] = field(default_factory=list)
    content_types: set[str] = field(default_factory=set)


def _body(handler: BaseHTTPRequestHandler) -> bytes:
    raw = handler.rfile.read(int(handler.headers.get("Content-Length", "0")))
    encoding = handler.headers.get("Content-Encoding", "")
    if encoding == "gzip":
        return gzip.decompress(raw)
    if encoding == "deflate":
        return zlib.decompress(raw)
    return raw


@pytest.fixture
def collector() -> Iterator[tuple[str, Received]]:
    got = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            data = _body(self)
            got.content_types.add(self.headers.get("Content-Type", ""))
            if self.path == "/v1/traces":
                got.traces.append(ExportTraceServiceRequest.FromString(data))
            elif self.path == "/v1/metrics":
                got.metrics.append(ExportMetricsServiceRequest.FromString(data))
            else:
                self.send_error(404)
                return
            self.send_response(got.status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", got
    finally:
        server.shutdown()
        server.server_close()


def _resource_attrs(resource: object) -> dict[str, str]:
    return {a.key: a.value.string_value for a in resource.attributes}  # type: ignore[attr-defined]


def test_spans_and_metrics_reach_the_otlp_collector(collector: tuple[str, Received]) -> None:
    url, got = collector
    tel = Telemetry(TelemetryConfig(otlp_endpoint=url, service_name="gpufleet-test"), "pod-a")
    with tel.span("cycle", {"cycle.kind": "live"}):
        with tel.span("collect"):
            pass
        with tel.span("detect"):
            pass
    tel.cycles.add(1, {"result": "ok"})
    tel.record_coverage({"gpu_xid": "full"})
    tel.close()  # flushes both the batch span processor and the periodic metric reader

    assert got.content_types == {"application/x-protobuf"}
    spans = {
        s.name: s
        for req in got.traces
        for rs in req.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    }
    assert {"cycle", "collect", "detect"} <= set(spans)
    assert spans["collect"].parent_span_id == spans["cycle"].span_id
    assert spans["detect"].trace_id == spans["cycle"].trace_id
    attrs = _resource_attrs(got.traces[0].resource_spans[0].resource)
    assert attrs["service.name"] == "gpufleet-test"
    assert attrs["service.instance.id"] == "pod-a"

    points: dict[str, list[object]] = {}
    for req in got.metrics:
        for rm in req.resource_metrics:
            assert _resource_attrs(rm.resource)["service.name"] == "gpufleet-test"
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    data = m.sum.data_points or m.gauge.data_points
                    points.setdefault(m.name, []).extend(data)
    assert sum(p.as_int for p in points["gpufleet_cycles"]) == 1  # type: ignore[attr-defined]
    coverage = {
        {a.key: a.value.string_value for a in p.attributes}["state"]: p.as_int  # type: ignore[attr-defined]
        for p in points["gpufleet_detector_coverage"]
    }
    assert coverage == {"full": 1, "reduced": 0, "cannot_run": 0}


def test_a_collector_that_rejects_exports_does_not_break_the_service(
    collector: tuple[str, Received],
) -> None:
    url, got = collector
    got.status = 400  # not retryable: the exporter logs and drops the batch
    tel = Telemetry(TelemetryConfig(otlp_endpoint=url), "pod-b")
    with tel.span("cycle"):
        tel.cycles.add(1, {"result": "ok"})
    tel.tracer_provider.force_flush()
    tel.meter_provider.force_flush()
    assert got.traces and got.metrics  # it was tried ...
    served = tel.exposition().decode()
    assert re.search(r'gpufleet_cycles_total\{[^}]*result="ok"[^}]*\} 1\.0', served)  # /metrics
    with tel.span("cycle"):  # ... and the next cycle is still traced
        tel.cycles.add(1, {"result": "ok"})
    tel.close()
    assert len(got.traces) == 2
