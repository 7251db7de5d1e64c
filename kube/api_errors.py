"""A Kubernetes client error in the runner's vocabulary: temporary (try again) or permanent."""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from errors import PermanentError, TemporaryError


def api_error(exc: Exception, what: str) -> Exception:
    """Conflicts, throttling, server errors and transport failures pass; other refusals
    (forbidden, invalid, not found where it must exist) do not."""
    if isinstance(exc, ApiException):
        if exc.status in (None, 0, 409, 429) or (exc.status or 0) >= 500:
            return TemporaryError(f"{what}: HTTP {exc.status} {exc.reason}")
        return PermanentError(f"{what}: HTTP {exc.status} {exc.reason}")
    return TemporaryError(f"{what}: {exc}")
