"""The demo's running commentary: what each live cycle changed, one short line per event.

A person watching `gpufleet demo` should see the product think: a finding episode begins, an
incident opens, the policy decides (and why), an action waits for them or runs, Kubernetes is
written to, the incident resolves. Quiet cycles print nothing except a periodic heartbeat.
Times are scenario time as `+MM:SS` from the scenario start, the notation the banner's timeline
uses. Lines come from `CycleReport`s (gpufleet.live_cycle); actions and Kubernetes writes come
from the journal's audit rows, so approvals made with `gpufleet actions approve` show up too.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from detectors.findings import Finding
from gpufleet.executables import command
from gpufleet.live_cycle import CycleReport
from remediations.incidents import Change, IncidentChange
from remediations.store import AuditRecord

Write = Callable[[str], None]


def print_now(text: str) -> None:
    """print, flushed: the log is read live, often through a pipe (`make demo | tee`)."""
    print(text, flush=True)


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


T = TypeVar("T")


def grouped(items: Iterable[T], key: Callable[[T], Hashable]) -> list[tuple[T, int]]:
    """The first item of each group and the group's size, in first-seen order: eight idle GPUs
    of one node are one line, not eight."""
    out: dict[Hashable, list[Any]] = {}
    for item in items:
        k = key(item)
        if k in out:
            out[k][1] += 1
        else:
            out[k] = [item, 1]
    return [(first, n) for first, n in out.values()]


def _finding_key(f: Finding) -> Hashable:
    return (f.severity, f.kind, f.job, f.node)


def _change_key(c: IncidentChange) -> Hashable:
    i = c.incident
    return (c.change, i.severity, i.kind, i.job, i.node)


def _audit_key(a: AuditRecord) -> Hashable:
    if a.kind == "decision" and not a.action_id:  # notify / deny: the same words, once
        return (a.message, tuple(a.detail.get("reasons") or ()))
    return a.id


def _many(f: Finding, n: int) -> str:
    return entity(f) if n == 1 else f"{' '.join(p for p in (f.job, f.node) if p)} ({n} GPUs)"


def _reasons(reasons: Iterable[object]) -> str:
    text = "; ".join(str(r) for r in reasons if r)
    return f" — {text}" if text else ""


@dataclass
class DemoLog:
    """Turns cycle reports into lines; `write` is print (or a list's append in tests)."""

    origin: float
    """Scenario start (unix seconds): times print as offsets from it."""
    write: Write = print_now
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
        for f, n in grouped(r.started, _finding_key):
            self.line(r.now, "finding", f"{f.severity.value.upper()} {f.kind.value} "
                      f"{_many(f, n)}: {f.summary}")  # fmt: skip
        for f, n in grouped(r.escalated, _finding_key):
            self.line(r.now, "finding", f"now {f.severity.value.upper()} {f.kind.value} "
                      f"{_many(f, n)}: {f.summary}")  # fmt: skip
        for f, n in grouped(r.ended, _finding_key):
            lasted = f.last_seen - f.first_seen
            self.line(r.now, "cleared", f"{f.kind.value} {_many(f, n)} (lasted {lasted:.0f}s)")
        for c, n in grouped(r.changes, _change_key):
            inc = c.incident
            where = inc.job or inc.node or "fleet"
            ids = inc.id[:8] if n == 1 else f"{n} incidents"
            if c.change is Change.OPENED:
                self.line(r.now, "incident", f"opened {ids} {inc.severity} {inc.kind} {where}")
            elif c.change is Change.RESOLVED:
                self.line(r.now, "incident", f"resolved {ids} {inc.kind} {where}")
        for a, n in grouped(r.audit, _audit_key):
            self._audit(r.now, a, n)
        self._heartbeat(r)

    def _audit(self, now: float, a: AuditRecord, n: int = 1) -> None:
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
                self.line(now, "", f"  approve: {command('gpufleet')} actions approve {ident} "
                          f"{self.config_hint}".rstrip())  # fmt: skip
        elif a.kind == "decision":
            reasons = d.get("reasons") or ()
            times = f" (x{n})" if n > 1 else ""
            notify = [str(r) for r in reasons if str(r).endswith(": notify only")]
            if notify:  # a notify rule's finding is told to people; no action was refused
                rule = notify[0].removeprefix("rule ").removesuffix(": notify only")
                self.line(now, "notify", f"{a.target}{times}: rule {rule} tells people; "
                          "nothing is changed in the cluster")  # fmt: skip
            else:
                self.line(now, "policy", a.message + times + _reasons(reasons))
        elif a.kind == "k8s_write":
            if not a.message.startswith("about to"):
                self.line(now, "k8s", f"{ident} {a.message}")
        elif not a.action_id and a.kind in ("leader", "schedule", "control", "breaker"):
            self.line(now, a.kind, a.message)  # the service's own events, not an action's
        else:  # transitions, approvals, resumes: the journal's own words
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
        text = (
            f"{r.nodes} nodes, {r.gpus} GPUs, {len(r.findings)} finding(s) this cycle, "
            f"{r.open_incidents} open incident(s), cycle {r.seconds:.2f}s"
        )
        if r.awaiting_approval:
            gf = command("gpufleet")
            text += f"; {r.awaiting_approval} action(s) await approval: {gf} actions list"
            text += f" {self.config_hint}".rstrip()
        self.line(r.now, "fleet", text)
