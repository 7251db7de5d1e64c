"""The Prometheus collector: query plan, instant cycles, range replay."""
