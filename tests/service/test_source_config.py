"""`service.source:` and `gpufleet run --check-config`: a good file validates without starting
anything; each mistake exits 2 naming the file, the field path and what was expected; no secret
can sit in the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.cli import main
from gpufleet.config import load_config
from gpufleet.service.sources import source_settings
from observer.prometheus.plan import PromSettings

GOOD = """
cluster: gpu-east
store_url: sqlite:///{tmp}/never-created.db
service:
  source:
    prometheus:
      url: http://vmselect.monitoring:8481/select/0/prometheus
      timeout: 20s
      bearer_token_file: /var/run/secrets/kubernetes.io/serviceaccount/token
      headers: {{X-Scope-OrgID: gpu-team}}
      tls: {{ca_file: /etc/gpufleet/ca.pem}}
"""


def _check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    f = tmp_path / "gpufleet.yaml"
    f.write_text(text)
    rc = main(["run", "--check-config", "--config", str(f)])
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_check_config_validates_without_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out = _check(tmp_path, GOOD.format(tmp=tmp_path), capsys)
    assert rc == 0, out
    assert "valid" in out and "prometheus" in out
    assert not (tmp_path / "never-created.db").exists()  # nothing opened


def test_the_prometheus_section_becomes_the_collectors_settings(tmp_path: Path) -> None:
    f = tmp_path / "gpufleet.yaml"
    f.write_text(
        GOOD.format(tmp=tmp_path).replace(
            "bearer_token_file: /var/run/secrets/kubernetes.io/serviceaccount/token",
            "basic_auth: {username: reader}",
        )
    )
    cfg, _ = load_config(f, environ={"PROMETHEUS_PASSWORD": "pw-from-env"})
    s = source_settings(cfg.service.source, cfg.cluster)
    assert isinstance(s, PromSettings)
    assert s.url.endswith("/select/0/prometheus") and s.timeout == 20.0
    assert s.headers == (("X-Scope-OrgID", "gpu-team"),)
    assert (s.auth.username, s.auth.password) == ("reader", "pw-from-env")
    assert s.auth.ca_file == "/etc/gpufleet/ca.pem" and s.cluster == "gpu-east"
    assert "pw-from-env" not in repr(s) and "pw-from-env" not in repr(cfg)


@pytest.mark.parametrize(
    ("old", "new", "where", "expected"),
    [
        ("url: http://vmselect", "url: vmselect", "service.source.prometheus.url", "http://"),
        ("timeout: 20s", "timeout: soon", "service.source.prometheus.timeout", "duration"),
        (
            "{X-Scope-OrgID: gpu-team}",
            "{Authorization: Bearer abc}",
            "service.source.prometheus.headers",
            "without credentials",
        ),
        (
            "url: http://vmselect",
            "url: http://user:pw@vmselect",
            "service.source.prometheus.url",
            "without credentials",
        ),
        (
            "tls: {ca_file: /etc/gpufleet/ca.pem}",
            "tls: {key_file: /k.pem}",
            "service.source.prometheus.tls",
            "cert_file",
        ),
        (
            "bearer_token_file: /var/run/secrets/kubernetes.io/serviceaccount/token",
            "basic_auth: {username: reader}",
            "service.source.prometheus.basic_auth",
            "PROMETHEUS_PASSWORD",
        ),
        ("timeout: 20s", "timeot: 20s", "service.source.prometheus.timeot", "unknown field"),
        ("  source:\n", "  source:\n    targets: [http://node-1:9400/metrics]\n", "service.source",
         "one source"),
    ],
)  # fmt: skip
def test_mistakes_name_file_field_and_expectation(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    old: str,
    new: str,
    where: str,
    expected: str,
) -> None:
    text = GOOD.format(tmp=tmp_path)
    assert old in text
    rc, err = _check(tmp_path, text.replace(old, new, 1), capsys)
    assert rc == 2, err
    assert f"gpufleet.yaml: {where}" in err and expected in err, err
    assert "Traceback" not in err


def test_no_source_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _check(tmp_path, "cluster: x\n", capsys)
    assert rc == 2 and "service.source" in err and "prometheus" in err
