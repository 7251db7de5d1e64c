"""`python -m bench [NAME ...]`: run every benchmark (or the named ones) and record the figures.

A benchmark is a module in this package that defines `TITLE: str` and
`run(runs: int, quick: bool) -> str`, returning its markdown section body (a table and notes).
The harness prints each body and, unless `--no-write`, replaces that benchmark's section of
docs/performance.md. Modules without `run` (input generators, this runner) are skipped.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path
from types import ModuleType

import bench
from bench.performance_doc import DOC, write_section


def module_names() -> list[str]:
    return sorted(
        i.name
        for i in pkgutil.iter_modules(bench.__path__)
        if not i.name.startswith("_") and i.name != "performance_doc"
    )


def discover(names: list[str] | None = None) -> tuple[dict[str, ModuleType], list[str]]:
    """Benchmark modules by name (all, or the named ones); a module that fails to import is
    reported on stderr and skipped, so one broken benchmark does not stop the others."""
    found: dict[str, ModuleType] = {}
    failed: list[str] = []
    for name in names or module_names():
        try:
            module = importlib.import_module(f"bench.{name}")
        except Exception as exc:  # any import failure: report it, go on
            print(f"!! bench.{name} failed to import: {exc!r}", file=sys.stderr)
            failed.append(name)
            continue
        if callable(getattr(module, "run", None)) and isinstance(
            getattr(module, "TITLE", None), str
        ):
            found[name] = module
    return found, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"benchmarks (default all: {module_names()})")
    parser.add_argument("--runs", type=int, default=7, help="timed runs per case (>= 5; default 7)")
    parser.add_argument("--quick", action="store_true", help="smaller cases, for a smoke test")
    parser.add_argument("--no-write", action="store_true", help="print only; leave the doc alone")
    parser.add_argument("--doc", type=Path, default=DOC, help=f"document to update ({DOC.name})")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in module_names()]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; available: {module_names()}")
    if args.runs < 5 and not args.quick:
        parser.error("--runs must be at least 5 (medians of fewer runs are not recorded)")
    available, failed = discover(args.names or None)
    for name, module in available.items():
        print(f"== {name}: {module.TITLE}", flush=True)
        body: str = module.run(runs=args.runs, quick=args.quick)
        print(body, flush=True)
        if not args.no_write and not args.quick:
            write_section(name, module.TITLE, body, args.doc)
            print(f"-> {args.doc}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
