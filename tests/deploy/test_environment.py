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
    env = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "abc"}
    out = with_environment(data, env)
    assert out["alerts"]["slack"] == {
        "default_channel": "#ops",
        "token": "xoxb-1",
        "signing_secret": "abc",
    }
    assert data == {"alerts": {"slack": {"default_channel": "#ops"}}}  # the input is not changed
    assert with_environment({}, env)["alerts"]["slack"]["token"] == "xoxb-1"
    assert with_environment([1], env) == [1]
