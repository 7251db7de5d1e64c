"""The Kubernetes wing: every module that talks to the API server for gpufleet's writes and its
own coordination: the actuator (`reader`, `pinning`, `writer`, `evictions`, composed in
`actuator`), DRA DeviceTaintRules, node Jobs, taints, the Lease, identity.

Reading fleet state for detection is the collector's job (`observer/kube/`). This wing sits above
`remediations/` (it implements the engine's capability contracts, `remediations.capabilities`,
and shares only names and rules with the playbooks, `remediations.cluster_names` and
`remediations.cluster_rules`) and below the composition root. It imports no planning code.
"""
