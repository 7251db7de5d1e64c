"""Benchmarks: `python -m bench` runs them all, `python -m bench NAME` one; figures go to
docs/performance.md (one `##` section per benchmark)."""
