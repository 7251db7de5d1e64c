"""Benchmark: healthy GPUs and GPU-hours kept in service per fault, for each repair grain.

Grains (issue 16), each a policy run by the real decision journal and executor through the
`kubernetes` client against the simulated cluster (harness/k8s_sim.py):
- GPU: a DRA cluster; `fence_gpu` (DeviceTaintRule, NoExecute) for single-GPU faults;
- pods on GPU, device plugin healthy: `evict_gpu_pods` (the plugin withdrew the GPU, so the
  node stays schedulable);
- pods on GPU, health checks off (DP_DISABLE_HEALTHCHECKS=all): `evict_gpu_pods` cordons;
- node: `drain` for every fault.
Node-level faults (XID 79 -> `gpu_lost`) are drained in every grain, as gpu-grain.yaml does.

Each fault class runs once per grain on two node layouts: h100-0000 (training: 2 pods x 4
GPUs, node full) and h100-0001 (serving: 2 pods x 2 GPUs, 4 GPUs free). After the action is
verified, the simulated cluster is read: a schedulable node keeps every GPU that is neither
faulty nor fenced in service (running, or free for the next pod); a cordoned node keeps only
the healthy GPUs its remaining pods hold. GPU-hours kept = GPUs kept x the repair duration.

The fault mix (an assumption, stated so it can be argued with): Meta's Llama 3 report (16k
H100, 54 days) counts 268 GPU-attributable interruptions: faulty GPU 148, HBM3 memory 72, SRAM
19, GSP 17, SDC 6, thermal 6, so memory errors are about a third (91/268) and the rest mostly
"faulty GPU" (fallen off the bus among them). The Delta study (Cui et al. 2025, 11.7 M GPU
hours, A100/H100) finds H100 memory errors (uncorrectable ECC, row remapping) the most frequent
per GPU and NVLink errors common. Hence per 100 critical faults: memory 48 DBE 8, 63 row-remap
pending 6, 64 row-remap failure 6, 94 contained 12, 95 uncontained 8 (40 in all); NVLink 74: 20;
79 fallen off the bus: 25; several GPUs of one node at once (two XID 48s): 5; other single-GPU
faults needing a reset (GSP 119/120, modelled as XID 48): 10. Everything but XID 79 and the
multi-GPU case is single-GPU; the NVIDIA device plugin withdraws every one of these XIDs (only
13, 31, 43, 45, 68 and 109 are application errors it ignores).

Repair durations (hours until the faulty GPU is back, also an assumption): GPU reset plus a
level-2 DCGM diagnostic 1 h (48, 64, 74, 95, 63 whose pending remap needs a reset, GSP);
contained error 94 (restart the application, then diag) 0.5 h; XID 79 reboot plus diag 2 h.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.performance_doc import median, stamp, table
from detectors.findings import Finding, FindingKind, Severity
from harness.k8s_sim import Sim, exporter_gpus, running_sim
from kube.actuator import KubeActuator
from remediations.decision_journal import DecisionJournal
from remediations.executor import Executor
from remediations.policy import policy_from_dict
from remediations.store import Store
from simulator.layout import gpu_uuid

TITLE = "Repair grain: GPU-hours kept in service per fault (remediations/playbooks)"
GPUS = 8
LAYOUTS = {"h100-0000": "training (2 pods x 4 GPUs)", "h100-0001": "serving (2 x 2, 4 free)"}


@dataclass(frozen=True, slots=True)
class FaultClass:
    name: str
    xid: int
    action: str
    weight: float
    """Faults of this class per 100 critical GPU faults (see the module docstring)."""
    hours: float
    """Repair duration: hours until the faulty GPU is back in service."""
    devices: tuple[int, ...] = (1,)
    kind: FindingKind = FindingKind.GPU_XID


MIX = (
    FaultClass("XID 48 DBE", 48, "RESET_GPU", 8, 1.0),
    FaultClass("XID 63 row remap pending", 63, "RESET_GPU", 6, 1.0, kind=FindingKind.GPU_MEMORY),
    FaultClass("XID 64 row remap failure", 64, "RESET_GPU", 6, 1.0, kind=FindingKind.GPU_MEMORY),
    FaultClass("XID 74 NVLink", 74, "RESET_GPU", 20, 1.0),
    FaultClass("XID 79 fallen off the bus", 79, "RESTART_BM", 25, 2.0),
    FaultClass("XID 94 contained ECC", 94, "RESTART_APP", 12, 0.5),
    FaultClass("XID 95 uncontained ECC", 95, "RESET_GPU", 8, 1.0),
    FaultClass("GSP 119/120 (as XID 48)", 48, "RESET_GPU", 10, 1.0),
    FaultClass("two GPUs of a node (XID 48 x2)", 48, "RESET_GPU", 5, 1.0, devices=(1, 5)),
)


@dataclass(frozen=True, slots=True)
class Grain:
    name: str
    dra: bool
    plugin_health: bool
    single_gpu: dict[str, Any] | None
    """The rule for single-GPU faults (None: drain them too)."""


GRAINS = (
    Grain("GPU (DRA fence_gpu)", True, False, {"playbook": "fence_gpu",
                                                "params": {"effect": "NoExecute"}}),
    Grain("pods on GPU (plugin healthy)", False, True, {"playbook": "evict_gpu_pods"}),
    Grain("pods on GPU (health checks off)", False, False, {"playbook": "evict_gpu_pods"}),
    Grain("node (drain)", False, True, None),
)  # fmt: skip


def policy(grain: Grain) -> dict[str, Any]:
    drain = {"playbook": "drain", "params": {"timeout": "10m", "backoff_initial": "5s"}}
    single = grain.single_gpu or drain
    return {
        "actuation": "live",
        "hysteresis": {"open_after": 1},
        "gates": {"blast_radius": {"max_nodes": 4, "max_percent_of_pool": 100}},
        "rules": [
            {"name": "single", "match": {"kinds": ["gpu_xid", "gpu_memory"]}, "mode": "auto",
             **single},
            {"name": "node", "match": {"kinds": ["gpu_lost"]}, "mode": "auto", **drain},
        ],
    }  # fmt: skip


def findings(f: FaultClass, node: str, t0: float) -> list[Finding]:
    out = []
    for d in f.devices:
        uuid = gpu_uuid("small", node, d)
        ev = {"xid": f.xid, "nvidia_action": f.action}
        out.append(Finding(f.kind, Severity.CRITICAL, f"{f.name} on {node} GPU {d}", t0, t0,
                           node=node, gpu_uuid=uuid, evidence=ev))  # fmt: skip
        if f.xid == 79:
            out.append(Finding(FindingKind.GPU_LOST, Severity.CRITICAL, f"GPU {d} lost", t0, t0,
                               node=node, gpu_uuid=uuid, evidence=ev))  # fmt: skip
    return out


def sim_faults(f: FaultClass, node: str, grain: Grain) -> list[dict[str, Any]]:
    """The device plugin's side: with health checks on it withdraws each faulty GPU (the
    simulator's plugin does so for XID 48/64/79 faults; XID 48 stands in for the others)."""
    if not grain.plugin_health:
        return []
    kind = "xid79_fallen_off_bus" if f.xid == 79 else "xid48_dbe"
    return [{"kind": kind, "node": node, "gpu": d, "start": "0s"} for d in f.devices]


def kept_in_service(sim: Sim, node: str, bad: set[int]) -> int:
    """Healthy GPUs of `node` still doing or able to take work, read from the cluster."""
    fenced = {d for n, d in sim.cluster.device_taints if n == node}
    withdrawn = {d for n, d in sim.cluster.devices.unhealthy if n == node}
    out = bad | fenced | withdrawn
    if node not in sim.cluster.unschedulable_nodes():
        return GPUS - len(out)
    held = {g for p in sim.cluster.running_pods() if p.node == node for g in p.gpu_indices}
    return len(held - out)


def one(f: FaultClass, grain: Grain, node: str) -> tuple[int, float]:
    """(healthy GPUs kept, wall seconds from the decision to the verified action)."""
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-grain-") as tmp:
        faults = sim_faults(f, node, grain)
        with running_sim(Path(tmp), dra=grain.dra, history=5000, faults=faults) as sim:
            sim.advance(1)
            clock = [0.0]

            def sleep(seconds: float) -> None:  # PDB back-off passes in simulated time
                clock[0] += seconds
                sim.advance(seconds)

            act = KubeActuator.from_kubeconfig(sim.kubeconfig, clock=lambda: clock[0], sleep=sleep)
            store = Store.open(f"sqlite:///{Path(tmp) / 'journal.db'}", cluster="bench")
            try:
                pol = policy_from_dict(policy(grain), f"<{grain.name}>")

                def view(now: float) -> Any:
                    pod_of_gpu, gpus = exporter_gpus(sim, node)
                    v = act.cluster_view(now)
                    return dataclasses.replace(v, pod_of_gpu=pod_of_gpu, gpus_of_node={node: gpus})

                t = time.perf_counter()
                t0 = sim.wall()  # the cluster's clock, as pod creation times use it
                eng = DecisionJournal(pol, store, started_at=t0 - 60)
                eng.cycle(findings(f, node, t0), view(t0), t0)
                runner = Executor(
                    pol, store, act, owner="bench", open_incidents=eng.open_incident_ids
                )
                now = t0
                for _ in range(4):
                    now += 31
                    sim.advance(31)
                    runner.run(view(now), now)
                wall = time.perf_counter() - t
                states = {a.state.value for a in store.actions()}
                assert states <= {"done"}, (f.name, grain.name, states)
                return kept_in_service(sim, node, set(f.devices)), wall
            finally:
                store.close()
                act.close()


def run(runs: int, quick: bool) -> str:
    mix = MIX[:2] + MIX[4:5] if quick else MIX
    nodes = list(LAYOUTS)[:1] if quick else list(LAYOUTS)
    kept: dict[tuple[str, str, str], int] = {}
    walls: list[float] = []
    for f in mix:
        for g in GRAINS:
            for n in nodes:
                k, w = one(f, g, n)
                kept[(f.name, g.name, n)] = k
                walls.append(w)
    total = sum(f.weight for f in mix)
    rows: list[list[object]] = []
    for f in mix:
        cells = [" / ".join(str(kept[(f.name, g.name, n)]) for n in nodes) for g in GRAINS]
        rows.append([f.name, f"{f.weight:g}", f"{f.hours:g}", *cells])
    per_fault, hours = [], []
    for g in GRAINS:
        avg = [sum(f.weight * kept[(f.name, g.name, n)] for f in mix) / total for n in nodes]
        gh = [sum(f.weight * f.hours * kept[(f.name, g.name, n)] for f in mix) / total
              for n in nodes]  # fmt: skip
        per_fault.append(" / ".join(f"{x:.2f}" for x in avg))
        hours.append(" / ".join(f"{x:.2f}" for x in gh))
    rows.append(["**healthy GPUs kept per fault** (weighted)", f"{total:g}", "", *per_fault])
    rows.append(["**GPU-hours kept per fault** (weighted)", "", "", *hours])
    header = ["fault class", "per 100", "repair h", *[g.name for g in GRAINS]]
    layouts = " / ".join(LAYOUTS[n] for n in nodes)
    return "\n".join(
        [
            stamp(),
            "",
            f"Healthy GPUs of the 8-GPU node kept in service after the verified action, per node "
            f"layout ({layouts}), and the mix-weighted means:",
            "",
            table(header, rows),
            "",
            f"{len(walls)} runs (fault class x grain x layout), each through the decision journal, "
            "the executor and the `kubernetes` client against the simulated API; the counts are "
            "deterministic (one run each). Median wall time from the decision to the verified "
            f"action: {median(walls):.2f} s (simulated time advances 31 s per executor pass). "
            "Fault mix and repair durations are assumptions, argued in bench/repair_grain.py. "
            "XID 79 drains the node in every grain (0 kept). With device-plugin health checks "
            "off the pods-on-GPU grain cordons, so only the GPUs of pods still running count.",
        ]
    )
