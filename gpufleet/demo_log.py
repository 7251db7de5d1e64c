"""The demo's running commentary: what each live cycle changed, one short line per event.

A person watching `gpufleet demo` should see the product think: a finding episode begins, an
incident opens, the policy decides (and why), an action waits for them or runs, Kubernetes is
written to, the incident resolves. Quiet cycles print nothing except a periodic heartbeat.
Times are scenario time as `+MM:SS` from the scenario start, the notation the banner's timeline
uses. Lines come from `CycleReport`s (gpufleet.live_cycle); actions and Kubernetes writes come
from the journal's audit rows, so approvals made with `gpufleet actions approve` show up too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from detectors.findings import Finding
from gpufleet.live_cycle import CycleReport
from remediations.incidents import Change
from remediations.store import AuditRecord

Write = Callable[[str], None]


def clock_label(seconds: float) -> str:
    """`+MM:SS` (or `+H:MM:SS`) of scenario time."""
    s = max(0, int(seconds))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"+{h}:{m:02d}:{sec:02d}" if h else f"+{m:02d}:{sec:02d}"


def entity(f: Finding) -> str:
    parts = [p for p in (f.job, f.node) if p]
    if f.gpu_uuid:
        parts.append(f.gpu_uuid[:12])  # the summary names the GPU index; the UUID prefix is enough
    return " ".join(parts) or "fleet"


def _reasons(reasons: Iterable[object]) -> str:
    text = "; ".join(str(r) for r in reasons if r)
    return f" — {text}" if text else ""


@dataclass
class DemoLog:
    """Turns cycle reports into lines; `write` is print (or a list's append in tests)."""

    origin: float
    """Scenario start (unix seconds): times print as offsets from it."""
    write: Write = print
    config_hint: str = ""
    """Appended to approval prompts, e.g. `--config .gpufleet/demo-config.yaml`."""
    heartbeat_every: float = 600.0
    """Scenario seconds between fleet status lines (0: none)."""
    _playbooks: dict[str, str] = field(default_factory=dict)
    _next_beat: float | None = None
    _failing: str = ""

    def line(self, at: float, tag: str, text: str) -> None:
        self.write(f"[{clock_label(at - self.origin)}] {tag:<9}{text}")

    def report(self, r: CycleReport) -> None:
        for e in r.errors:
            key = f"{e.stage}:{e.message}"
            if key != self._failing:  # a fault that repeats every cycle is printed once
                self.line(r.now, "error", f"{e.stage}: {e.message} (the loop carries on)")
            self._failing = key
        if r.ok and self._failing:
            self.line(r.now, "recovered", "cycles succeed again")
            self._failing = ""
        for f in r.started:
            self.line(r.now, "finding", f"{f.severity.value.upper()} {f.kind.value} {entity(f)}: "
                      f"{f.summary}")  # fmt: skip
        for f in r.escalated:
            self.line(r.now, "finding", f"now {f.severity.value.upper()} {f.kind.value} "
                      f"{entity(f)}: {f.summary}")  # fmt: skip
        for f in r.ended:
            lasted = f.last_seen - f.first_seen
            self.line(r.now, "cleared", f"{f.kind.value} {entity(f)} (lasted {lasted:.0f}s)")
        for c in r.changes:
            inc = c.incident
            if c.change is Change.OPENED:
                self.line(r.now, "incident", f"opened {inc.id[:8]} {inc.severity} {inc.kind} "
                          f"{inc.node or inc.job or 'fleet'}")  # fmt: skip
            elif c.change is Change.RESOLVED:
                self.line(r.now, "incident", f"resolved {inc.id[:8]} {inc.kind} "
                          f"{inc.node or inc.job or 'fleet'}")  # fmt: skip
        for a in r.audit:
            self._audit(r.now, a)
        self._heartbeat(r)

    def _audit(self, now: float, a: AuditRecord) -> None:
        ident = (a.action_id or "")[:8]
        d = a.detail
        if a.kind == "decision" and a.action_id:
            playbook = a.message.split(" on ", 1)[0]
            self._playbooks[a.action_id] = playbook
            state = str(d.get("state", ""))
            mode = d.get("mode", "")
            text = f"{ident} {playbook} {a.target}: {state.replace('_', ' ')} ({mode})"
            self.line(now, "action", text + _reasons(d.get("reasons") or ()))
            if state == "awaiting_approval":
                self.line(now, "", f"  approve: gpufleet actions approve {ident} "
                          f"{self.config_hint}".rstrip())  # fmt: skip
        elif a.kind == "decision":
            reasons = d.get("reasons") or ()
            self.line(now, "policy", a.message + _reasons(reasons))
        elif a.kind == "k8s_write":
            if not a.message.startswith("about to"):
                self.line(now, "k8s", f"{ident} {a.message}")
        elif a.kind == "approval":
            self.line(now, "action", f"{ident} {self._name(a)}: {a.message}")
        else:
            self.line(now, "action", f"{ident} {self._name(a)}: {a.message}")

    def _name(self, a: AuditRecord) -> str:
        playbook = self._playbooks.get(a.action_id or "", "")
        return f"{playbook} {a.target}".strip() or a.kind

    def _heartbeat(self, r: CycleReport) -> None:
        if self.heartbeat_every <= 0 or not r.gpus:
            return
        if self._next_beat is None:
            self._next_beat = r.now
        if r.now < self._next_beat:
            return
        self._next_beat = r.now + self.heartbeat_every
        self.line(r.now, "fleet", f"{r.nodes} nodes, {r.gpus} GPUs, {len(r.findings)} "
                  f"finding(s) this cycle, cycle took {r.seconds:.2f}s")  # fmt: skip
