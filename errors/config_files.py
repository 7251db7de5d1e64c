"""Loading the files people write: YAML + pydantic validation failures -> one ConfigError that
names the file, the field path and the expectation.

Every file a person writes (scenario, config, policy) is loaded through here, so that a typo at
3 a.m. reads like `policy.yaml: rules[2].mode: expected one of 'auto', 'approval', 'notify'`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _expectation(err: Any) -> str:
    msg = str(err.get("msg", "invalid value"))
    kind = str(err.get("type", ""))
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return "unknown field (check its spelling)"
    msg = msg.removeprefix("Value error, ")
    given = err.get("input")
    if kind != "missing" and given is not None and not isinstance(given, dict | list):
        return f"expected {msg[0].lower() + msg[1:]} (got {given!r})"
    return f"expected {msg[0].lower() + msg[1:]}"


def describe_validation_error(source: str, exc: ValidationError) -> ConfigError:
    problems = [f"{_path(tuple(e['loc']))}: {_expectation(e)}" for e in exc.errors()]
    return ConfigError(source, problems)


def load_yaml_file(path: str | Path) -> Any:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(str(p), ["file not found"]) from None
    except OSError as exc:
        raise ConfigError(str(p), [f"cannot read: {exc.strerror}"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            str(p),
            [f"expected UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"],
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(str(p), [f"{where}not valid YAML ({problem})"]) from None


def validate(model: type[M], data: Any, source: str) -> M:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(source, [f"(top level): expected a mapping, got {type(data).__name__}"])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise describe_validation_error(source, exc) from None


def load_model(model: type[M], path: str | Path) -> M:
    """Read a YAML file and validate it into `model`, or raise ConfigError naming what is wrong."""
    return validate(model, load_yaml_file(path), str(path))
