"""Shared pytest fixtures: a real Prometheus over backfilled simulator output."""

pytest_plugins = ["tests.prometheus_fixture", "tests.victoria_metrics_fixture"]
