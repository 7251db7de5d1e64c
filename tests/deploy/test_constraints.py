"""constraints.txt pins what the tests run with: every dependency pyproject.toml declares has a pin
its specifier accepts, and this venv has exactly the pinned versions (the image's are checked in
test_image.py, which builds it). A failure here means an install drifted from the pins or the
pins from pyproject.toml: `make constraints` re-pins, `make` reinstalls."""

from __future__ import annotations

from importlib import metadata

from packaging.utils import canonicalize_name

from tests.deploy.pins import differences, installed_closure, pins, unmet


def test_every_declared_dependency_is_pinned_within_its_specifier() -> None:
    assert unmet(pins()) == []


def test_every_pin_is_the_version_this_venv_has() -> None:
    venv: dict[str, str] = {
        canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()
    }
    pinned = pins()
    stale = [f"{n}=={v} pinned, installed {venv.get(n, 'nowhere')}" for n, v in pinned.items()
             if venv.get(n) != v]  # fmt: skip
    assert stale == []
    assert differences(installed_closure(), pinned) == []
