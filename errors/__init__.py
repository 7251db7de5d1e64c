"""The one error vocabulary of every layer: temporary, permanent and config errors.

In the spirit of kopf's `TemporaryError`/`PermanentError`: whoever catches an error needs to know
one thing first, whether trying again later can help. A `TemporaryError` says when to try again
(`delay`, seconds); a `PermanentError` says what a person must fix (`hint`). A `ConfigError` is the
permanent error of a file a person wrote: it names the file, the field path and the expectation,
and the CLI exits with code 2 on it. Collectors, the actuator, the Slack and Alertmanager sinks
and the service all raise these, so a caller never needs to know which layer failed to decide
whether to retry.
"""

from __future__ import annotations

DEFAULT_DELAY = 30.0
"""Seconds before a retry when the failing side did not say (no Retry-After)."""


class GpufleetError(Exception):
    """Base of every error gpufleet raises on purpose. `source` names what failed (a URL, a
    file, an API), `hint` the next step for a person (shown by the CLI and in logs)."""

    temporary: bool = False

    def __init__(self, message: str, *, source: str = "", hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.source = source
        self.hint = hint

    def render(self) -> str:
        kind = "temporary" if self.temporary else "permanent"
        text = f"{self.message} ({kind})"
        return f"{text}; {self.hint}" if self.hint else text

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only constructors do not pickle by default; errors cross process boundaries
        # (the replay's fetch workers), so rebuild them from their state.
        return _rebuild, (type(self), self.__dict__.copy(), self.args)


def _rebuild(
    cls: type[GpufleetError], state: dict[str, object], args: tuple[object, ...]
) -> object:
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class TemporaryError(GpufleetError):
    """Trying again later may help (server down, timing out, overloaded, a PDB still blocking):
    `delay` is how long to wait first."""

    temporary = True

    def __init__(
        self, message: str, *, delay: float = DEFAULT_DELAY, source: str = "", hint: str = ""
    ) -> None:
        super().__init__(message, source=source, hint=hint)
        self.delay = delay


class PermanentError(GpufleetError):
    """Trying again cannot help until a person acts (wrong URL, forbidden, a rejected query, an
    action whose timeout is exhausted): `hint` says what to fix."""


class ConfigError(PermanentError):
    """A file a person wrote is wrong: one line per problem, `file: field.path: expectation`."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(f"{source}: {p}" for p in problems), source=source)

    def render(self) -> str:
        return self.message


__all__ = ["DEFAULT_DELAY", "ConfigError", "GpufleetError", "PermanentError", "TemporaryError"]
