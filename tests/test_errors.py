"""The one error vocabulary: what a caller reads off an error, and that errors cross processes."""

from __future__ import annotations

import pickle

import pytest

from errors import ConfigError, GpufleetError, PermanentError, TemporaryError


def test_temporary_error_says_when_to_retry_and_renders_its_hint() -> None:
    err = TemporaryError("Prometheus is unreachable", delay=12.5, source="http://p", hint="retry")
    assert err.temporary and err.delay == 12.5 and err.source == "http://p"
    assert err.render() == "Prometheus is unreachable (temporary); retry"


def test_permanent_and_config_errors_are_not_retried() -> None:
    perm = PermanentError("forbidden", hint="grant the verb")
    conf = ConfigError("policy.yaml", ["rules[0].mode: expected one of 'auto'", "gates: unknown"])
    assert not perm.temporary and not conf.temporary
    assert isinstance(conf, PermanentError) and isinstance(conf, GpufleetError)
    assert conf.render().splitlines() == [
        "policy.yaml: rules[0].mode: expected one of 'auto'",
        "policy.yaml: gates: unknown",
    ]
    assert conf.source == "policy.yaml" and len(conf.problems) == 2


@pytest.mark.parametrize(
    "err",
    [
        TemporaryError("down", delay=3.0, source="s", hint="h"),
        PermanentError("bad", hint="fix it"),
        ConfigError("f.yaml", ["a: b"]),
    ],
)
def test_errors_survive_pickling_with_their_state(err: GpufleetError) -> None:
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert back.__dict__ == err.__dict__ and str(back) == str(err)
