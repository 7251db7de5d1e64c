"""Support shared by the tests and the benchmarks: local servers speaking real wire protocols
(Slack Web API), the simulated Kubernetes cluster, seeded journals, the in-memory cluster, the
benchmark fleet and the failover replicas' config. Never imported by the product; never imports
`tests` or `bench`, so a benchmark runs without the test tree."""
