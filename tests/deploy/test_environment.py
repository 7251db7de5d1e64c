"""The secrets a deployment passes as environment variables override the config file's keys,
and a bad one is named without printing it."""

from __future__ import annotations

from pathlib import Path

import pytest

from errors import ConfigError
from gpufleet.config import load_config, with_environment

PG = "postgresql://gpufleet:s3cret@db:5432/gpufleet"


def test_database_url_overrides_store_url(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("cluster: c1\nstore_url: sqlite:///x.db\n", encoding="utf-8")
    cfg, _ = load_config(path, environ={"DATABASE_URL": PG})
    assert cfg.store_url == PG and cfg.cluster == "c1"
    assert load_config(path, environ={"DATABASE_URL": ""})[0].store_url == "sqlite:///x.db"
    assert load_config(None, environ={"DATABASE_URL": PG})[0].store_url == PG


def test_a_bad_variable_is_named_not_printed(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("cluster: c1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={"DATABASE_URL": "mysql://root:hunter2@db/x"})
    text = err.value.render()
    assert "hunter2" not in text
    assert f"{path}: store_url: expected a SQLAlchemy URL" in text
    assert "$DATABASE_URL" in text and "(with DATABASE_URL from the environment)" in text


def test_nested_keys_are_created_or_merged() -> None:
    data = {"alerts": {"slack": {"default_channel": "#ops"}}}
    env = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "abc", "SLACK_APP_TOKEN": "xapp-1"}
    out = with_environment(data, env)
    assert out["alerts"]["slack"] == {
        "default_channel": "#ops",
        "token": "xoxb-1",
        "signing_secret": "abc",
        "app_token": "xapp-1",
    }
    assert data == {"alerts": {"slack": {"default_channel": "#ops"}}}  # the input is not changed
    assert with_environment({}, env)["alerts"]["slack"]["token"] == "xoxb-1"
    assert with_environment([1], env) == [1]


def test_a_placeholder_database_password_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpufleet.cli import main

    shipped = (Path(__file__).parents[2] / "deploy/overlays/postgresql/database.env").read_text()
    url = next(line.split("=", 1)[1] for line in shipped.splitlines() if "DATABASE_URL" in line)
    path = tmp_path / "config.yaml"
    path.write_text("cluster: c1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={"DATABASE_URL": url})  # the overlay's example, unedited
    text = err.value.render()
    assert "store_url: expected a real database password, not the placeholder" in text
    assert "$DATABASE_URL" in text
    path.write_text("store_url: postgresql://gpufleet:PASSWORD@db.example/gpufleet\n")
    assert main(["breaker", "status", "--config", str(path)]) == 2
    assert "not the placeholder 'PASSWORD'" in capsys.readouterr().err
    assert load_config(path, environ={"DATABASE_URL": PG})[0].store_url == PG  # a real one


def test_a_config_that_is_not_utf8_exits_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpufleet.cli import main

    path = tmp_path / "gpufleet.yaml"
    path.write_bytes("cluster: m\xfcnchen\n".encode("latin-1"))
    assert main(["breaker", "status", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: expected UTF-8 text (byte 0xfc at offset 10)" in err
    assert "Traceback" not in err
