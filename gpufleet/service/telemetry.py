"""Self-telemetry with the OpenTelemetry SDK: spans and metrics about gpufleet itself.

Metrics go to a Prometheus registry of this service (served on /metrics by gpufleet.service.http,
through opentelemetry-exporter-prometheus) and, when `service.telemetry.otlp_endpoint` is set,
to an OTLP/HTTP collector with the spans. Spans: `cycle` with `collect`, `detect`,
`detector:<name>` and `remediate` inside, `k8s:<op>` per Kubernetes write, `schedule:<name>`.
`gpufleet_detector_coverage{detector, state}` is 1 on each detector's field-coverage state
(full, reduced, cannot_run) and 0 on the others.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span
from prometheus_client import CollectorRegistry, generate_latest

from detectors.coverage import Evidence
from gpufleet.service.service_config import TelemetryConfig

COVERAGE_STATES = tuple(e.value for e in Evidence)
"""The gauge's `state` label values: full, reduced, cannot_run."""


def _providers(
    cfg: TelemetryConfig, instance: str, registry: CollectorRegistry
) -> tuple[MeterProvider, TracerProvider]:
    """Metrics for Prometheus to scrape (in `registry`), and both metrics and traces to an OTLP
    collector when one is configured."""
    resource = Resource.create({"service.name": cfg.service_name, "service.instance.id": instance})
    readers: list[MetricReader] = [
        PrometheusMetricReader(disable_target_info=True, registry=registry)
    ]
    tracer_provider = TracerProvider(resource=resource)
    if cfg.otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter,
        )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        base = cfg.otlp_endpoint.rstrip("/")
        readers.append(
            PeriodicExportingMetricReader(
                OTLPMetricExporter(endpoint=f"{base}/v1/metrics"),
                export_interval_millis=15000,
            )
        )
        tracer_provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces"))
        )
    return MeterProvider(resource=resource, metric_readers=readers), tracer_provider


class Telemetry:
    def __init__(self, cfg: TelemetryConfig, instance: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.meter_provider, self.tracer_provider = _providers(cfg, instance, self.registry)
        self.tracer = self.tracer_provider.get_tracer("gpufleet")
        m = self.meter_provider.get_meter("gpufleet")
        self.cycle_seconds = m.create_histogram(
            "gpufleet_cycle_duration", unit="s", description="Live cycle wall time"
        )
        self.cycles = m.create_counter("gpufleet_cycles", description="Live cycles by result")
        self.cycle_skips = m.create_counter(
            "gpufleet_scheduler_skips", description="Runs skipped: overrun or past misfire grace"
        )
        self.findings = m.create_counter(
            "gpufleet_findings", description="Findings reported, by kind and severity"
        )
        self.incidents_open = m.create_gauge(
            "gpufleet_incidents_open", description="Open incidents"
        )
        self.awaiting = m.create_gauge(
            "gpufleet_actions_awaiting_approval", description="Actions waiting for a person"
        )
        self.actions = m.create_counter(
            "gpufleet_actions", description="Action state changes, by playbook and outcome"
        )
        self.denials = m.create_counter(
            "gpufleet_gate_denials", description="Denied or waiting decisions, by gate"
        )
        self.breaker = m.create_gauge(
            "gpufleet_breaker_open", description="1 while the circuit breaker is open"
        )
        self.leader = m.create_gauge(
            "gpufleet_leader", description="1 while this instance is the leader"
        )
        self.job_runs = m.create_counter(
            "gpufleet_scheduled_job_runs", description="Scheduled job runs by job and outcome"
        )
        self.job_misses = m.create_counter(
            "gpufleet_scheduled_job_misses", description="Scheduled fires that did not run"
        )
        self.k8s_writes = m.create_counter(
            "gpufleet_k8s_writes", description="Kubernetes writes by operation and result"
        )
        self.http_refused = m.create_counter(
            "gpufleet_http_refused",
            description="Inbound requests answered 400 or more, by listener and status",
        )
        self.detector_coverage = m.create_gauge(
            "gpufleet_detector_coverage",
            description="1 for each detector's evidence state (full, reduced, cannot_run) "
            "on the fields collected, 0 for the other states",
        )
        self.last_cycle_ok = m.create_gauge(
            "gpufleet_last_successful_cycle_timestamp",
            unit="s",
            description="Unix time of the last cycle without errors",
        )

    def refused(self, listener: str, status: int) -> None:
        """An inbound listener answered `status` (>= 400): malformed input is counted."""
        self.http_refused.add(1, {"listener": listener, "status": str(status)})

    def record_coverage(self, states: Mapping[str, str]) -> None:
        """Per detector, 1 on its coverage state and 0 on the others."""
        for detector, state in states.items():
            for s in COVERAGE_STATES:
                self.detector_coverage.set(
                    1 if s == state else 0, {"detector": detector, "state": s}
                )

    @contextlib.contextmanager
    def span(self, name: str, attrs: Mapping[str, Any] | None = None) -> Iterator[Span]:
        with self.tracer.start_as_current_span(name, attributes=dict(attrs or {})) as s:
            yield s

    def exposition(self) -> bytes:
        return bytes(generate_latest(self.registry))

    def close(self) -> None:
        self.meter_provider.shutdown()
        self.tracer_provider.shutdown()
