"""From the `service.source:` section to the collector settings `gpufleet run` builds on.

`source_settings` turns the validated config into `PromSettings` (the collector `detect` and
`backtest` use, so a finding is the same whichever command produced it), `PodDiscovery`
(direct scrape of dcgm-exporter pods found by labels in the Kubernetes collector's watch) or
`ScrapeSettings` (direct scrape of listed targets); `open_source` starts that collector and
returns the live cycle's snapshot source with the closer that stops it. The commands that name
their source on the command line (`detect`, `backtest`, `collect`, the doctor, the demo) go
through `source_settings` too (`prometheus_settings`, `scrape_settings`): one place reads the
section, so they group pods into jobs (`job_label_keys`) as the running service does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpufleet.live_cycle import SnapshotSource, prometheus_source, scrape_source
from gpufleet.service.source_config import PrometheusSource, SourceConfig
from observer.kube.collector import KubeCollector
from observer.kube.exporters import ExporterSelector
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.credentials import PromAuth
from observer.prometheus.plan import PromSettings
from observer.scrape.collector import ScrapeCollector, ScrapeSettings
from observer.snapshot.job_identity import DEFAULT_JOB_LABEL_KEYS


@dataclass(frozen=True, slots=True)
class PodDiscovery:
    """Direct scrape of the dcgm-exporter pods the Kubernetes collector's watch holds."""

    scrape: ScrapeSettings
    selectors: tuple[ExporterSelector, ...]


CollectorSettings = PromSettings | ScrapeSettings | PodDiscovery


def prom_settings(
    p: PrometheusSource, cluster: str, job_label_keys: tuple[str, ...] = DEFAULT_JOB_LABEL_KEYS
) -> PromSettings:
    """The collector settings of a `service.source.prometheus` section."""
    basic = p.basic_auth
    auth = PromAuth(
        bearer_token_file=p.bearer_token_file or "",
        username=basic.username if basic else "",
        password=(basic.password or "") if basic else "",
        password_file=(basic.password_file or "") if basic else "",
        ca_file=p.tls.ca_file or "",
        cert_file=p.tls.cert_file or "",
        key_file=p.tls.key_file or "",
        insecure_skip_verify=p.tls.insecure_skip_verify,
    )
    return PromSettings(
        p.url,
        timeout=p.timeout,
        retries=p.retries,
        window=p.window,
        up_selector=p.up_selector,
        ksm_matchers=p.ksm_matchers,
        cluster=cluster,
        pod_labels=p.pod_labels,
        headers=tuple(p.headers.items()),
        auth=auth,
        job_label_keys=job_label_keys,
    )


def source_settings(src: SourceConfig, cluster: str) -> CollectorSettings | None:
    """The configured source's collector settings (None: no source configured)."""
    keys = tuple(src.job_label_keys)
    if src.prometheus is not None:
        return prom_settings(src.prometheus, cluster, keys)
    if src.kubernetes is not None:
        scrape = ScrapeSettings(
            timeout=src.kubernetes.timeout, cluster=cluster, job_label_keys=keys
        )
        return PodDiscovery(scrape, src.kubernetes.selectors())
    if src.discovery_url or src.targets:
        return ScrapeSettings(
            targets=tuple(src.targets),
            discovery_url=src.discovery_url or "",
            cluster=cluster,
            job_label_keys=keys,
        )
    return None


def with_source(section: SourceConfig, **source: Any) -> SourceConfig:
    """The config's source section with the one source a command names (`source`: a field of
    the section: prometheus, kubernetes, discovery_url or targets) instead of its own; the rest
    (the job-name label keys) stays the service's."""
    cleared: dict[str, Any] = {
        "prometheus": None, "kubernetes": None, "discovery_url": None, "targets": []
    }  # fmt: skip
    return section.model_copy(update={**cleared, **source})


def named_prometheus(url: str, **options: Any) -> PrometheusSource:
    """A Prometheus named on a command line as a `service.source.prometheus` section, taken as
    given (the command's parser checked its options; a URL the section would refuse reaches the
    collector, which names the problem, as before)."""
    return PrometheusSource.model_construct(url=url, **options)


def prometheus_settings(section: SourceConfig, cluster: str, p: PrometheusSource) -> PromSettings:
    """The collector settings of a Prometheus a command names, read as the service reads the
    config's (`detect`, `backtest`, `collect --prometheus-url`, the doctor, the demo)."""
    settings = source_settings(with_source(section, prometheus=p), cluster)
    assert isinstance(settings, PromSettings)
    return settings


def scrape_settings(
    section: SourceConfig, cluster: str, targets: tuple[str, ...] = (), discovery_url: str = ""
) -> ScrapeSettings:
    """The collector settings of exporters a command names (fixed `targets` or a target list at
    `discovery_url`), read as the service reads the config's (`collect`, the demo)."""
    source = with_source(section, targets=list(targets), discovery_url=discovery_url or None)
    settings = source_settings(source, cluster)
    assert isinstance(settings, ScrapeSettings)
    return settings


def job_label_keys_of(settings: CollectorSettings) -> tuple[str, ...]:
    """The job-name label keys the collector groups pods by: what the actuator must use too."""
    scrape = settings.scrape if isinstance(settings, PodDiscovery) else settings
    return tuple(scrape.job_label_keys)


def open_source(
    settings: CollectorSettings, kube: KubeCollector, clock: Callable[[], float]
) -> tuple[SnapshotSource, Callable[[], None]]:
    """The live cycle's collection for `settings`, and the closer of its collector."""
    if isinstance(settings, PromSettings):
        prom = PrometheusCollector(settings, now=clock)
        return prometheus_source(prom, kube), prom.close
    if isinstance(settings, PodDiscovery):
        selectors = settings.selectors
        scraper = ScrapeCollector(
            settings.scrape, now=clock, discover=lambda: kube.exporter_targets(selectors)
        )
    else:
        scraper = ScrapeCollector(settings, now=clock)
    return scrape_source(scraper, kube), scraper.close
