"""The Streamlit dashboard: pages over the journal store; approvals and pause go through the
engine, never straight to Kubernetes. `dashboards.launcher.start` runs it as a subprocess."""
