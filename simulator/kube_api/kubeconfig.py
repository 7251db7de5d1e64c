"""A kubeconfig for the simulated API server: what kubectl and the kubernetes client load.

No credentials: the simulator serves plain HTTP on loopback and trusts every request. Written as
JSON, which is YAML too, so both kubectl and `kubernetes.config.load_kube_config` read it.
"""

from __future__ import annotations

import json
from pathlib import Path


def kubeconfig_text(
    server_url: str, *, context: str = "gpufleet-sim", namespace: str = "default"
) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server_url}}],
        "users": [{"name": context, "user": {}}],
        "contexts": [
            {
                "name": context,
                "context": {"cluster": context, "user": context, "namespace": namespace},
            }
        ],
        "current-context": context,
        "preferences": {},
    }
    return json.dumps(doc, indent=2) + "\n"


def write_kubeconfig(path: str | Path, server_url: str, *, context: str = "gpufleet-sim") -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(kubeconfig_text(server_url, context=context))
    p.chmod(0o600)
    return p
