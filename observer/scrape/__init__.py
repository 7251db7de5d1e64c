"""The direct-scrape collector: dcgm-exporter pages read without Prometheus."""

from observer.scrape.collector import ScrapeCollector, ScrapeResult, ScrapeSettings

__all__ = ["ScrapeCollector", "ScrapeResult", "ScrapeSettings"]
