"""A backfilled benchmark TSDB kept between runs, keyed by everything that determines its data.

Writing and backfilling 24 h of 1k GPUs takes minutes before every timed run; the data only
changes when the simulator, the scenario or the window does. The key hashes the source files
the OpenMetrics writer's output depends on (the simulator, the fleet model and catalog it
reads, the PromQL counter rule, the bench scenario) with the build's parameters, so a changed
simulator builds a new TSDB instead of replaying stale data. Each run gets its own copy: a
running Prometheus writes into its data directory (WAL, compactions), and the kept one must
stay as it was built.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gpufleet" / "bench-tsdb"
SOURCES = ("simulator", "observer/fleet", "observer/promql.py",
           "observer/snapshot/job_identity.py", "bench/prom_collect.py")  # fmt: skip
"""What the simulated window depends on, relative to the repository."""


def source_files(sources: Iterable[str] = SOURCES, root: Path = ROOT) -> list[Path]:
    files: list[Path] = []
    for s in sources:
        p = root / s
        files.extend(sorted(p.rglob("*.py")) if p.is_dir() else [p])
    return files


def cache_key(params: dict[str, Any], sources: Iterable[str] = SOURCES, root: Path = ROOT) -> str:
    """Hash of the build parameters and the source files' paths and contents."""
    h = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
    for f in source_files(sources, root):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:24]


def cached_tsdb(
    params: dict[str, Any],
    build: Callable[[Path], dict[str, Any]],
    into: Path,
    cache: Path = CACHE,
    sources: Iterable[str] = SOURCES,
    root: Path = ROOT,
) -> tuple[Path, dict[str, Any]]:
    """A fresh copy under `into` of the TSDB for `params`, and what `build` reported when it
    made it (plus `reused`, `build_seconds`). `build(data_dir)` backfills into `data_dir` and
    returns a JSON-able summary; it runs only when no TSDB for this key is kept yet."""
    entry = cache / cache_key(params, sources, root)
    meta_path = entry / "meta.json"
    reused = meta_path.exists()
    if not reused:
        building = cache / f".{entry.name}.{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        began = time.perf_counter()
        try:
            meta = dict(build(building / "data"))
        except BaseException:  # a failed or interrupted build is never kept
            shutil.rmtree(building, ignore_errors=True)
            raise
        meta["build_seconds"] = time.perf_counter() - began
        meta["params"] = params
        (building / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            building.rename(entry)
        except OSError:  # another run kept the same key first: use that one
            shutil.rmtree(building, ignore_errors=True)
    meta = json.loads(meta_path.read_text())
    meta["reused"] = reused
    data = into / "data"
    shutil.copytree(entry / "data", data)
    return data, meta
