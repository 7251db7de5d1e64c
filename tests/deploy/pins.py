"""constraints.txt read once for the tests that hold the venv and the image to it: the pins, what
pyproject.toml declares, and the packages a `gpufleet[dev]` install pulls in (transitively)."""

from __future__ import annotations

import tomllib
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.rbac_calls import ROOT

CONSTRAINTS = ROOT / "constraints.txt"
NOT_PINNED = {"gpufleet", "pip", "setuptools", "wheel"}
"""The project itself and the installer's own tools: pip freeze leaves them out too."""


def pins() -> dict[str, str]:
    """Canonical name -> the exact version constraints.txt pins."""
    pinned: dict[str, str] = {}
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and version.strip(), f"constraints.txt: not an exact pin: {line!r}"
        pinned[canonicalize_name(name.strip())] = version.strip()
    return pinned


def declared() -> list[Requirement]:
    """pyproject.toml's runtime dependencies and its dev extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    return [Requirement(line) for line in lines]


def unmet(pinned: dict[str, str]) -> list[str]:
    """The declared dependencies that have no pin, or a pin their specifier refuses."""
    problems = []
    for req in declared():
        version = pinned.get(canonicalize_name(req.name))
        if version is None:
            problems.append(f"{req.name}: declared in pyproject.toml, not pinned")
        elif not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req.name}=={version}: outside pyproject.toml's {req}")
    return problems


def installed_closure() -> dict[str, str]:
    """The packages `gpufleet[dev]` pulls in, as installed in this venv: name -> version."""
    found: dict[str, str] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(req, frozenset(req.extras)) for req in declared()]
    while todo:
        req, extras = todo.pop()
        name = canonicalize_name(req.name)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        found[name] = metadata.version(name)
        for line in metadata.requires(name) or []:
            sub = Requirement(line)
            wanted = extras or frozenset({""})
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in wanted):
                todo.append((sub, frozenset(sub.extras)))
    return found


def differences(installed: dict[str, str], pinned: dict[str, str]) -> list[str]:
    """Where an install (the venv's, the image's) differs from the pins."""
    installed = {canonicalize_name(n): v for n, v in installed.items()}
    return [
        f"{name}=={version} installed, pinned {pinned.get(name, 'nowhere')}"
        for name, version in sorted(installed.items())
        if name not in NOT_PINNED and pinned.get(name) != version
    ]
