"""What `gpufleet demo` says before anything happens: where things are, what is about to happen
and when (in wall time at this speed), and the commands to look at and approve actions.

The timeline is read from the scenario's faults and confounders, with what the default policy
does about each kind, so a person knows what to wait for and can check the product against it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from gpufleet.demo.log import clock_label
from gpufleet.executables import command
from simulator.scenario import Fault, FaultKind
from simulator.serve import SimulationHandle

_HARDWARE = "critical -> quarantine the node (automatic), drain waits for your approval"
OUTCOME: dict[FaultKind, str] = {
    FaultKind.XID48_DBE: f"XID 48 double-bit ECC error; {_HARDWARE}",
    FaultKind.XID79_FALLEN_OFF_BUS: f"XID 79 GPU fell off the bus; {_HARDWARE}",
    FaultKind.ROW_REMAP_FAILURE: f"row-remap failure; {_HARDWARE}",
    FaultKind.THERMAL_THROTTLE: "thermal throttling; warning, notify only",
    FaultKind.POWER_BRAKE: "power-brake throttling; warning, notify only",
    FaultKind.NVLINK_CRC_STORM: "NVLink CRC errors; interconnect warning",
    FaultKind.PCIE_REPLAY_STORM: "PCIe replays; interconnect warning",
    FaultKind.STRAGGLER: "a slow rank; straggler warning after 2-4 min, migrate awaits approval",
    FaultKind.NCCL_HANG: "the job hangs in NCCL; critical, restart_job waits for approval",
}
CONFOUNDER = {
    "exporter_down": "a monitoring gap (info); missing data is never acted on",
    "scrape_gap": "a fleet-wide monitoring gap (info); nothing acts, incidents stay open",
    "checkpoint": "a pause for a checkpoint; should raise nothing",
    "eval_phase": "an evaluation phase; should raise nothing",
}


def _where(f: Fault) -> str:
    if f.node is not None and f.gpu is not None:
        return f"{f.node} GPU {f.gpu}"
    if f.job is not None:
        return f.job + (f" rank {f.rank}" if f.rank is not None else "")
    return f.node or "fleet"


def timeline(handle: SimulationHandle) -> list[str]:
    """One line per fault/confounder: scenario time, wall time from now, what to expect."""
    sc, clock = handle.scenario, handle.clock
    now = clock()
    rows: list[tuple[float, str]] = []
    for f in sc.faults:
        rows.append((f.start, f"{f.kind.value} on {_where(f)}: {OUTCOME.get(f.kind, '')}"))
    for c in sc.confounders:
        where = c.node or c.job or "the whole fleet"
        rows.append((c.start, f"{c.kind} on {where}: {CONFOUNDER.get(c.kind, '')}"))
    out = []
    for start, text in sorted(rows, key=lambda r: r[0]):
        wall = (sc.start + start - now) / clock.speed
        when = "already" if wall < 0 else f"in ~{wall:.0f} s"
        out.append(f"  {clock_label(start):>8} ({when:>10})  {text}")
    return out


def kubectl() -> str:
    return command("kubectl") if shutil.which("kubectl") is None else "kubectl"


def banner(
    handle: SimulationHandle,
    config: Path | None,
    *,
    shadow: bool = False,
    collect: str = "scrape exporters",
) -> str:
    """`collect` says where metrics come from."""
    kc = handle.kubeconfig
    sc, clock = handle.scenario, handle.clock
    length = (sc.end - clock()) / clock.speed
    lines = [
        "gpufleet demo: a simulated GPU fleet is live"
        + (", and gpufleet is watching it" if config is not None else ""),
        "",
        handle.describe(),
        "",
    ]
    if config is not None:
        gf = command("gpufleet")
        policy = config.with_name("demo-policy.yaml")
        mode = (
            "SHADOW (actuation: shadow, as a fresh install): decisions are journaled as "
            "'shadow: would ...', Kubernetes is never written"
            if shadow
            else (
                f"LIVE: the demo opts in with `actuation: live` in {policy} (a fresh install "
                "is in shadow and writes nothing); quarantine is automatic, everything "
                "disruptive waits for you"
            )
        )
        lines += [
            f"every {sc.scrape_interval:g} s of fleet time (~{sc.scrape_interval / clock.speed:.1f}"
            f" s here): {collect} + Kubernetes API -> detectors -> incidents -> policy ->",
            f"actions -> Kubernetes. {mode}.",
            f"Fleet time now {clock_label(clock() - sc.start)}; the scenario runs to "
            f"{clock_label(sc.duration)} (~{max(length, 0) / 60:.0f} min here), then the fleet "
            "stays as it is.",
            "",
            "what will happen (fleet time, wall time):",
            *(timeline(handle) or ["  nothing scheduled: this scenario has no faults"]),
            "",
            "look and act (another terminal, same directory):",
            f"  {gf} actions list --config {config}",
            f"  {gf} actions approve ID --config {config}",
            f"  {gf} audit --config {config}",
            f"  {gf} policy explain --config {config}",
        ]
    k = kubectl()
    lines += [
        f"  {k} --kubeconfig {kc} get nodes",
        f"  {k} --kubeconfig {kc} get pods -A -o wide",
        f"  curl -s {handle.node_metrics_url(handle.layout.nodes[0].name)} | head",
        "",
        "Ctrl-C stops the demo.",
    ]
    return "\n".join(lines)
