"""The benchmark fleet: a healthy fleet in steady state with a realistic sprinkle of trouble,
built directly as numpy columns (no simulator), so the per-finding paths of every detector run.
Shared by the detector-cycle and metering benchmarks and the dashboard's seeded journal.

80 % of the nodes run training jobs of 16 pods, the rest inference and idle pods; 0.1 % of GPUs
have XIDs or thermal bits, a straggler per 50 jobs, one hung job, one silent node and a few
lost GPUs.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from detectors.signals import (
    DRAM_ACTIVE,
    GPU_TEMP,
    GR_ACTIVE,
    MEM_TEMP,
    NVLINK_BW,
    POWER,
    SM_CLOCK,
    TENSOR_ACTIVE,
    THROTTLE,
    UTIL,
    XID,
)
from observer.fleet.model import (
    NO_INDEX,
    FleetSnapshot,
    GpuTable,
    Job,
    JobKey,
    MetricColumn,
    Node,
    NodeName,
    Pod,
    TelemetryHealth,
)

PER_NODE = 8
PODS_PER_JOB = 16
T0 = 1_767_225_600.0
COUNTERS = (
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
)


class Fleet:
    """Static layout of the benchmark fleet; `snapshot(k, drop)` draws cycle k's metrics."""

    def __init__(self, n_gpus: int, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        n_nodes = n_gpus // PER_NODE
        self.n = n_nodes * PER_NODE
        self.nodes = tuple(
            Node(NodeName(f"gpu-node-{i:05d}"), conditions={"Ready": "True"})
            for i in range(n_nodes)
        )
        self.uuid = np.array([f"GPU-{i:08x}-bench" for i in range(self.n)], dtype=object)
        self.node_index = np.repeat(np.arange(n_nodes, dtype=np.int32), PER_NODE)
        self.device = np.tile(np.arange(PER_NODE, dtype=np.int32), n_nodes)
        self.model = (np.arange(self.n) * 3 // self.n).astype(np.int32)
        train_nodes = int(n_nodes * 0.8) // PODS_PER_JOB * PODS_PER_JOB
        n_jobs = train_nodes // PODS_PER_JOB
        pods: list[Pod] = []
        node_job = np.full(n_nodes, NO_INDEX, dtype=np.int32)
        node_pod = np.full(n_nodes, NO_INDEX, dtype=np.int32)
        for i in range(n_nodes):
            if i < train_nodes:
                j = i // PODS_PER_JOB
                pods.append(
                    Pod(
                        f"team-{j % 20}",
                        f"job-{j:04d}-worker-{i % PODS_PER_JOB}",
                        self.nodes[i].name,
                        job_index=j,
                        rank=i % PODS_PER_JOB,
                    )
                )
                node_job[i] = j
            else:
                pods.append(Pod("serving", f"serve-{i}", self.nodes[i].name))
            node_pod[i] = i
        self.pods = tuple(pods)
        self.jobs = tuple(
            Job(
                JobKey(f"team-{j % 20}/job-{j:04d}"),
                "training.kubeflow.org/job-name",
                tuple(range(j * PODS_PER_JOB, (j + 1) * PODS_PER_JOB)),
            )
            for j in range(n_jobs)
        )
        self.job_index = node_job[self.node_index]
        self.pod_index = node_pod[self.node_index]
        self.idle = np.zeros(self.n, dtype=bool)
        self.idle[self.job_index == NO_INDEX] = (
            self.rng.random(int((self.job_index < 0).sum())) < 0.2
        )
        self.trouble = self.rng.choice(self.n, size=max(1, self.n // 1000), replace=False)
        self.stragglers = np.flatnonzero(np.isin(self.job_index, np.arange(0, n_jobs, 50)))[::128]
        self.hung_job = min(3, n_jobs - 1)
        self.silent_node = n_nodes - 1

    def snapshot(self, k: int, drop: float = 0.0) -> tuple[float, FleetSnapshot]:
        rng, n = self.rng, self.n
        now = T0 + 30.0 * k
        values = self._gauges(rng.normal(0.0, 1.0, (6, n)), k)
        ts = now - rng.uniform(0.0, 15.0, n)
        silent = self.node_index == self.silent_node
        ts[silent] = now - 600.0
        ts[self.trouble[:5]] = now - 120.0  # lost GPUs
        keep = rng.random(n) >= drop
        rows = np.flatnonzero(keep)
        metrics = {name: MetricColumn(v[rows], ts[rows]) for name, v in values.items()}
        for name in COUNTERS:
            inc = np.zeros(n) if "DBE" in name else rng.poisson(0.01, n).astype(np.float64)
            level = 0.0 if name == "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" else 1e3
            metrics[name] = MetricColumn(np.full(rows.size, level), ts[rows], inc[rows], 120.0)
        empty = np.full(rows.size, "", dtype=object)
        gpus = GpuTable(
            uuid=self.uuid[rows] if drop else self.uuid,
            node_index=self.node_index[rows],
            device_index=self.device[rows],
            model_index=self.model[rows],
            models=("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA H200"),
            pod_index=self.pod_index[rows],
            job_index=self.job_index[rows],
            mig_instance=empty,
            mig_profile=empty,
            pci_bus_id=empty,
        )
        node_last = np.full(len(self.nodes), now - 5.0)
        node_last[self.silent_node] = now - 600.0
        up = np.ones(len(self.nodes), dtype=bool)
        up[self.silent_node] = False
        snap = FleetSnapshot(
            taken_at=now,
            nodes=self.nodes,
            gpus=gpus,
            pods=self.pods,
            jobs=self.jobs,
            metrics=MappingProxyType(metrics),
            telemetry=TelemetryHealth(node_last, up, 30.0),
        )
        return now, snap

    def _gauges(self, noise: np.ndarray, k: int) -> dict[str, np.ndarray]:
        """Cycle k's gauges: training busy, serving half busy, idle GPUs idle, a straggler's
        peers waiting, a hung job spinning; XIDs and throttling on the trouble GPUs."""
        n = self.n
        train = self.job_index >= 0
        gr = np.where(train, 0.92, 0.55) + 0.012 * noise[0]
        gr = np.where(self.idle, 0.0, gr)
        util = np.where(self.idle, 0.0, np.clip(np.where(train, 98, 65) + noise[1], 0, 100))
        peers = np.isin(self.job_index, self.job_index[self.stragglers])
        gr = np.where(peers, gr * 0.8, gr)
        gr[self.stragglers] = 0.92
        hung = self.job_index == self.hung_job
        util = np.where(hung, 99.5, util)
        gr = np.where(hung, 0.01, gr)
        tensor = np.where(hung, 0.002, gr * 0.65)
        power = np.where(self.idle, 70.0, np.where(hung, 100.0, 350 + 300 * gr)) + 5 * noise[2]
        values = {
            UTIL: util,
            GR_ACTIVE: gr,
            TENSOR_ACTIVE: tensor,
            DRAM_ACTIVE: gr * 0.6,
            SM_CLOCK: np.where(self.idle, 345.0, 1980.0) + 0 * noise[3],
            POWER: power,
            GPU_TEMP: 40 + 30 * gr + noise[4],
            MEM_TEMP: 45 + 30 * gr + noise[5],
            THROTTLE: np.zeros(n),
            XID: np.zeros(n),
            NVLINK_BW: np.where(self.idle, 0.0, 200_000.0 * gr),  # MiB/s (DCGM field 449)
        }
        t = self.trouble
        values[XID][t[: t.size // 2]] = 13.0 + (k % 2) * 18.0
        values[THROTTLE][t[t.size // 2 :]] = float(0x40)
        return values
