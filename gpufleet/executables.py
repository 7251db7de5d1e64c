"""How to type one of this install's commands in another terminal, so printed hints work as
printed: the bare name when the shell finds this very install, else the path of the one next to
this Python (`.venv/bin/gpufleet` from the checkout, without activating `.venv`)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def command(name: str) -> str:
    exe = Path(sys.executable).parent / name
    found = shutil.which(name)
    if not exe.exists() or (found is not None and Path(found).resolve() == exe.resolve()):
        return name
    try:
        return str(exe.relative_to(Path.cwd()))
    except ValueError:
        return str(exe)
