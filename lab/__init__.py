"""The lab: scoring against ground truth, the static-rule baseline, fault sizes, the suite
(`lab/suite`, `lab/sweeps`), scenario generation, the held-out fleets and the local Prometheus
used to evaluate on real PromQL. Only the composition root, tests and benchmarks import it.
"""
