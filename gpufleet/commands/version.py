"""`gpufleet version`: the version and the libraries it runs on."""

from __future__ import annotations

import argparse
from importlib import metadata
from typing import Any

from gpufleet import __version__

LIBRARIES = (
    "prometheus-api-client",
    "opentelemetry-sdk",
    "scikit-learn",
    "apscheduler",
    "kubernetes",
    "slack-sdk",
    "streamlit",
    "numpy",
)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "version",
        help="print the gpufleet version and its key libraries",
        description="Print the gpufleet version and the versions of the libraries it uses.",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(f"gpufleet {__version__}")
    for lib in LIBRARIES:
        try:
            print(f"  {lib} {metadata.version(lib)}")
        except metadata.PackageNotFoundError:
            print(f"  {lib} (not installed)")
    return 0
