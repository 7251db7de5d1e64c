"""The Dockerfile and .dockerignore, read statically (no Docker daemon here): every installed
package is in the build context, the image runs as a non-root user, nothing is written at run
time."""

from __future__ import annotations

import re
import tomllib

from tests.deploy.rbac_calls import ROOT

DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")
IGNORE = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()


TEST_SUPPORT = {"harness"}
"""Installed in the development venv (tests and benchmarks import it), never shipped."""


def packages() -> list[str]:
    """The packages the image ships: every installed one but the test support."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted(p.rstrip("*") for p in include if p.rstrip("*") not in TEST_SUPPORT)


def stages() -> list[str]:
    return re.split(r"(?m)^FROM ", DOCKERFILE)[1:]


def test_every_package_is_copied_and_in_the_context() -> None:
    copied = set(re.findall(r"(?m)^COPY (\w+) \./\1$", DOCKERFILE))
    assert copied == set(packages())
    assert IGNORE[0] != "**" or all(f"!{p}/" in IGNORE for p in packages())
    for needed in ("pyproject.toml", "README.md", "constraints.txt"):
        assert f"!{needed}" in IGNORE and needed in DOCKERFILE


def test_runtime_stage_is_non_root_and_read_only_friendly() -> None:
    final = stages()[-1]
    user = re.findall(r"(?m)^USER (\S+)$", final)
    assert user and user[-1].split(":")[0] not in ("root", "0")
    assert "PYTHONDONTWRITEBYTECODE=1" in final  # no .pyc written beside the code
    assert "compileall" in stages()[0]  # ...because they were compiled at build time
    assert re.search(r"(?m)^ENTRYPOINT \[\"gpufleet\"\]$", final)
    assert "EXPOSE 8080" in final
    # the runtime dependencies (project.dependencies, never the dev extras), then the project
    assert "['project']['dependencies']" in stages()[0] and "pip install --no-deps ." in stages()[0]
    # ...at the versions the tests ran with, as the dev venv installs them
    assert "pip install -c constraints.txt -r /tmp/deps.txt" in stages()[0]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "pip install -q -c constraints.txt -e '.[dev]'" in makefile
    assert re.search(r"(?m)^\$\(STAMP\): pyproject\.toml constraints\.txt$", makefile)
    assert ".[dev]" not in DOCKERFILE and "optional-dependencies" not in DOCKERFILE
    assert not re.search(r"(?im)^(ARG|ENV) .*(TOKEN|SECRET|PASSWORD)", DOCKERFILE)


def test_deployment_runs_the_image_user() -> None:
    deployment = (ROOT / "deploy/base/deployment.yaml").read_text(encoding="utf-8")
    uid = re.findall(r"(?m)^USER (\d+):", stages()[-1])[-1]
    assert f"runAsUser: {uid}" in deployment
