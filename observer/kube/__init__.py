"""The Kubernetes collector: nodes, pods and events by list + watch."""
