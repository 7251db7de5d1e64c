"""The scenario file: a fleet, its workloads, faults and confounders, as a person writes them.

Times in a scenario are offsets from the scenario start (`30s`, `5m`, `2h`, or seconds).
Validation errors name the file, the field path and what was expected.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from errors import ConfigError
from errors.config_files import load_model, validate
from observer.fleet.units import Duration, Timestamp, parse_duration, parse_time
from observer.snapshot.job_identity import DEFAULT_JOB_LABEL_KEYS


class GpuModel(StrEnum):
    A100 = "A100"
    H100 = "H100"
    H200 = "H200"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Mig(_Strict):
    """MIG in flex mode (dcgm-exporter's default): the GPU writes only per-instance series, each
    with `GPU_I_PROFILE`/`GPU_I_ID`, device fields repeated on each, no GPU_UTIL."""

    profile: str = Field(default="3g.40gb", pattern=r"^[1-7]g\.[0-9]+gb$")
    instances: int = Field(default=2, ge=1, le=7)
    """GPU instances per GPU, ids 1..instances."""


class MigRepartition(_Strict):
    """An operator re-partitions one MIG GPU at `at`: its last instance is destroyed and a new
    one created (a new `GPU_I_ID`, the next free id) while the others keep reporting."""

    node: str
    gpu: int = Field(ge=0)
    at: Duration


class Pool(_Strict):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    model: GpuModel
    nodes: int = Field(ge=1, le=20000)
    gpus_per_node: int = Field(default=8, ge=1, le=16)
    labels: dict[str, str] = Field(default_factory=dict)
    mig: Mig | None = None
    """Every GPU of the pool partitioned with MIG (flex mode); None: whole GPUs."""
    time_slicing: int = Field(default=1, ge=1, le=64)
    """Replicas per GPU (the NVIDIA device plugin's `sharing.timeSlicing` replicas): up to this
    many pods share each GPU of the pool, each pod's GPUs distinct devices."""


JOB_LABEL_KEYS = DEFAULT_JOB_LABEL_KEYS


class WorkloadKind(StrEnum):
    TRAINING = "training"
    INFERENCE = "inference"
    IDLE = "idle"
    """Pods that hold GPUs and do nothing with them (the waste gpu_idle finds)."""


class Workload(_Strict):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    kind: WorkloadKind
    namespace: str = "default"
    pool: str | None = None
    """Pool to place on; any pool with room when absent."""
    replicas: int = Field(default=1, ge=1, le=20000)
    """Pods (ranks for training); each pod takes `gpus_per_pod` GPUs of one node."""
    gpus_per_pod: int = Field(default=8, ge=1, le=16)
    job_label: Literal[
        "training.kubeflow.org/job-name",
        "jobset.sigs.k8s.io/jobset-name",
        "volcano.sh/job-name",
        "batch.kubernetes.io/job-name",
        "job-name",
    ] = "training.kubeflow.org/job-name"
    steps_metric: bool = False
    """Whether the pods export `training_steps_total{namespace,pod}`."""
    step_time: Duration = 1.0
    start: Duration = 0.0
    end: Duration | None = None
    checkpoint_every: Duration | None = None
    """Periodic checkpoint pause (every rank idles together; a confounder, not a fault)."""
    checkpoint_duration: Duration = 90.0
    eval_every: Duration | None = None
    """Periodic evaluation phase (lower, steadier load on every rank; a confounder)."""
    eval_duration: Duration = 120.0
    load: float = Field(default=0.9, ge=0.0, le=1.0)
    """Mean activity; inference varies around it over the day."""
    priority_class: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    """More pod labels, as a team's manifests carry them (e.g. `team`, which metering bills to)."""

    @model_validator(mode="after")
    def _end_after_start(self) -> Workload:
        if self.end is not None and self.end <= self.start:
            raise ValueError("end after start")
        return self


class FaultKind(StrEnum):
    XID79_FALLEN_OFF_BUS = "xid79_fallen_off_bus"
    XID48_DBE = "xid48_dbe"
    ROW_REMAP_FAILURE = "row_remap_failure"
    THERMAL_THROTTLE = "thermal_throttle"
    POWER_BRAKE = "power_brake"
    NVLINK_CRC_STORM = "nvlink_crc_storm"
    PCIE_REPLAY_STORM = "pcie_replay_storm"
    STRAGGLER = "straggler"
    NCCL_HANG = "nccl_hang"
    # Novel faults: no rule detector names them (no XID, counter or clock-event bit); only the
    # anomaly detector can see them, as a GPU that drifts away from its peers.
    FB_LEAK = "fb_leak"
    """Frame-buffer use grows by `severity` x 1 GiB per 10 minutes (a leaking process)."""
    CLOCK_DRIFT = "clock_drift"
    """SM clock under load drifts down by `severity` x 8 % per hour (up to 40 %), no event bit."""
    NVLINK_BW_COLLAPSE = "nvlink_bw_collapse"
    """NVLink traffic of one GPU falls to 1 - 0.9 x `severity` of normal, no CRC errors."""
    COOLING_DEGRADATION = "cooling_degradation"
    """Temperature at a given power rises by `severity` x 12 C at full load (fan, heatsink)."""


NOVEL_FAULTS = frozenset(
    {
        FaultKind.FB_LEAK,
        FaultKind.CLOCK_DRIFT,
        FaultKind.NVLINK_BW_COLLAPSE,
        FaultKind.COOLING_DEGRADATION,
    }
)
"""Faults only the anomaly detector can find (truth finding `anomaly`, info)."""

GPU_FAULTS = frozenset(FaultKind) - {FaultKind.NCCL_HANG}


class Fault(_Strict):
    kind: FaultKind
    node: str | None = None
    """Node name (`<pool>-<n>`, e.g. `h100-0003`); GPU faults need node + gpu or a job."""
    gpu: int | None = Field(default=None, ge=0, le=15)
    job: str | None = None
    """`namespace/name` of a workload; a GPU fault with a job picks one of its GPUs."""
    rank: int | None = Field(default=None, ge=0)
    start: Duration
    end: Duration | None = None
    severity: float = Field(default=1.0, gt=0.0, le=10.0)
    """Scales the fault's effect (a straggler at 1.0 runs ~25 % slower)."""

    @model_validator(mode="after")
    def _target(self) -> Fault:
        if self.kind == FaultKind.NCCL_HANG and not self.job:
            raise ValueError("nccl_hang needs `job: namespace/name`")
        if self.kind in GPU_FAULTS and not self.job and (self.node is None or self.gpu is None):
            raise ValueError(f"{self.kind.value} needs `node` and `gpu`, or `job`")
        if self.end is not None and self.end <= self.start:
            raise ValueError("end after start")
        return self


class ConfounderKind(StrEnum):
    CHECKPOINT = "checkpoint"
    EVAL_PHASE = "eval_phase"
    EXPORTER_DOWN = "exporter_down"
    SCRAPE_GAP = "scrape_gap"
    JOB_START = "job_start"
    JOB_FINISH = "job_finish"
    APP_XID = "app_xid"
    POWER_CAP = "power_cap"
    GPU_GAP = "gpu_gap"


APP_XIDS = (13, 31, 43, 45)
"""Application-class XIDs: a CUDA program's own fault (graphics exception, page fault, stopped
processing, preemptive cleanup), not the GPU's. One occurrence must not page for hardware."""


class Confounder(_Strict):
    """A one-off event that is not a fault; periodic checkpoints/evals live on the workload."""

    kind: Literal[
        "checkpoint", "eval_phase", "exporter_down", "scrape_gap", "app_xid", "power_cap", "gpu_gap"
    ]
    """gpu_gap: one GPU's series are missing from the scrapes in [start, end) (a DCGM field read
    that timed out, the exporter skipping a device) while the GPU and its exporter are fine."""
    node: str | None = None
    gpu: int | None = Field(default=None, ge=0, le=15)
    """app_xid, gpu_gap: device index on `node` (or use `job` and `rank`)."""
    job: str | None = None
    rank: int | None = Field(default=None, ge=0)
    """app_xid, gpu_gap on a job: the rank whose first GPU it concerns (default 0)."""
    xid: int = 13
    """app_xid: the application-class XID code (13, 31, 43 or 45)."""
    cap: float = Field(default=0.6, gt=0.0, le=1.0)
    """power_cap: the cap as a share of each GPU's TDP."""
    start: Duration
    end: Duration

    @model_validator(mode="after")
    def _target(self) -> Confounder:
        if self.end <= self.start:
            raise ValueError("end after start")
        if self.kind == "exporter_down" and not self.node:
            raise ValueError("exporter_down needs `node`")
        if self.kind in ("checkpoint", "eval_phase") and not self.job:
            raise ValueError(f"{self.kind} needs `job: namespace/name`")
        if self.kind == "gpu_gap" and not self.job and (self.node is None or self.gpu is None):
            raise ValueError("gpu_gap needs `node` and `gpu`, or `job`")
        if self.kind == "app_xid":
            if self.xid not in APP_XIDS:
                raise ValueError(f"app_xid `xid` to be one of {list(APP_XIDS)}")
            if not self.job and (self.node is None or self.gpu is None):
                raise ValueError("app_xid needs `node` and `gpu`, or `job`")
        if self.kind == "power_cap" and not (self.job or self.node):
            raise ValueError("power_cap needs `node` or `job`")
        return self


class DiagResult(StrEnum):
    PASS = "pass"
    FAIL = "fail"


EXPORTER_VERSIONS = ("simple", "3.3", "4.x")
"""dcgm-exporter layouts the simulator serves (see `Exporter.version`)."""


class Exporter(_Strict):
    """What the simulated dcgm-exporters emit, version by version (docs/collectors.md)."""

    version: Literal["simple", "3.3", "4.x"] = "4.x"
    """`4.x` (tags 4.x, as read from dcgm-exporter's source) and `3.3` (tag 3.3.5-3.4.0): the
    last-XID gauge is sticky (kept until the exporter restarts, not cleared by a GPU reset),
    XIDs come in cascades (48, 94, 95 followed by 45; 13 by 43), and the XID count has one
    series per `xid` code with `window_size_in_ms`, or one zero series without `xid`, in a
    random order on every scrape; `4.x` adds `err_code`/`err_msg` to the gauge and types the
    count as a counter. `simple`: a convenient layout kept for tests that say why (the gauge
    shows the active fault's code and clears when the fault ends, no cascades, count series
    only where non-zero, in code order)."""
    xid_count: bool = True
    """Whether `DCGM_EXP_XID_ERRORS_COUNT` is collected (it is commented out of the shipped
    counters file; the GPU Operator's and many deployments turn it on)."""
    virtual_gpus: bool = False
    """`KUBERNETES_VIRTUAL_GPUS`: a GPU shared by time-slicing has one series per pod holding
    it, each with a `vgpu` label (the replica), the device's values repeated; off, the exporter
    names one of the pods (dcgm-exporter's device-to-pod map keeps one)."""
    hostname: Literal["node", "fqdn", "pod", "host"] = "node"
    """What the `Hostname` label says (simulator.series.HOSTNAME_MODES): the node's name
    (`NODE_NAME` set), the host's FQDN (`<node>.gpu.example.internal`) or the exporter pod's
    name (`nvidia-dcgm-exporter-<node>`), or a host name unrelated to the node's (`host`:
    `host-<hex>`, a node registered under another name, e.g. `--hostname-override`)."""

    @property
    def real(self) -> bool:
        return self.version != "simple"


DraApiVersion = Literal["v1", "v1beta2", "v1beta1"]


def _v1_only() -> list[DraApiVersion]:
    return ["v1"]


class Scenario(_Strict):
    name: str
    description: str = ""
    seed: int = 0
    cluster: str = "sim"
    start: Timestamp = 1_767_225_600.0  # 2026-01-01T00:00:00Z
    duration: Duration = 3600.0
    scrape_interval: Duration = 30.0
    pools: list[Pool] = Field(min_length=1)
    workloads: list[Workload] = Field(default_factory=list)
    faults: list[Fault] = Field(default_factory=list)
    confounders: list[Confounder] = Field(default_factory=list)
    diagnostics: dict[str, DiagResult] = Field(default_factory=dict)
    """Node -> outcome of a DCGM diagnostic Job (batch/v1) run on it; unlisted nodes pass."""
    gpu_diagnostics: dict[str, DiagResult] = Field(default_factory=dict)
    """`<node>/<index>` -> outcome of a diagnostic Job run on that one GPU (`dcgmi diag -i
    <index>`); a node-wide Job on that node fails when any of its listed GPUs fails."""
    diagnostic_seconds: Duration = Field(default=120.0, ge=0)

    @field_validator("gpu_diagnostics")
    @classmethod
    def _gpu_keys(cls, v: dict[str, DiagResult]) -> dict[str, DiagResult]:
        for key in v:
            node, _, idx = key.rpartition("/")
            if not node or not idx.isdigit():
                raise ValueError(f"keys to be <node>/<gpu index> (got {key!r})")
        return v

    """Scenario seconds a diagnostic Job runs before it completes."""
    diagnostic_flake_rate: float = Field(default=0.0, ge=0, le=1)
    """Share of diagnostics that fail on a GPU recently repaired of a hard fault (XID 48, 64,
    79), as marginal hardware does; each Job's draw is seeded (scenario seed, node, GPU, Job)."""
    diagnostic_flaky_seconds: Duration = Field(default=1800.0, ge=0)
    """How long after such a repair diagnostics may fail flakily."""
    # ---- repairs gpufleet asks for (reset_gpu Jobs, reboot_node's sentinel); simulator.repairs
    reset_failures: list[
        Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[0-9]+$")]
    ] = Field(default_factory=list)
    """`<node>/<gpu index>` whose reset Job fails and whose fault stays. Other resets succeed
    and clear the GPU's faults, unless a pod holds the GPU ("in use", as nvidia-smi refuses) or
    it has fallen off the bus (XID 79: only a reboot helps)."""
    reset_seconds: Duration = Field(default=10.0, ge=0)
    """Scenario seconds a reset Job (or a reboot sentinel Job) runs before it completes."""
    reboot_seconds: Duration = Field(default=180.0, ge=0)
    """Scenario seconds a node its reboot daemon reboots stays NotReady, then comes back with a
    new bootID and its GPU faults cleared (unless listed in `reboot_keeps_faults`)."""
    reboot_keeps_faults: list[str] = Field(default_factory=list)
    """Nodes whose GPU faults survive a reboot (hardware that a reboot does not fix)."""
    pod_labels: Literal["direct", "exported", "none"] = "direct"
    """Where the DCGM series written for Prometheus carry the workload
    (simulator.series.POD_LABEL_LAYOUTS): dcgm-exporter's own `pod`/`namespace` (honorLabels),
    `exported_pod`/`exported_namespace` beside the exporter's target labels, or not at all."""
    exporter: Exporter = Field(default_factory=Exporter)
    """Which dcgm-exporter layout the exporters and the backfill reproduce."""
    mig_repartitions: list[MigRepartition] = Field(default_factory=list)
    """Re-partitioning of MIG GPUs (not a fault: the GPU keeps reporting)."""
    shipped_fields_only: bool = False
    """Write only the fields dcgm-exporter's shipped counters file collects (no ECC, NVLink error
    counters or clock-event reasons; observer.fleet.field_presence.SHIPPED_DEFAULT_FIELDS)."""
    kubernetes_version: Literal["1.34", "1.35", "1.36", "1.37"] = "1.37"
    """The release the simulated API server is (simulator.kube_api.discovery.Profile): its
    `/version` and API versions, DeviceTaintRules at v1 only from 1.37."""
    dra_device_taint_gate: bool = False
    """The `DRADeviceTaints` feature gate and its runtime-config on: DeviceTaintRules are also
    served at v1alpha3 (1.34+) and v1beta2 (1.36+)."""
    dra_api_versions: list[DraApiVersion] = Field(default_factory=_v1_only, min_length=1)
    """The `resource.k8s.io` versions serving ResourceSlices and ResourceClaims (the API server's
    runtime-config): v1 by default on every profile, the deprecated betas when enabled; a list
    without v1 stands for a cluster that switched it off."""

    @field_validator("kubernetes_version", mode="before")
    @classmethod
    def _version_text(cls, v: Any) -> Any:
        """`kubernetes_version: 1.35` unquoted is a YAML float: read it as the release."""
        return f"{v:.2f}" if isinstance(v, float) else v

    @model_validator(mode="after")
    def _references(self) -> Scenario:
        pools = {p.name for p in self.pools}
        if len(pools) != len(self.pools):
            raise ValueError("pool names to be unique")
        jobs = {f"{w.namespace}/{w.name}" for w in self.workloads}
        if len(jobs) != len(self.workloads):
            raise ValueError("workload namespace/name to be unique")
        for w in self.workloads:
            if w.pool is not None and w.pool not in pools:
                raise ValueError(f"workload {w.name!r} to name a defined pool (got {w.pool!r})")
        targets: list[Fault | Confounder] = [*self.faults, *self.confounders]
        for f in targets:
            if f.job is not None and f.job not in jobs:
                raise ValueError(f"{f.kind} to name a defined workload (got job {f.job!r})")
        return self

    @property
    def end(self) -> float:
        return self.start + self.duration

    @property
    def gpu_count(self) -> int:
        return sum(p.nodes * p.gpus_per_node for p in self.pools)


def load_scenario(path: str | Path) -> Scenario:
    """Load and validate a scenario file (ConfigError names file, field path, expectation)."""
    return load_model(Scenario, path)


def scenario_from_dict(data: dict[str, Any], source: str = "<scenario>") -> Scenario:
    return validate(Scenario, data, source)


DEMO_SCENARIO = Path(__file__).with_name("demo.yaml")
LIVE_DEMO_SCENARIO = Path(__file__).with_name("demo-live.yaml")
"""What `make demo` plays at 1x: the demo fleet with its faults in the first quarter hour."""


def demo_scenario() -> Scenario:
    return load_scenario(DEMO_SCENARIO)


__all__ = [
    "DEMO_SCENARIO",
    "EXPORTER_VERSIONS",
    "JOB_LABEL_KEYS",
    "LIVE_DEMO_SCENARIO",
    "NOVEL_FAULTS",
    "ConfigError",
    "Confounder",
    "Exporter",
    "Fault",
    "FaultKind",
    "GpuModel",
    "Mig",
    "MigRepartition",
    "Pool",
    "Scenario",
    "Workload",
    "WorkloadKind",
    "demo_scenario",
    "load_scenario",
    "parse_duration",
    "parse_time",
]
