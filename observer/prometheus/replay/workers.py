"""Raw samples of a range selector: fetched by the client, parsed into arrays, in worker processes.

`fetch_block` is one raw fetch: the body from observer.prometheus.client's `raw`, parsed by
observer.prometheus.replay.matrix.

Parsing a chunk's millions of samples takes about as long as everything else a replay does with
that chunk, and under one interpreter lock the two cannot overlap. So range replays hand each
raw fetch to a child process started as `python -c` that calls `serve`
(no re-import of the caller's `__main__`, unlike multiprocessing's spawn) and read the parsed
arrays back as pickles over its stdout. A worker that dies fails its request as a temporary
query failure; the replay marks that chunk degraded, as for any failed query.

    with WorkerPool(2) as pool:
        block, seen, seconds = pool.fetch(settings, '{__name__=~"A|B"}[65m]', at)
"""

from __future__ import annotations

import os
import pickle
import queue
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from observer.prometheus.client import (
    PrometheusClient,
    QueryFailed,
    QueryRejected,
    QueryTemporary,
    Seen,
)
from observer.prometheus.plan import PromSettings
from observer.prometheus.replay.matrix import MalformedAnswer, RawBlock, parse_matrix

Result = tuple[RawBlock, Seen, float]


def fetch_block(client: PrometheusClient, selector: str, at: float) -> Result:
    """(samples, what the answer held, seconds spent) of `selector` (`x[65m]`) at `at`."""
    began = time.perf_counter()
    body, seen = client.raw(selector, at)
    try:
        block, warnings = parse_matrix(body)
    except MalformedAnswer as exc:
        raise QueryRejected(str(exc), source=client.settings.url) from None
    seen.result_type = "matrix"
    seen.warnings = warnings
    return block, seen, time.perf_counter() - began


_MAIN = (
    "import sys; from observer.prometheus.replay.workers import serve; "
    "serve(sys.stdin.buffer, sys.stdout.buffer)"
)
"""The worker's entry (not `-m`: the package's __init__ imports this module first)."""


class _Worker:
    def __init__(self) -> None:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _MAIN], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env=env,
        )  # fmt: skip

    def call(self, request: tuple[PromSettings, str, float]) -> Result:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            pickle.dump(request, self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()
            ok, payload = pickle.load(self.proc.stdout)
        except (OSError, EOFError, pickle.UnpicklingError) as exc:
            raise QueryTemporary(f"raw sample worker failed: {exc!r}") from None
        if not ok:
            raise payload
        result: Result = payload
        return result

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class WorkerPool:
    """`size` worker processes; `fetch` blocks the calling thread until one has answered."""

    def __init__(self, size: int) -> None:
        self._all = [_Worker() for _ in range(size)]
        self._idle: queue.Queue[_Worker] = queue.Queue()
        for w in self._all:
            self._idle.put(w)

    def fetch(self, s: PromSettings, selector: str, at: float) -> Result:
        worker = self._idle.get()
        try:
            return worker.call((s, selector, at))
        finally:
            self._idle.put(worker)

    def close(self) -> None:
        for w in self._all:
            w.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """The worker's loop: (settings, selector, at) in, (ok, result or QueryFailed) out."""
    clients: dict[PromSettings, PrometheusClient] = {}
    while True:
        try:
            s, selector, at = pickle.load(stdin)
        except EOFError:
            return
        client = clients.get(s) or clients.setdefault(s, PrometheusClient(s))
        answer: tuple[bool, Any]
        try:
            answer = (True, fetch_block(client, selector, at))
        except QueryFailed as exc:
            answer = (False, exc)
        pickle.dump(answer, stdout, protocol=pickle.HIGHEST_PROTOCOL)
        stdout.flush()


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
