"""The embedded demo's files under its workdir: a fresh SQLite journal each start, the config
(`demo-config.yaml`) that `gpufleet actions|audit|policy --config` read, and the demo's own
policy (`demo-policy.yaml`: the shipped default with `actuation: live`, the demo opting in to
writing to its simulated cluster; `shadow` on request).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from dashboards.settings import DashboardConfig
from errors.config_files import load_yaml_file
from gpufleet.config import GpufleetConfig
from gpufleet.service.source_config import SourceConfig
from metering import MeteringConfig
from observer.snapshot.job_identity import DEFAULT_JOB_LABEL_KEYS
from remediations.policy import DEFAULT_POLICY
from remediations.store import Store
from remediations.types import Actuation


@dataclass(frozen=True, slots=True)
class DemoFiles:
    workdir: Path

    @property
    def db(self) -> Path:
        return self.workdir / "demo.db"

    @property
    def config(self) -> Path:
        return self.workdir / "demo-config.yaml"

    @property
    def policy(self) -> Path:
        return self.workdir / "demo-policy.yaml"

    @property
    def store_url(self) -> str:
        return f"sqlite:///{self.db.resolve()}"


def fresh_store(files: DemoFiles, cluster: str) -> Store:
    """A new, empty journal: the demo starts from nothing each time."""
    files.workdir.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{files.db}{suffix}").unlink(missing_ok=True)
    return Store.open(files.store_url, cluster=cluster)


def write_policy(files: DemoFiles, actuation: Actuation) -> Path:
    """The demo's policy: the shipped default with `actuation` set explicitly (the demo opts in
    to `live`; the shipped file says `shadow`)."""
    files.workdir.mkdir(parents=True, exist_ok=True)
    body = load_yaml_file(DEFAULT_POLICY)
    body["actuation"] = actuation.value
    header = (
        f"# written by `gpufleet demo` (rewritten at each start): the shipped default policy\n"
        f"# ({DEFAULT_POLICY}) with actuation: {actuation.value}"
        + (" -- the demo OPTS IN to writing to its simulated cluster.\n" if actuation is
           Actuation.LIVE else " (decide and journal only).\n")
    )  # fmt: skip
    files.policy.write_text(header + yaml.safe_dump(body, sort_keys=False))
    return files.policy


def write_config(
    files: DemoFiles,
    cluster: str,
    kubeconfig: Path,
    *,
    actuation: Actuation = Actuation.LIVE,
    metering: MeteringConfig | None = None,
    prometheus_url: str | None = None,
    job_label_keys: Sequence[str] = DEFAULT_JOB_LABEL_KEYS,
) -> Path:
    """The config `gpufleet actions|audit|policy --config` and the demo's dashboard read
    (validated by the model it feeds), and the demo policy it names (`write_policy`). Of the
    service's section it keeps the job-name label keys the demo's collector groups pods by, so
    the dashboard's What-if names the jobs the demo's service does."""
    write_policy(files, actuation)
    cfg = GpufleetConfig(
        cluster=cluster,
        store_url=files.store_url,
        policy=str(files.policy.resolve()),
        kubeconfig=str(kubeconfig.resolve()),
        metering=metering or MeteringConfig(),
        dashboard=DashboardConfig(prometheus_url=prometheus_url),
    )
    body = cfg.model_dump(mode="json", exclude={"detectors", "service"})
    source = SourceConfig(job_label_keys=list(job_label_keys))  # validated like the service's
    body["service"] = {"source": source.model_dump(mode="json", include={"job_label_keys"})}
    header = "# written by `gpufleet demo` (rewritten at each start)\n"
    files.config.write_text(header + yaml.safe_dump(body, sort_keys=False))
    return files.config
