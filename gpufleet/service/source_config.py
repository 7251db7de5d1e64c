"""The `service.source:` section: where `gpufleet run` reads the fleet's DCGM metrics.

Either the Prometheus the cluster already runs (`prometheus:`, the same collector as
`gpufleet detect` and `backtest`), or direct scrape of the exporters: dcgm-exporter pods found by
namespace and labels in the service's own pod watch (`kubernetes:`), a target-list URL
(`discovery_url`) or fixed `targets`. No secret belongs here (the file is a ConfigMap): a
bearer token and a basic-auth password are read from files (a projected ServiceAccount token, a
mounted Secret), or the password from the environment variable PROMETHEUS_PASSWORD
(gpufleet.config.ENVIRONMENT).
"""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from observer.fleet.units import Duration
from observer.kube.exporters import (
    DEFAULT_EXPORTER_SELECTORS,
    ExporterSelector,
    parse_label_selector,
)
from observer.prometheus.plan import POD_LABEL_MODES
from observer.snapshot.job_identity import DEFAULT_JOB_LABEL_KEYS

SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
"""Headers that carry credentials: never in the config file (use the file settings)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BasicAuth(_Strict):
    username: str = Field(min_length=1)
    password_file: str | None = None
    """A file holding the password (a mounted Secret); re-read when it changes."""
    password: str | None = Field(default=None, repr=False)
    """Set from the environment variable PROMETHEUS_PASSWORD, never written in the file."""

    @model_validator(mode="after")
    def _one_password(self) -> Self:
        if (self.password_file is None) == (self.password is None):
            raise ValueError(
                "either password_file or the environment variable PROMETHEUS_PASSWORD (exactly one)"
            )
        return self


class TlsSettings(_Strict):
    ca_file: str | None = None
    """PEM bundle of the CAs that sign the server's certificate (default: the system's)."""
    cert_file: str | None = None
    """Client certificate (PEM) for mutual TLS."""
    key_file: str | None = None
    """The client certificate's key (PEM; may be in cert_file instead)."""
    insecure_skip_verify: bool = False

    @model_validator(mode="after")
    def _key_needs_cert(self) -> Self:
        if self.key_file and not self.cert_file:
            raise ValueError("cert_file with key_file (a key alone authenticates nothing)")
        return self


class PrometheusSource(_Strict):
    """A Prometheus-compatible HTTP API: Prometheus, Thanos Query, Mimir, VictoriaMetrics."""

    url: str
    """Base URL including any path prefix: `http://prometheus-operated.monitoring:9090`,
    VictoriaMetrics cluster `http://vmselect:8481/select/0/prometheus`, Thanos Query."""
    timeout: Duration = Field(default=10.0, gt=0)
    """Seconds per request (also sent to the server as the query `timeout`)."""
    retries: int = Field(default=2, ge=0, le=10)
    bearer_token_file: str | None = None
    """E.g. `/var/run/secrets/kubernetes.io/serviceaccount/token`; re-read when it rotates."""
    basic_auth: BasicAuth | None = None
    tls: TlsSettings = Field(default_factory=TlsSettings)
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra request headers, e.g. `X-Scope-OrgID: <tenant>` for Mimir or Cortex."""
    pod_labels: str = "auto"
    """Where DCGM series name the GPU's pod: auto, direct, exported, none (docs/collectors.md)."""
    window: Duration = Field(default=120.0, gt=0)
    """Counter increase window; at least two scrape intervals."""
    up_selector: str = 'up{job=~".*dcgm.*"}'
    """The dcgm-exporter targets' `up` series."""
    ksm_matchers: str = ""
    """Extra matchers for kube-state-metrics series, e.g. `job="kube-state-metrics"`."""

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")) or len(v.split("://", 1)[1]) < 1:
            raise ValueError("an http:// or https:// URL (with any path prefix)")
        if "@" in v.split("://", 1)[1].split("/", 1)[0]:
            raise ValueError("a URL without credentials (use bearer_token_file or basic_auth)")
        return v

    @field_validator("pod_labels")
    @classmethod
    def _pod_labels(cls, v: str) -> str:
        if v not in POD_LABEL_MODES:
            raise ValueError(f"one of {', '.join(POD_LABEL_MODES)}")
        return v

    @field_validator("headers")
    @classmethod
    def _no_secret_headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if name.lower() in SECRET_HEADERS:
                raise ValueError(
                    f"headers without credentials ({name!r}: use bearer_token_file or "
                    "basic_auth, read from files, not the config)"
                )
        return v

    @model_validator(mode="after")
    def _one_auth(self) -> Self:
        if self.bearer_token_file and self.basic_auth is not None:
            raise ValueError("bearer_token_file or basic_auth, not both")
        return self


class ExporterPods(_Strict):
    """Pods of one dcgm-exporter install (Prometheus `kubernetes_sd`, role pod)."""

    namespace: str = ""
    """Only pods in this namespace; empty: every namespace."""
    selector: str
    """Equality label selector, `app=nvidia-dcgm-exporter` (comma-separated terms)."""
    port_names: list[str] = Field(min_length=1)
    """Container port names tried in order (`gpu-metrics`, `metrics`)."""
    port: int = Field(default=9400, ge=1, le=65535)
    """Port on the pod IP when no container port has one of the names."""
    scheme: str = "http"
    path: str = "/metrics"

    @field_validator("selector")
    @classmethod
    def _selector(cls, v: str) -> str:
        parse_label_selector(v)  # ValueError names the bad term
        return v

    @field_validator("scheme")
    @classmethod
    def _scheme(cls, v: str) -> str:
        if v not in ("http", "https"):
            raise ValueError("http or https")
        return v

    def selector_of(self) -> ExporterSelector:
        return ExporterSelector(
            self.namespace, parse_label_selector(self.selector), tuple(self.port_names),
            self.port, self.scheme, self.path,
        )  # fmt: skip


class KubernetesDiscovery(_Strict):
    """Direct scrape of dcgm-exporter pods found by namespace and labels in the pods the
    service already watches (no `/targets` endpoint, no extra API calls)."""

    exporters: list[ExporterPods] | None = None
    """None: the GPU Operator's (`app=nvidia-dcgm-exporter` in `gpu-operator`, port
    `gpu-metrics`, 9400) and dcgm-exporter's chart's (`app.kubernetes.io/name=dcgm-exporter`,
    port `metrics`, 9400)."""
    timeout: Duration = Field(default=2.0, gt=0)
    """Seconds per exporter scrape."""

    def selectors(self) -> tuple[ExporterSelector, ...]:
        if self.exporters is None:
            return DEFAULT_EXPORTER_SELECTORS
        return tuple(e.selector_of() for e in self.exporters)


class SourceConfig(_Strict):
    prometheus: PrometheusSource | None = None
    """Read the metrics Prometheus already scrapes (the shipped deployment's default)."""
    kubernetes: KubernetesDiscovery | None = None
    """Direct scrape of the dcgm-exporter pods found by labels (deploy/overlays/direct-scrape)."""
    discovery_url: str | None = None
    """Direct scrape: a dcgm-exporter target list (`<url>/targets`), read each cycle."""
    targets: list[str] = Field(default_factory=list)
    """Direct scrape: a fixed list of exporter URLs."""
    job_label_keys: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=lambda: list(DEFAULT_JOB_LABEL_KEYS), min_length=1
    )
    """The pod labels that name a pod's job, first match wins (default: Kubeflow, JobSet,
    Volcano, batch Jobs). The collectors group pods into jobs by them for the detectors, and
    the actuator for the playbooks (which pods a migrate or drain of a job moves): one list."""

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        chosen = self.chosen()
        if len(chosen) > 1:
            raise ValueError(f"one source, got {' and '.join(chosen)}")
        return self

    def chosen(self) -> list[str]:
        """The configured sources' keys (at most one after validation)."""
        return [
            name
            for name, on in (
                ("prometheus", self.prometheus is not None),
                ("kubernetes", self.kubernetes is not None),
                ("discovery_url", bool(self.discovery_url)),
                ("targets", bool(self.targets)),
            )
            if on
        ]
