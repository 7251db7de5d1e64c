"""The direct-scrape collector: dcgm-exporter pages read without Prometheus."""
