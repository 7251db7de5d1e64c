"""One faulty GPU, end to end, as `gpufleet run` wires it: fence, evict, reset, diagnose, return.

The service is `build()` as `gpufleet run` assembles it (the real `kubernetes` client against
the simulator's Kubernetes API, its exporters scraped, the default detectors, the decision
journal, gates and background executor) with a GPU-grain policy, all live and automatic:
`fence_gpu` (NoExecute) and `reset_gpu` on a critical GPU fault. The finding comes from the
detectors reading the simulated dcgm-exporter, not from the test. The scheduled job function
`diagnose_and_return` runs in the context `Service` gives it (not started: the test calls
the cycles and the job in order), GPU -> pod attribution from the latest snapshot. The
simulation's wall clock is manual, so start-up (30 s), the reset (10 s) and the
diagnostic (60 s) take scenario time only when the test advances it.

h100-0001 (8 GPUs, DRA) runs two `serving/serve` pods on GPUs 0-1 and 2-3. XID 48 strikes its
GPU 0 two minutes in (after gpufleet's first cycle: evidence present before it watched never
acts). What an SRE checks, in order: the GPU's DeviceTaintRule; the pod on it evicted, the other
pod untouched and the replacement placed on the same node's healthy GPUs; the reset Job only
once no pod holds the GPU; the fault gone from the exporter; a `dcgmi diag -r 2 -i 0` Job; the
rule deleted and the GPU handed to the next pod. Every write's "about to" row precedes its "did"
row. Second case: the diagnostic fails, so the rule stays (labelled for replacement), a
`needs_person` row names the GPU, and no later run returns it.

Not covered here: the DRA-node label match of the shipped gpu-grain.yaml (the simulator does not
label its nodes `nvidia.com/dra-kubelet-plugin=true`), Slack delivery of `needs_person`.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from gpufleet.config import GpufleetConfig
from gpufleet.service.assembly import build
from gpufleet.service.runtime import Service
from harness.k8s_sim import meta, name_of, present, small_scenario, spec
from harness.live_policy import live_policy_dict
from observer.scrape.collector import ScrapeSettings
from observer.scrape.exposition import parse_page
from remediations.cluster_names import fence_rule_name
from remediations.policy import policy_from_dict
from remediations.scheduled.context import JobRequest
from remediations.scheduled.diagnose import REPLACEMENT_LABEL, DiagnoseParams, run_diagnose
from remediations.store import AuditRecord, Store
from simulator.clock import ManualWall
from simulator.cluster import ClusterOptions
from simulator.layout import gpu_uuid
from simulator.serve import SimulationHandle, start_simulation

NODE = "h100-0001"
BAD = gpu_uuid("small", NODE, 0)
FAULT_AT = 120.0
"""Scenario seconds after the start when XID 48 strikes."""

GPU_FAULT = {"kinds": ["gpu_xid", "gpu_memory"], "severities": ["critical"]}
POLICY = {
    **live_policy_dict(
        [
            {"name": "fence-faulty-gpu", "match": GPU_FAULT, "playbook": "fence_gpu",
             "mode": "auto", "params": {"effect": "NoExecute"}},
            {"name": "reset-faulty-gpu", "match": GPU_FAULT, "playbook": "reset_gpu",
             "mode": "auto"},
        ]
    ),
    "hysteresis": {"open_after": 1, "resolve_after": 2},
}  # fmt: skip


class Fleet:
    """The simulation, and the service parts `gpufleet run` builds against it."""

    def __init__(self, handle: SimulationHandle, wall: ManualWall, service: Service) -> None:
        self.h, self.wall, self.service, self.parts = handle, wall, service, service.p
        self.store = self.parts.store
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(handle.kubeconfig), client_configuration=cfg)
        self.api = client.ApiClient(cfg)
        self.lines: list[str] = []

    def advance(self, seconds: float) -> None:
        self.wall.advance(seconds)
        self.h.cluster.tick()

    def cycle(self) -> None:
        """One detection cycle, then the background executor's pass it asked for."""
        report = self.parts.live.run_once(self.parts.clock())
        assert report.ok, report.errors
        assert self.parts.loop.settle(10.0)

    def pods_by_gpu(self) -> dict[str, str]:
        """GPU UUID -> `namespace/pod`, as the node's dcgm-exporter labels its GPUs."""
        with urllib.request.urlopen(self.h.node_metrics_url(NODE), timeout=5) as r:
            page = parse_page(r.read().decode())
        return {
            u: f"{lb['namespace']}/{lb['pod']}" for u, lb in page.identity.items() if lb.get("pod")
        }

    def xid(self) -> float:
        with urllib.request.urlopen(self.h.node_metrics_url(NODE), timeout=5) as r:
            text = r.read().decode()
        return next(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("DCGM_FI_DEV_XID_ERRORS{") and BAD in line
        )

    def rules(self) -> dict[str, dict[str, str]]:
        """DeviceTaintRule name -> labels (`kubectl get devicetaintrules`)."""
        got = client.ResourceV1Api(self.api).list_device_taint_rule().items
        return {name_of(r): dict(meta(r).labels or {}) for r in got}

    def jobs(self) -> dict[str, Any]:
        """Job name -> the batch/v1 Job (`kubectl -n gpufleet get jobs`)."""
        got = client.BatchV1Api(self.api).list_namespaced_job("gpufleet-jobs").items
        return {name_of(j): j for j in got}

    def schedulable(self) -> bool:
        return not spec(client.CoreV1Api(self.api).read_node(NODE)).unschedulable

    def diagnose(self) -> dict[str, str]:
        """One run of the scheduled `diagnose_and_return`, each poll a scenario minute."""

        def sleep(seconds: float) -> bool:
            self.advance(60)
            return False

        ctx = replace(self.service.ctx, sleep=sleep)  # the service's, GPU holders and all
        p = DiagnoseParams(wait=5, poll=0.01)
        now = self.parts.clock()
        out = run_diagnose(ctx, JobRequest("diag", "diagnose_and_return", now, p, now, now))
        assert out.ok, out
        assert self.parts.loop.settle(10.0)  # the executor pass the job woke
        self.lines = list(out.details["nodes"])
        return dict(out.details["outcomes"])


@pytest.fixture(params=["pass", "fail"])
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fleet]:
    sc = small_scenario(
        faults=[{"kind": "xid48_dbe", "node": NODE, "gpu": 0, "start": f"{FAULT_AT:.0f}s"}],
        reset_seconds=10,
        diagnostic_seconds=60,
        gpu_diagnostics={f"{NODE}/0": request.param},
    )
    wall = ManualWall(sc.start)
    h = start_simulation(
        sc, wall=wall, kubeconfig_out=tmp_path / "kubeconfig", bookmark_interval=0.2,
        options=ClusterOptions(startup_seconds=30.0),
    )  # fmt: skip
    cfg = GpufleetConfig.model_validate(
        {
            "cluster": "small",
            "store_url": f"sqlite:///{tmp_path / 'j.db'}",
            "service": {"http": {"port": 0}},
        }
    )
    store = Store.open(cfg.store_url, cluster="small")
    parts, _ = build(
        cfg,
        policy_from_dict(POLICY, "gpu-lifecycle"),
        "e2e",
        store=store,
        kubeconfig=str(h.kubeconfig),
        scrape=ScrapeSettings(discovery_url=f"{h.metrics_url}/targets", cluster="small"),
        clock=h.clock,
        interval=1.0,
    )
    fleet = Fleet(h, wall, Service(parts))  # not started: the test runs its cycles and job
    try:
        yield fleet
    finally:
        fleet.api.close()
        fleet.service.shutdown()
        h.stop()


def _story(log: list[AuditRecord]) -> list[str]:
    """The journal rows that tell the GPU's story, in the order they were written."""
    marks = ("fence_gpu on", "reset_gpu on", "unfence_gpu on", "about to", "did", "diagnostic")
    return [
        f"{r.kind}: {r.message.split(': ')[0] if r.kind != 'decision' else r.message}"
        for r in log
        if r.kind in ("decision", "k8s_write", "diagnostic", "needs_person")
        and r.message.startswith(marks)
    ]


def _journaled_first(log: list[AuditRecord]) -> None:
    """Each write gpufleet did was journaled, by the same action, before it was done."""
    about = {(r.action_id, r.message.removeprefix("about to ")): r.id for r in log
             if r.kind == "k8s_write" and r.message.startswith("about to ")}  # fmt: skip
    did = [r for r in log if r.kind == "k8s_write" and r.message.startswith("did ")]
    assert len(did) >= 3
    for r in did:
        if r.action_id is not None:  # an action's step: same action, same op and target
            what = r.message.removeprefix("did ").split(": ", 1)[0]
            assert about.get((r.action_id, what), r.id) < r.id, r.message
        else:  # the diagnostic job's Job: its "about to" row names it
            name = r.message.split()[2].rstrip(":")
            assert any(a.id < r.id and name in a.message and a.message.startswith("about to")
                       for a in log), r.message  # fmt: skip


def test_one_gpu_is_fenced_emptied_reset_diagnosed_and_returned_or_kept(
    fleet: Fleet, request: pytest.FixtureRequest
) -> None:
    passes = request.node.callspec.params["fleet"] == "pass"
    gpu = {i: gpu_uuid("small", NODE, i) for i in range(8)}
    fleet.advance(60)  # the workloads start
    fleet.cycle()  # gpufleet's first look: a healthy fleet
    held = fleet.pods_by_gpu()
    victim, other = held[BAD], held[gpu[2]]
    assert victim != other and held[gpu[1]] == victim and held[gpu[3]] == other
    assert not fleet.rules() and not fleet.jobs()

    # XID 48 on GPU 0: the detectors see it, the GPU is fenced and its pod evicted at once;
    # the node stays schedulable and its other pod carries on; no reset while a pod held it
    fleet.advance(FAULT_AT)
    fleet.cycle()
    assert fleet.xid() == 45  # 4.x: the gauge shows XID 48's follower; the count names 48
    assert list(fleet.rules()) == [fence_rule_name(BAD)]
    rule = client.ResourceV1Api(fleet.api).read_device_taint_rule(fence_rule_name(BAD))
    sel, taint = present(spec(rule).device_selector, "deviceSelector"), spec(rule).taint
    assert (sel.pool, sel.device, taint.effect) == (NODE, "gpu-0", "NoExecute")
    now = fleet.pods_by_gpu()
    assert victim not in now.values() and now[gpu[2]] == now[gpu[3]] == other
    assert fleet.schedulable()
    assert not fleet.jobs()

    # the replacement is placed on the same node's healthy GPUs (never GPU 0); the GPU is
    # free, so the next cycle's reset_gpu creates its Job, which succeeds and ends the fault
    fleet.advance(40)
    fleet.cycle()
    now = fleet.pods_by_gpu()
    (new,) = {p for p in now.values() if p not in (victim, other)}
    assert new.startswith("serving/serve-") and BAD not in now
    (reset,) = fleet.jobs().values()
    (c,) = reset.spec.template.spec.containers
    assert (
        c.command == ["nvidia-smi", "-r", "-i", "0"] and reset.spec.template.spec.node_name == NODE
    )
    for _ in range(3):
        fleet.advance(10)
        fleet.cycle()
    assert fleet.jobs()[reset.metadata.name].status.succeeded == 1
    assert fleet.xid() == 45  # the fault is over, but a reset does not clear the 4.x gauge
    assert {a.playbook: a.state.value for a in fleet.store.actions()} == {
        "fence_gpu": "done", "reset_gpu": "done"
    }  # fmt: skip
    assert list(fleet.rules()) == [fence_rule_name(BAD)]  # a reset is not a validation

    # the scheduled diagnostic: a pass returns the GPU, a failure keeps it fenced and marked
    assert fleet.diagnose() == {f"gpu/{BAD}": "passed" if passes else "failed"}, fleet.lines
    (diag,) = [j for name, j in fleet.jobs().items() if name != reset.metadata.name]
    assert diag.spec.template.spec.containers[0].command == ["dcgmi", "diag", "-r", "2", "-i", "0"]
    assert diag.spec.template.spec.node_name == NODE
    log = fleet.store.audit_log()
    _journaled_first(log)
    fenced, run = f"fence_gpu on gpu/{BAD}: execute", f"reset_gpu on gpu/{BAD}: execute"
    story = _story(log)
    wait = [i for i, s in enumerate(story) if "reset_gpu on incident/" in s and "deny" in s]
    assert wait and all(i < story.index(f"decision: {run}") for i in wait)
    why = [r for r in log if r.kind == "decision" and "reset_gpu on incident/" in r.message]
    assert why[0].detail["reasons"] == [f"plan: waits for pod {victim} to release GPU {BAD}"]
    expect = [
        f"decision: {fenced}",
        f"k8s_write: about to fence_device {NODE}",
        f"k8s_write: did fence_device {NODE}",
        f"decision: {run}",
        f"k8s_write: about to run_node_job {NODE}",
        f"k8s_write: did run_node_job {NODE}",
        f"k8s_write: about to create diagnostic job gpufleet-jobs/{diag.metadata.name} on {NODE}",
        f"k8s_write: did create_job gpufleet-jobs/{diag.metadata.name}",
        f"diagnostic: diagnostic {'passed' if passes else 'failed'} on gpu/{BAD} "
        f"(job gpufleet-jobs/{diag.metadata.name})",
    ]
    assert [s for s in story if "reset_gpu on incident/" not in s][: len(expect)] == expect
    told = [r.target for r in log if r.kind == "needs_person"]
    if passes:
        # the diagnostic passed, but the GPU's memory incident is still open (the detector
        # holds the error events of the last 10 minutes): the one return rule makes it wait
        assert list(fleet.rules()) == [fence_rule_name(BAD)] and told == []
        assert any("waits for its open hardware incident(s) to close (gpu_memory" in line
                   for line in fleet.lines), fleet.lines  # fmt: skip
        cycles = 0
        while fleet.rules() and cycles < 30:  # cycles go on; the scheduled job runs again
            fleet.advance(30)
            fleet.cycle()
            cycles += 1
            if cycles % 5 == 0:
                assert fleet.diagnose() == {}, fleet.lines  # the passed verdict stands
        assert fleet.rules() == {}, fleet.lines
        (memory,) = [i for i in fleet.store.incidents_on(NODE) if i.kind == "gpu_memory"]
        assert memory.resolved_at is not None
        (back,) = [a for a in fleet.store.actions() if a.playbook == "unfence_gpu"]
        assert back.started_at is not None and back.started_at >= memory.resolved_at
        story = [s for s in _story(fleet.store.audit_log()) if ": deny" not in s]
        assert story[len(expect) :] == [
            f"decision: unfence_gpu on gpu/{BAD}: execute",
            f"k8s_write: about to unfence_device {NODE}",
            f"k8s_write: did unfence_device {NODE}",
        ]
        # GPU 0 takes work again: the pod on GPUs 2-3 is deleted, its replacement gets GPU 0
        client.CoreV1Api(fleet.api).delete_namespaced_pod(other.split("/")[1], "serving")
        fleet.advance(40)
        fleet.cycle()
        now = fleet.pods_by_gpu()
        assert now[BAD].startswith("serving/serve-") and now[BAD] not in (other, new)
        assert fleet.schedulable()
    else:
        assert REPLACEMENT_LABEL in fleet.rules()[fence_rule_name(BAD)]
        rule = client.ResourceV1Api(fleet.api).read_device_taint_rule(fence_rule_name(BAD))
        assert rule.spec.taint.effect == "NoExecute"
        assert told == [f"gpu/{BAD}"]
        fleet.advance(600)
        fleet.cycle()
        assert fleet.diagnose() == {}, fleet.lines  # a person's turn: no Job, no return
        assert len(fleet.jobs()) == 2
        assert list(fleet.rules()) == [fence_rule_name(BAD)]
        assert not any(a.playbook == "unfence_gpu" for a in fleet.store.actions())
        assert BAD not in fleet.pods_by_gpu()
