"""The long-lived children of a gpufleet command (Streamlit, a local Prometheus) die with it,
even on `kill -9`: `gpufleet run --embedded` (the demo), `gpufleet dashboard`, `gpufleet eval`.

A normal stop or Ctrl-C ends them in order (`Dashboard.stop` kills Streamlit's process group,
`PrometheusHandle.stop` terminates Prometheus). SIGKILL runs none of that, so each child also
asks Linux for SIGKILL when its parent dies (`prctl(PR_SET_PDEATHSIG)`, in the child between
fork and exec): otherwise Streamlit keeps port 8501 and the next `make demo` or `gpufleet
dashboard` meets a stale dashboard. The kernel's "parent" is the *thread* that forked: a child
started from a worker thread would die when that thread ends, so only the main thread arms it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)
PR_SET_PDEATHSIG = 1
"""From <linux/prctl.h>."""


def _libc_prctl() -> Any | None:
    """libc's prctl, looked up once in the parent (the child only calls it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()


def die_with_this_process() -> Callable[[], None] | None:
    """A `preexec_fn` that ties the child's life to this process (None where it cannot: not
    Linux, or not the main thread; the child then outlives a SIGKILL of this process)."""
    prctl = _PRCTL
    if prctl is None:
        return None
    if threading.current_thread() is not threading.main_thread():
        log.warning("a child started off the main thread does not die with this process")
        return None
    parent, kill = os.getpid(), int(signal.SIGKILL)

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), kill)

    return arm
