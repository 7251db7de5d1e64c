"""The `detectors:` section of the gpufleet config: enable/disable and tune each detector.

The pydantic models are generated from each detector's frozen params dataclass, so a parameter
is declared once (with its default and its physical reason, in the detector module) and the
config accepts exactly those names. Durations (`*_seconds`) accept `90`, `90s`, `5m`, `2h`.
Errors come out through errors.config_files: file, field path, expectation, e.g.
`gpufleet.yaml: detectors.straggler.min_gap: expected a valid number (got 'high')`.

    detectors:
      straggler: {min_gap: 0.12, min_seconds: 4m}
      anomaly: {enabled: true}
      gpu_idle: {enabled: false}
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, create_model

from detectors.base import Detector, DetectorSpec
from detectors.registry import registry
from detectors.suite import DetectorSuite
from errors import ConfigError
from errors.config_files import describe_validation_error, load_yaml_file
from observer.fleet.units import parse_duration

SECTION = "detectors"
Duration = Annotated[float, BeforeValidator(parse_duration)]


def _section_model(spec: DetectorSpec[Any]) -> type[BaseModel]:
    hints = typing.get_type_hints(spec.params_type)
    fields: dict[str, Any] = {"enabled": (bool, spec.enabled_by_default)}
    for f in dataclasses.fields(spec.params_type):
        hint = hints[f.name]
        default = f.default
        if f.name.endswith("_seconds") and hint is float:
            fields[f.name] = (Duration, Field(default=default, ge=0))
        elif hint in (int, float) and isinstance(default, int | float) and default >= 0:
            fields[f.name] = (hint, Field(default=default, ge=0))
        else:
            fields[f.name] = (hint, default)
    model: type[BaseModel] = create_model(
        f"{spec.name}_config",
        __config__=ConfigDict(extra="forbid", frozen=True),
        **fields,
    )
    return model


def config_model() -> type[BaseModel]:
    """The pydantic model of the whole `detectors:` section (one optional entry per detector)."""
    sections: dict[str, Any] = {
        name: (_section_model(spec), None) for name, spec in registry().items()
    }
    sections["episode_grace_cycles"] = (int, Field(default=0, ge=0))
    model: type[BaseModel] = create_model(
        "detectors_config", __config__=ConfigDict(extra="forbid", frozen=True), **sections
    )
    return model


def suite_from_section(section: Any, source: str = "<config>") -> DetectorSuite:
    """Validate a `detectors:` mapping (None: defaults) into a suite, or raise ConfigError."""
    if section is None:
        section = {}
    if not isinstance(section, Mapping):
        raise ConfigError(source, [f"{SECTION}: expected a mapping, got {type(section).__name__}"])
    try:
        cfg = config_model().model_validate(dict(section))
    except ValidationError as exc:
        err = describe_validation_error(source, exc)
        raise ConfigError(source, [f"{SECTION}.{p}" for p in err.problems]) from None
    bound: list[Detector] = []
    for name, spec in registry().items():
        entry = getattr(cfg, name)
        values = entry.model_dump() if entry is not None else {"enabled": spec.enabled_by_default}
        if not values.pop("enabled"):
            continue
        bound.append(Detector(spec, spec.params_type(**values)))
    return DetectorSuite(tuple(bound))


def grace_cycles(section: Mapping[str, Any] | None) -> int:
    return int((section or {}).get("episode_grace_cycles", 0))


def suite_from_file(path: str) -> DetectorSuite:
    """A suite from the `detectors:` section of a YAML config file (the whole file is read)."""
    data = load_yaml_file(path)
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError(path, ["(top level): expected a mapping"])
    return suite_from_section((data or {}).get(SECTION), path)
