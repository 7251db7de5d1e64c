"""Durations and times as people write them in every file and flag gpufleet reads.

`30s`, `5m`, `2h` for durations; unix seconds or RFC 3339 for times. Scenarios, policies,
detector configs and the CLI share these, so one spelling works everywhere.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BeforeValidator

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """`90`, `90s`, `1.5m`, `2h`, `1d` -> seconds."""
    if isinstance(value, bool):
        raise ValueError("a duration like '30s', '5m' or '2h'")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a non-negative duration")
        return float(value)
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            return float(m.group(1)) * _UNIT[m.group(2)]
    raise ValueError("a duration like '30s', '5m' or '2h'")


Duration = Annotated[float, BeforeValidator(parse_duration)]


def parse_time(value: Any) -> float:
    """Unix seconds or RFC 3339 -> unix seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, datetime):
        dt = value if value.tzinfo else value.replace(tzinfo=UTC)
        return dt.timestamp()
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError("unix seconds or an RFC 3339 time like 2026-01-01T00:00:00Z") from None
        return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()
    raise ValueError("unix seconds or an RFC 3339 time like 2026-01-01T00:00:00Z")


Timestamp = Annotated[float, BeforeValidator(parse_time)]
