"""registry.settings: where each setting comes from, and what a bad one says."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelward.registry.errors import ConfigurationError
from modelward.registry.settings import load_settings, settings_from_json, worker_settings_json


def test_flags_win_over_environment_over_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toml = tmp_path / "registry.toml"
    toml.write_text("port = 9001\nlog_level = 'debug'\nmax_open_uploads = 5\n")
    monkeypatch.setenv("MODELWARD_PORT", "9002")
    monkeypatch.setenv("MODELWARD_MAX_OPEN_UPLOADS", "6")
    settings = load_settings(toml, port=9003, max_open_uploads=None)
    assert (settings.port, settings.max_open_uploads, settings.log_level) == (9003, 6, "debug")


def test_bad_values_name_the_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODELWARD_UPLOAD_TTL_SECONDS", "0")
    with pytest.raises(ConfigurationError, match="upload_ttl_seconds: Input should be greater"):
        load_settings(None)
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_settings(tmp_path / "missing.toml")


def test_worker_settings_round_trip_without_environment_or_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODELWARD_BOOTSTRAP_TOKEN", "secret-bootstrap")
    settings = load_settings(None, data_dir=tmp_path, audit_unauthenticated_per_minute=7)
    text = worker_settings_json(settings)
    assert "secret-bootstrap" not in text
    monkeypatch.setenv("MODELWARD_AUDIT_UNAUTHENTICATED_PER_MINUTE", "99")
    worker = settings_from_json(text)
    assert worker.audit_unauthenticated_per_minute == 7  # the environment is not read
    assert worker.bootstrap_token is None
    assert worker.resolved_database_url() == settings.resolved_database_url()
    for bad, message in (
        ("[1]", "not a JSON object"),
        ("{", "not JSON"),
        ('{"port": "x"}', "port: Input should be a valid integer"),
    ):
        with pytest.raises(ConfigurationError, match=message):
            settings_from_json(bad)
