"""`gpufleet run --embedded` (what `make demo` runs) as a child process on free ports: its stdout
read line by line in a thread, waits on what it prints, and a stop by the pid the test started."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

GPUFLEET = Path(sys.executable).parent / "gpufleet"


def reader(out: object, seen: list[str]) -> threading.Thread:
    def read() -> None:
        for line in out:  # type: ignore[attr-defined]
            seen.append(line)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def wait_for(seen: list[str], needle: str, proc: subprocess.Popen[str], timeout: float) -> str:
    """All output so far once `needle` is in it (AssertionError with the output if not)."""
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            if needle in "".join(seen) or proc.poll() is not None:
                done.set()
            done.wait(0.2)

    threading.Thread(target=poll, daemon=True).start()
    done.wait(timeout)
    text = "".join(seen)
    assert needle in text, text
    return text


class Demo:
    """The embedded demo in `tmp` (its journal in tmp/wd, kubeconfig tmp/kc)."""

    def __init__(self, tmp: Path, *extra: str) -> None:
        self.workdir, self.kubeconfig = tmp / "wd", tmp / "kc"
        cmd = [str(GPUFLEET), "run", "--embedded", "--metrics-port", "0", "--k8s-port", "0",
               "--dashboard-port", "0", "--workdir", str(self.workdir),
               "--kubeconfig-out", str(self.kubeconfig), *extra]  # fmt: skip
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp,
            env=self.env,
        )  # fmt: skip
        self.seen: list[str] = []
        reader(self.proc.stdout, self.seen)

    def wait_for(self, needle: str, timeout: float) -> str:
        return wait_for(self.seen, needle, self.proc, timeout)

    def find(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first match of `pattern` in the output, waiting for it up to `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, "".join(self.seen))
            if m is not None:
                return m
            if self.proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        raise AssertionError(f"{pattern!r} not printed: {''.join(self.seen)}")

    @property
    def store_url(self) -> str:
        return f"sqlite:///{self.workdir / 'demo.db'}"

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
