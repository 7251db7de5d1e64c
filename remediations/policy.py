"""The remediation policy a person writes: rules (what to do) and gates (when not to).

Loaded through `errors.config_files`, so a mistake reads `policy.yaml: rules[2].mode: expected
one of 'auto', 'approval', 'notify'`. Playbook parameters are checked against each playbook's own
model at load time. A rule may never act automatically on `monitoring_gap`: missing telemetry is
not evidence of a fault.

`actuation` (top level, and per rule to override it) says whether decisions reach Kubernetes:
`shadow` (the default, also for a file that does not say) decides, gates and journals what
gpufleet would have done and writes nothing; `live` acts. The old `dry_run: true|false` is an
error naming `actuation` (it was read as `actuation: shadow|live` until issue 26).
"""

from __future__ import annotations

import re
from datetime import time
from enum import StrEnum
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from detectors.findings import FindingKind, Severity
from errors import ConfigError
from errors.config_files import describe_validation_error, load_yaml_file, validate
from observer.fleet.units import Duration
from remediations.playbooks import PLAYBOOKS, BaseParams
from remediations.playbooks.replacement import NAME as MARK
from remediations.types import Actuation, Mode

DEFAULT_POLICY = Path(__file__).with_name("policies") / "default.yaml"
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Day(StrEnum):
    MON = "mon"
    TUE = "tue"
    WED = "wed"
    THU = "thu"
    FRI = "fri"
    SAT = "sat"
    SUN = "sun"

    @property
    def weekday(self) -> int:
        return list(Day).index(self)


class Window(_Strict):
    days: list[Day] = Field(default_factory=lambda: list(Day), min_length=1)
    start: str = "00:00"
    end: str = "24:00"
    """End of the window; may be before `start` (wraps past midnight); `24:00` = end of day."""
    timezone: str = "UTC"

    @field_validator("start", "end")
    @classmethod
    def _hhmm(cls, v: str) -> str:
        if v != "24:00" and not _HHMM.match(v):
            raise ValueError("a time of day like '22:00'")
        return v

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("an IANA time zone like 'Europe/Berlin'") from None
        return v

    def minutes(self) -> tuple[int, int]:
        def m(s: str) -> int:
            return 1440 if s == "24:00" else int(s[:2]) * 60 + int(s[3:])

        return m(self.start), m(self.end)

    def start_time(self) -> time:
        return time(0, 0) if self.start == "24:00" else time.fromisoformat(self.start)


class MaintenanceWindows(_Strict):
    applies_to: list[str] = Field(
        default_factory=lambda: ["drain", "restart_job", "migrate", "request_reboot", "reboot_node"]
    )
    """Playbooks that may run automatically only inside a window (empty list of windows: any
    time)."""
    windows: list[Window] = Field(default_factory=list)

    @field_validator("applies_to")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        for name in v:
            if name not in PLAYBOOKS:
                raise ValueError(f"playbook names from {sorted(PLAYBOOKS)}, not {name!r}")
        return v


class Protected(_Strict):
    namespaces: list[str] = Field(default_factory=lambda: ["kube-system"])
    """Glob patterns; pods there are never restarted, migrated or evicted by gpufleet."""
    node_labels: dict[str, str] = Field(default_factory=lambda: {"gpufleet.io/protected": "true"})
    priority_classes: list[str] = Field(
        default_factory=lambda: ["system-node-critical", "system-cluster-critical"]
    )

    def namespace(self, ns: str) -> bool:
        return any(fnmatchcase(ns, pat) for pat in self.namespaces)


class BlastRadius(_Strict):
    max_nodes: int = Field(default=2, ge=0)
    """Most GPU nodes unavailable (cordoned, draining, quarantined) at once."""
    max_percent_of_pool: float = Field(default=10.0, ge=0, le=100)
    """...and as a share of the pool's GPU nodes (the denominator counts GPU nodes only)."""


class Rate(_Strict):
    max_actions_per_hour: int = Field(default=20, ge=0)


class Attempts(_Strict):
    cooldown: Duration = 1800.0
    """Minimum time between two actions on the same target (after a failed one: from its end,
    the retry's backoff)."""
    max_attempts: int = Field(default=3, ge=1)
    window: Duration = 86400.0
    """Attempts are counted within this window; past the limit a person is asked."""
    backoff: Literal["fixed", "exponential"] = "fixed"
    """`exponential`: after the n-th attempt in the window the next waits cooldown x 2^(n-1)
    (a flapping fault is retried ever more slowly), at most `max_cooldown`."""
    max_cooldown: Duration = 21600.0
    """The cap of the exponential backoff; never below `cooldown`."""

    @field_validator("max_cooldown")
    @classmethod
    def _cap(cls, v: float, info: ValidationInfo) -> float:
        cooldown = info.data.get("cooldown")
        if cooldown is not None and v < cooldown:
            raise ValueError(f"a duration no shorter than cooldown ({cooldown:g}s), not {v:g}s")
        return v

    def wait_after(self, attempts: int) -> float:
        """The cooldown after `attempts` attempts within the window."""
        if self.backoff == "fixed" or attempts <= 1:
            return self.cooldown
        return min(self.cooldown * 2.0 ** min(attempts - 1, 62), self.max_cooldown)


class Breaker(_Strict):
    threshold_percent: float = Field(default=50.0, gt=0, le=100)
    window: Duration = 300.0
    min_nodes: int = Field(default=3, ge=1)
    """Never trip on fewer affected GPU nodes than this (a 2-node fleet with one fault)."""


class Gates(_Strict):
    pool_label: str = "gpufleet.io/pool"
    stale_after: Duration = 300.0
    """A finding last seen longer ago than this never triggers an action (replays, #1280)."""
    protected: Protected = Field(default_factory=Protected)
    blast_radius: BlastRadius = Field(default_factory=BlastRadius)
    rate: Rate = Field(default_factory=Rate)
    attempts: Attempts = Field(default_factory=Attempts)
    breaker: Breaker = Field(default_factory=Breaker)
    maintenance: MaintenanceWindows = Field(default_factory=MaintenanceWindows)
    approval_timeout: Duration = 86400.0
    """Awaiting approval longer than this: the action expires."""
    return_quiet: Duration = 90.0
    """A GPU or node goes back to service only once its fault's own signals (the XID, DBE and
    remapped-row counters, pending remaps: whatever its hardware findings read) have been quiet
    this long: three cycles at the default 30 s interval (remediations.validation)."""
    lemon_repeats: int = Field(default=2, ge=1)
    """Faults that come back within `lemon_window` of a repair before a GPU or node is a lemon:
    marked for replacement instead of repaired or returned again (remediations.repeats)."""
    lemon_window: Duration = 7 * 86400.0


class Match(_Strict):
    kinds: list[FindingKind] = Field(default_factory=list)
    severities: list[Severity] = Field(default_factory=list)
    node_pools: list[str] = Field(default_factory=list)
    node_labels: dict[str, str] = Field(default_factory=dict)
    namespaces: list[str] = Field(default_factory=list)
    """Glob patterns on the namespace of the incident's job."""


class Rule(_Strict):
    name: str = Field(min_length=1, max_length=128)
    match: Match = Field(default_factory=Match)
    playbook: str
    mode: Mode
    params: dict[str, Any] = Field(default_factory=dict)
    actuation: Actuation | None = None
    """`shadow` or `live` for this rule only; unset: the policy's top-level `actuation`."""

    @field_validator("playbook")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in PLAYBOOKS or v == MARK:  # a mark follows a failed diagnostic, never a rule
            raise ValueError(f"one of {', '.join(sorted(p for p in PLAYBOOKS if p != MARK))}")
        return v


class IntakeAllow(_Strict):
    """Alerts that Alertmanager's webhook delivers may become findings of these kinds at
    these severities (both listed explicitly)."""

    kinds: list[FindingKind] = Field(min_length=1)
    severities: list[Severity] = Field(min_length=1)


class Intake(_Strict):
    """What findings alerts from outside gpufleet (the Alertmanager webhook) may become, and
    their own budget: they count toward a breaker and a blast radius of their own, so a flood
    of alerts cannot use up what the detectors' findings need (nor trip their breaker).
    Nothing listed: every alert is an info anomaly (reported, never a reason to act)."""

    allow: list[IntakeAllow] = Field(default_factory=list)
    blast_radius: BlastRadius = Field(
        default_factory=lambda: BlastRadius(max_nodes=1, max_percent_of_pool=10.0)
    )
    """Most GPU nodes that actions on alert-derived incidents hold unavailable at once."""
    breaker: Breaker = Field(default_factory=Breaker)
    """Alert-derived hardware faults on more than this share of GPU nodes within the window
    stop every action on alert-derived incidents (while the window holds them)."""

    def allows(self, kind: FindingKind, severity: Severity) -> bool:
        return any(kind in a.kinds and severity in a.severities for a in self.allow)


class Hysteresis(_Strict):
    open_after: int = Field(default=2, ge=1)
    resolve_after: int = Field(default=3, ge=1)


class Policy(_Strict):
    version: int = Field(default=1, ge=1, le=1)
    actuation: Actuation = Actuation.SHADOW
    """`shadow` (default): decide and journal what would be done, write nothing to Kubernetes;
    `live`: act. A rule's own `actuation` overrides this."""
    hysteresis: Hysteresis = Field(default_factory=Hysteresis)
    gates: Gates = Field(default_factory=Gates)
    intake: Intake = Field(default_factory=Intake)
    """Which kinds and severities Alertmanager alerts may become (none by default)."""
    rules: list[Rule] = Field(default_factory=list)

    def rule_params(self, index: int) -> BaseParams:
        rule = self.rules[index]
        return PLAYBOOKS[rule.playbook].params(rule.params)

    def actuation_of(self, rule: Rule | None) -> Actuation:
        """The rule's own `actuation`, else the policy's (None: an action no rule decided, such
        as a scheduled job's)."""
        if rule is not None and rule.actuation is not None:
            return rule.actuation
        return self.actuation

    def rule_named(self, name: str) -> Rule | None:
        return next((r for r in self.rules if r.name == name), None)

    @property
    def live_anywhere(self) -> bool:
        """Whether any rule may write to Kubernetes at all."""
        return self.actuation is Actuation.LIVE or any(
            r.actuation is Actuation.LIVE for r in self.rules
        )


def _check(policy: Policy, source: str) -> Policy:
    problems: list[str] = []
    for i, rule in enumerate(policy.rules):
        try:
            PLAYBOOKS[rule.playbook].params(rule.params)
        except ValidationError as exc:
            for p in describe_validation_error(source, exc).problems:
                problems.append(f"rules[{i}].params.{p}")
        gap = not rule.match.kinds or FindingKind.MONITORING_GAP in rule.match.kinds
        if gap and rule.mode is not Mode.NOTIFY:
            problems.append(
                f"rules[{i}].mode: expected 'notify' for a rule that can match "
                "monitoring_gap (missing telemetry is never evidence; list `match.kinds`) "
                f"(got {rule.mode.value!r})"
            )
    if problems:
        raise ConfigError(source, problems)
    return policy


_ACTUATIONS = " or ".join(repr(a.value) for a in Actuation)


def _refuse_dry_run(data: Any, source: str) -> Any:
    """`dry_run` (before `actuation`) is an error naming `actuation` and the value it meant:
    read silently, a forgotten `dry_run: true` would no longer keep gpufleet in shadow."""
    if not isinstance(data, dict) or "dry_run" not in data:
        return data
    dry = data["dry_run"]
    meant = (
        {True: "`actuation: shadow`", False: "`actuation: live`"}.get(dry)
        if isinstance(dry, bool)
        else None
    )
    instead = f"write {meant}" if meant is not None else f"write `actuation: {_ACTUATIONS}`"
    raise ConfigError(
        source, [f"dry_run: removed; expected `actuation` instead ({instead}) (got {dry!r})"]
    )


def load_policy(path: str | Path | None = None) -> Policy:
    """The policy at `path`, or the conservative default shipped with gpufleet."""
    p = Path(path) if path is not None else DEFAULT_POLICY
    return policy_from_dict(load_yaml_file(p), str(p))


def policy_from_dict(data: Any, source: str = "<policy>") -> Policy:
    return _check(validate(Policy, _refuse_dry_run(data, source), source), source)
