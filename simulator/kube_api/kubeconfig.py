"""A kubeconfig for the simulated API server: what kubectl and the kubernetes client load.

The simulator serves plain HTTP on loopback and authenticates bearer tokens: the kubeconfig
carries the token of the identity it is for (the admin, or a service account). Written as JSON,
which is YAML too, so both kubectl and
`kubernetes.config.load_kube_config` read it.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path


def kubeconfig_text(
    server_url: str,
    *,
    context: str = "gpufleet-sim",
    namespace: str = "default",
    token: str | None = None,
    ca_pem: str | None = None,
) -> str:
    cluster: dict[str, str] = {"server": server_url}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem.encode()).decode()
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": cluster}],
        "users": [{"name": context, "user": {"token": token} if token else {}}],
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


def write_kubeconfig(
    path: str | Path,
    server_url: str,
    *,
    context: str = "gpufleet-sim",
    token: str | None = None,
    ca_pem: str | None = None,
) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(kubeconfig_text(server_url, context=context, token=token, ca_pem=ca_pem))
    p.chmod(0o600)
    return p
