"""From the `service.source:` section to the collector settings `gpufleet run` builds on.

`source_settings` turns the validated config into `PromSettings` (the collector `detect` and
`backtest` use, so a finding is the same whichever command produced it), `PodDiscovery`
(direct scrape of dcgm-exporter pods found by labels in the Kubernetes collector's watch) or
`ScrapeSettings` (direct scrape of listed targets); `open_source` starts that collector and
returns the live cycle's snapshot source with the closer that stops it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
