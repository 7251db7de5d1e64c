"""Times and durations on the command line: unix seconds or RFC 3339; `30`, `15s`, `5m`, `2h`.

Shared by `detect`, `backtest` and `eval`, so a bad value reads the same everywhere and exits 2
through argparse with what was expected. (Not a command: it defines no `register`.)
"""

from __future__ import annotations

import argparse

from observer.fleet.units import parse_duration, parse_time


def parse_time_arg(parser: argparse.ArgumentParser, flag: str, value: str) -> float:
    try:
        return parse_time(value)
    except ValueError as exc:
        parser.error(f"{flag}: expected {exc} (got {value!r})")


def parse_duration_arg(
    parser: argparse.ArgumentParser, flag: str, value: str, allow_zero: bool = False
) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        parser.error(f"{flag}: expected {exc} (got {value!r})")
    if seconds <= 0 and not allow_zero:
        parser.error(f"{flag}: expected a positive duration like '15s' (got {value!r})")
    return seconds
