"""The Kubernetes actuator: the one object the runner and the playbooks' verification hold,
composed of the wing's reader (kube.reader), pinning (kube.pinning) and writer (kube.writer).

It carries out pinned intents for the runner, which has journaled each one before calling
`apply`; it reads back what verification needs. It implements every capability of
`remediations.capabilities` (Actuator, DeviceTaintReader, DeviceTaintDiscovery,
NodeJobReader, FencedGpuReader).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kubernetes import client

from kube.dra import DraClient
from kube.evictions import PodEvictions
from kube.jobs import KubeNodeJobs, api_client
from kube.pinning import Pinner
from kube.reader import KubeReader
from kube.writer import KubeWriter
from remediations.capabilities import WriteContext
from remediations.cluster_names import JOB_LABEL_KEYS
from remediations.types import Intent


class KubeActuator(KubeReader):
    """The reader's live reads, plus `pin` and `apply`, over one `kubernetes.client.ApiClient`."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        job_label_keys: Sequence[str] = JOB_LABEL_KEYS,
    ) -> None:
        """`job_label_keys`: the pod labels naming a pod's job, as the collector uses them."""
        super().__init__(
            client.CoreV1Api(api), DraClient(api), KubeNodeJobs(api), job_label_keys=job_label_keys
        )
        self.api = api
        self.pinner = Pinner(self, self.dra)
        evictions = PodEvictions(self.core, clock=clock, sleep=sleep)
        self.writer = KubeWriter(self.core, self.dra, self.jobs, self, evictions)

    @classmethod
    def from_kubeconfig(cls, path: str | Path | None = None, **kw: Any) -> KubeActuator:
        return cls(api_client(path), **kw)

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    def pin(self, intent: Intent) -> Intent:
        """The intent with everything it will touch resolved (kube.pinning); no writes."""
        return self.pinner.pin(intent)

    def apply(self, intent: Intent, ctx: WriteContext) -> str:
        """Carry out one pinned intent (kube.writer); idempotent."""
        return self.writer.apply(intent, ctx)
