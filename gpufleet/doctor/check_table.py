"""The doctor's findings: one row per check, with the fix for each that did not pass.

A `fail` is what would stop the service (no metrics, no Kubernetes API, no store, a Lease it
cannot write): the command exits 1. A `warn` is reduced function (a detector on reduced
evidence, Slack unreachable, a playbook whose verb is not granted): exit 0, read the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""


def table(checks: list[Check]) -> str:
    """The checks as a table, each fix right under its own row, and a count."""
    rows = [("CHECK", "STATUS", "DETAIL")]
    fix_of: dict[int, str] = {}
    for c in checks:
        rows.append((c.name, c.status, " ".join(c.detail.split())))  # one line per row
        if c.fix and c.status in (WARN, FAIL):
            fix_of[len(rows) - 1] = " ".join(c.fix.split())
    w = [max(len(r[i]) for r in rows) for i in range(2)]
    lines = []
    for i, r in enumerate(rows):
        lines.append(f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]}")
        if i in fix_of:
            lines.append(f"{'':<{w[0]}}  {'':<{w[1]}}  fix: {fix_of[i]}")
    fails = sum(c.status == FAIL for c in checks)
    warns = sum(c.status == WARN for c in checks)
    lines.append(f"{len(checks)} checks: {fails} failed, {warns} warnings")
    return "\n".join(lines)
