"""The demo's live loop: the simulated fleet watched, judged and repaired by the real product.

Around a running simulation (simulator.serve) it sets up what a live gpufleet needs —
a fresh SQLite journal, a config file and the demo's own policy under `.gpufleet/` that
`gpufleet actions|audit|policy explain` can use, the direct-scrape collector over the
simulator's /targets, the Kubernetes collector and the real KubeActuator over its API, the
default detectors — and runs one
`LiveCycle` per scrape interval of scenario time until told to stop. Everything runs on the
simulator's scenario clock (collector stamps, detector `now`, journal times, drain timeouts),
so a demo at x20 behaves like a fleet watched for 20 times as long.

The demo opts in to writing: its policy (`demo-policy.yaml`) is the shipped default policy with
`actuation: live` (the shipped policy is `actuation: shadow`, which writes nothing); with
`shadow=True` it stays in shadow.

Kept apart from the command module so tests can drive `run_once()` with a manual clock.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

import yaml

from dashboards.settings import DashboardConfig
from detectors.suite import DetectorSuite
from errors import TemporaryError
from errors.config_files import load_yaml_file
from gpufleet.config import GpufleetConfig
from gpufleet.demo.log import DemoLog
from gpufleet.live_cycle import CycleReport, LiveCycle, scrape_source
from kube.actuator import KubeActuator
from metering import Meter, MeteringConfig
from observer.kube.collector import KubeCollector, KubeSettings
from observer.scrape.collector import ScrapeCollector, ScrapeSettings
from remediations.cycle import RemediationCycle
from remediations.policy import DEFAULT_POLICY, load_policy
from remediations.store import Store
from remediations.types import Actuation
from simulator.serve import SimulationHandle

log = logging.getLogger(__name__)
OWNER = "gpufleet-demo"
SYNC_TIMEOUT = 10.0
"""Wall seconds to wait for the Kubernetes collector's first lists before the first cycle."""
LAG = 1.0
"""Scenario seconds after each scrape boundary at which a cycle runs (the pages have turned)."""


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
) -> Path:
    """The config `gpufleet actions|audit|policy --config` read (validated by the model it
    feeds), and the demo policy it names (`write_policy`)."""
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
    header = "# written by `gpufleet demo` (rewritten at each start)\n"
    files.config.write_text(header + yaml.safe_dump(body, sort_keys=False))
    return files.config


class DemoLoop:
    """`start()`, then `run(stop)` (or `run_once()` by hand), then `close()`."""

    def __init__(
        self,
        handle: SimulationHandle,
        files: DemoFiles,
        report: DemoLog,
        *,
        shadow: bool = False,
    ) -> None:
        if handle.kubeconfig is None:
            raise ValueError("the demo loop needs the simulation's kubeconfig")
        self.handle = handle
        self.files = files
        self.log = report
        self.actuation = Actuation.SHADOW if shadow else Actuation.LIVE
        self.interval = handle.scenario.scrape_interval
        self._halt = threading.Event()
        self._store: Store | None = None
        self._kube: KubeCollector | None = None
        self._scrape: ScrapeCollector | None = None
        self._actuator: KubeActuator | None = None
        self.cycle: LiveCycle | None = None
        self.remediation: RemediationCycle | None = None
        self.skipped = 0
        """Scrape intervals without a cycle because the previous one ran long."""

    def start(self) -> DemoLoop:
        try:
            return self._start()
        except BaseException:
            self.close()  # whatever was opened before the failure
            raise

    def _start(self) -> DemoLoop:
        h = self.handle
        assert h.kubeconfig is not None
        cluster = h.scenario.cluster
        self._store = fresh_store(self.files, cluster)
        write_config(self.files, cluster, h.kubeconfig, actuation=self.actuation)
        policy = load_policy(self.files.policy)
        self._kube = KubeCollector(KubeSettings(kubeconfig=str(h.kubeconfig))).start()
        if not self._kube.wait_synced(SYNC_TIMEOUT):
            log.warning("Kubernetes collector not synced after %.0f s; starting anyway",
                        SYNC_TIMEOUT)  # fmt: skip
        self._scrape = ScrapeCollector(
            ScrapeSettings(discovery_url=f"{h.metrics_url}/targets", cluster=cluster),
            now=h.clock,
        )
        self._actuator = KubeActuator.from_kubeconfig(
            h.kubeconfig, clock=h.clock, sleep=self._sleep
        )
        self.remediation = RemediationCycle(
            policy,
            self._store,
            self._actuator,
            OWNER,
            started_at=h.clock() - self.interval,
            clock=h.clock,
            background=True,  # a drain waiting on a PDB never holds up the next cycle
            idle_wait=1.0,
            device_taints=self._actuator.device_taints_served,
        )
        remediation = self.remediation
        self.cycle = LiveCycle(
            scrape_source(self._scrape, self._kube),
            DetectorSuite.default(),
            remediation,
            meter=Meter(self._store),
        )
        return self

    def _sleep(self, scenario_seconds: float) -> None:
        """The actuator's back-off (PDB retries) in scenario time; cut short when stopping."""
        if self._halt.wait(scenario_seconds / self.handle.clock.speed):
            raise TemporaryError("the demo is stopping; the action resumes on the next run")

    def run_once(self) -> CycleReport:
        assert self.cycle is not None, "start() first"
        report = self.cycle.run_once(self.handle.clock())
        self.log.report(report)
        return report

    def run(self, stop: threading.Event) -> None:
        """One cycle per scrape interval of scenario time until `stop` is set."""
        self._halt = stop  # the actuator's back-off sleeps end with it too
        clock = self.handle.clock
        start = self.handle.scenario.start
        k = int((clock() - start) // self.interval) + 1
        warned = False
        while True:
            due = start + k * self.interval + LAG
            if stop.wait(max(0.0, clock.wall_of(due) - clock.wall())):
                return
            self.run_once()
            behind = int((clock() - start - LAG) // self.interval) + 1
            if behind > k + 1:
                self.skipped += behind - k - 1
                if not warned:
                    warned = True
                    log.warning("at x%g a cycle takes longer than a scrape interval: some "
                                "intervals get no cycle (lower --speed to see each one; logged "
                                "once)", clock.speed)  # fmt: skip
            k = max(k + 1, behind)

    def close(self) -> None:
        """Stop collectors and close clients and the journal (idempotent)."""
        self._halt.set()
        if self.remediation is not None:
            self.remediation.close()  # the executor thread ends with the halted back-off
            self.remediation = None
        if self._kube is not None:
            self._kube.stop()
            self._kube = None
        if self._scrape is not None:
            self._scrape.close()
            self._scrape = None
        if self._actuator is not None:
            self._actuator.close()
            self._actuator = None
        if self._store is not None:
            self._store.close()
            self._store = None
