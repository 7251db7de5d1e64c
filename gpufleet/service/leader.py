"""Leader election over a Lease: acquire, renew, take over an expired lease, release on exit.

Only the leader runs cycles and scheduled jobs. `is_leader()` is true only while the last
successful renewal is younger than `lease_duration - renew_every` (client-go's renew deadline):
a leader that cannot renew stops acting before any standby may take over, which needs the lease
unrenewed for a full `lease_duration`. Together with the resourceVersion check on every write,
two processes never both believe they lead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from errors import GpufleetError
from gpufleet.service.kube_lease import LeaseState

log = logging.getLogger(__name__)


class LeaseClient(Protocol):
    def get(self) -> LeaseState | None: ...

    def create(self, s: LeaseState) -> LeaseState | None: ...

    def replace(self, s: LeaseState) -> LeaseState | None: ...


class LeaderElector:
    def __init__(
        self,
        lease: LeaseClient,
        identity: str,
        *,
        lease_duration: float,
        renew_every: float,
        wall: Callable[[], float] = time.time,
        on_change: Callable[[bool], None] = lambda leading: None,
    ) -> None:
        self.lease = lease
        self.identity = identity
        self.duration = lease_duration
        self.renew_every = renew_every
        self.wall = wall
        self.on_change = on_change
        self._renewed_at: float | None = None
        self._leading = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # ---- state -------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        with self._lock:
            if not self._leading or self._renewed_at is None:
                return False
            return self.wall() - self._renewed_at < self.duration - self.renew_every

    def _set(self, leading: bool, renewed: float | None) -> None:
        with self._lock:
            was = self._leading
            self._leading = leading
            self._renewed_at = renewed if leading else None
        if was != leading:
            log.warning("%s %s leadership", self.identity, "acquired" if leading else "lost")
            self.on_change(leading)

    # ---- one attempt -------------------------------------------------------------------------

    def try_once(self) -> bool:
        """Acquire or renew once; True when this process holds the lease now."""
        now = self.wall()
        try:
            cur = self.lease.get()
            got: LeaseState | None
            if cur is None:
                got = self.lease.create(LeaseState(self.identity, self.duration, now, now, 0))
            elif cur.holder == self.identity:
                got = self.lease.replace(
                    LeaseState(
                        self.identity,
                        self.duration,
                        cur.acquired or now,
                        now,
                        cur.transitions,
                        cur.resource_version,
                    )
                )
            elif cur.holder is None or (cur.renewed or 0.0) + cur.duration < now:
                got = self.lease.replace(
                    LeaseState(
                        self.identity,
                        self.duration,
                        now,
                        now,
                        cur.transitions + 1,
                        cur.resource_version,
                    )
                )
            else:
                got = None
        except GpufleetError as exc:
            log.warning("lease: %s", exc)
            got = None
            if self._leading and self.is_leader():
                return True  # keep leading until the renew deadline; next try may work
        self._set(got is not None, now if got is not None else None)
        return got is not None

    def release(self) -> None:
        """Give the lease up at once (a standby need not wait for it to expire)."""
        self._set(False, None)
        try:
            cur = self.lease.get()
            if cur is not None and cur.holder == self.identity:
                now = self.wall()
                self.lease.replace(
                    LeaseState(None, 1.0, cur.acquired, now, cur.transitions, cur.resource_version)
                )
                log.info("%s released the lease", self.identity)
        except GpufleetError as exc:
            log.warning("lease release failed (it expires by itself): %s", exc)

    # ---- background loop ---------------------------------------------------------------------

    def start(self) -> LeaderElector:
        self.try_once()
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.renew_every):
            self.try_once()

    def stop(self, release: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.renew_every + 5)
        if release:
            self.release()
