"""The Kubernetes wing: every module that talks to the API server for gpufleet's writes and its
own coordination (the actuator, DRA DeviceTaintRules, node Jobs, taints, the Lease, identity).

Reading fleet state for detection is the collector's job (`observer/kube/`). This wing sits above
`remediations/` (it implements the engine's actuator contract) and below the composition root.
"""
