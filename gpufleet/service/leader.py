"""Leader election over a Lease: acquire, renew, take over an expired lease, release on exit.

Only the leader runs cycles and scheduled jobs. `is_leader()` is true only while the last
successful renewal is younger than `lease_duration - renew_every` (client-go's renew deadline):
a leader that cannot renew stops acting before any standby may take over, which needs the lease
unrenewed for a full `lease_duration`. Together with the resourceVersion check on every write,
two processes never both believe they lead.

A standby never compares the holder's timestamps with its own clock (clocks of two machines
differ): as client-go's leaderelection does, it notes on its own clock when it last saw the
Lease record change, and takes over only once the record has stayed the same for a full
`lease_duration` of its own time since then.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from errors import GpufleetError
from kube.lease import LeaseState

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
        self._observed: tuple[object, ...] | None = None
        """The Lease record (holder, duration, times, transitions) as last read."""
        self._observed_at = 0.0
        self.last_contact: float | None = None
        """When a read of the Lease last succeeded (this process's clock)."""
        self.holder: str | None = None
        """The holder as last read (None: free, or never read)."""
        """This process's clock when it first read `_observed` (client-go's observedTime)."""
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

    def contact_age(self) -> float | None:
        """Seconds since the Lease was last read (None: never)."""
        return None if self.last_contact is None else self.wall() - self.last_contact

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
            self.last_contact, self.holder = now, (cur.holder if cur is not None else None)
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
            elif cur.holder is None or self._silent_for(cur, now) >= cur.duration:
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

    def _silent_for(self, cur: LeaseState, now: float) -> float:
        """Seconds of this process's clock since it saw the Lease record last change."""
        record = (cur.holder, cur.duration, cur.acquired, cur.renewed, cur.transitions)
        if record != self._observed:
            self._observed, self._observed_at = record, now
        return now - self._observed_at

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
