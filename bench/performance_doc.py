"""docs/performance.md upkeep: the machine header and one `##` section per benchmark.

Benchmarks run at different times (and by different people), so each section is replaced on its
own, between `<!-- bench:NAME -->` markers, and carries its own date and machine line; the header
describes the machine of the latest run. Also the small helpers every benchmark needs: machine
facts, medians, a markdown table.
"""

from __future__ import annotations

import cProfile
import io
import os
import platform
import pstats
import re
import statistics
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parent.parent / "docs" / "performance.md"

_HEADER = """# Performance

Figures from `make bench` (`python -m bench`; one benchmark: `python -m bench NAME`, e.g.
`python -m bench snapshot_build`). Each benchmark rewrites only its own section below.

Latest run's machine: {machine}.

Timings are medians of repeated runs measured with `time.perf_counter`; input generation is never
inside the timed region. The development machine is shared (several jobs run on its 2 cores), so
single figures are noisy: each section states the load average when it was measured.

The machine behind the figures changes between sessions, and it matters: the same code and data
ran about 2.5x slower on the Intel Xeon of earlier sessions than on the AMD EPYC of 2026-11-30.
The 24 h x 1k-GPU backtest took 72 s (median of 3) on the Xeon at 6287e97 and 27.2 s on the
EPYC (one replay of the same TSDB through `backtesting.backtest.backtest`, outside `make bench`);
the 10k-GPU Prometheus cycle took 3.13 s on the Xeon and 1.59 s on the EPYC at 6287e97 (`python
-m bench prom_collect` on an export of that commit), before warm cycles stopped asking
`increase()`. Each section names its CPU; compare figures only
within one machine, and prefer the CPU seconds columns, which depend less than wall time on what
else was running.
"""


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def machine() -> str:
    """`2 cores, 24 GiB, Intel(R) Xeon(R) Processor, Debian 12.11, Python 3.11.7`."""
    cpu = re.search(r"^model name\s*:\s*(.+)$", _read("/proc/cpuinfo"), re.M)
    mem = re.search(r"^MemTotal:\s*(\d+) kB", _read("/proc/meminfo"), re.M)
    gib = round(int(mem.group(1)) / 2**20) if mem else 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    debian = _read("/etc/debian_version").strip()
    os_name = f"Debian {debian}" if debian else platform.platform()
    model = cpu.group(1).strip() if cpu else platform.processor()
    return f"{cores} cores, {gib} GiB, {model}, {os_name}, Python {platform.python_version()}"


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def stamp() -> str:
    """The line under a section title: when, where, how loaded."""
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"_Measured {when} on {machine()}; load average (1/5/15 min) {load_average()}._"


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def own_time(fn: Callable[..., Any], *args: Any, top: int = 12) -> str:
    """Where one call of `fn(*args)` spends its time: cProfile's functions by own time, as
    `name (dir/file.py:line) N ms (P %); ...`."""
    prof = cProfile.Profile()
    prof.runcall(fn, *args)
    stats = pstats.Stats(prof, stream=io.StringIO())
    total = max(float(getattr(stats, "total_tt", 0.0)), 1e-9)
    rows = []
    entries = getattr(stats, "stats", {})
    for (path, line, func), (_cc, _nc, tt, _ct, _callers) in sorted(
        entries.items(), key=lambda kv: -kv[1][2]
    )[:top]:
        where = (
            f"{path.rsplit('/', 2)[-2]}/{path.rsplit('/', 1)[-1]}:{line}" if "/" in path else path
        )
        rows.append(f"{func} ({where}) {tt * 1000:.0f} ms ({100 * tt / total:.0f} %)")
    return "; ".join(rows)


def missed_by(value: float, target: float, unit: str, digits: int = 0) -> str:
    """`met`, or `NOT met, by 290 ms (3.9x)`: what `make bench` says of a target (<=)."""
    if value <= target:
        return "met"
    return f"NOT met, by {value - target:.{digits}f} {unit} ({value / target:.1f}x)"


def write_section(name: str, title: str, body: str, doc: Path = DOC) -> None:
    """Replace (or append) the benchmark's section and refresh the header's machine line."""
    text = doc.read_text() if doc.exists() else ""
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    section = f"{start}\n## {title}\n\n{body.strip()}\n{end}"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        after = rest.split(end, 1)[1]
        text = before + section + after
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + section + "\n"
    head = _HEADER.format(machine=machine())
    body_start = text.find("<!-- bench:")
    text = head + "\n" + text[body_start:] if body_start >= 0 else head
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text if text.endswith("\n") else text + "\n")
