"""Server settings: flags > ``MODELWARD_*`` environment > TOML file > defaults.

Built by ``load_settings`` (a factory); nothing reads the environment at import time.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from registry.errors import ConfigurationError

__all__ = ["DEFAULT_PORT", "Settings", "load_settings"]

DEFAULT_PORT = 8700


class Settings(BaseSettings):
    """Every server setting; ``MODELWARD_<NAME>`` in the environment, ``name`` in TOML."""

    model_config = SettingsConfigDict(env_prefix="MODELWARD_", extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    data_dir: Path = Path(".modelward")
    database_url: str | None = None  # default sqlite:///<data_dir>/registry.db
    blob_store: str | None = None  # default file://<data_dir>/blobs ; or s3://bucket/prefix
    policy: Path | None = None  # default policy for new repositories
    bootstrap_token: SecretStr | None = None
    max_blob_bytes: int = Field(default=64 * 2**30, gt=0)
    max_manifest_bytes: int = Field(default=16 * 2**20, gt=0)
    max_attestation_bytes: int = Field(default=16 * 2**20, gt=0)
    max_request_json_bytes: int = Field(default=64 * 2**20, gt=0)
    s3_presign: bool = False
    s3_presign_expires: int = Field(default=300, gt=0)
    s3_endpoint_url: str | None = None  # else the standard AWS settings (AWS_ENDPOINT_URL ...)
    metrics_public: bool = False  # /metrics needs a token unless this is true
    log_level: str = "info"

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'registry.db').resolve()}"

    def resolved_blob_store(self) -> str:
        if self.blob_store:
            return self.blob_store
        return f"file://{(self.data_dir / 'blobs').resolve()}"


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build settings; ``overrides`` (command-line flags) win, ``None`` values are ignored.

    The TOML file is ``config_file`` or ``$MODELWARD_CONFIG``. Raises ConfigurationError.
    """
    toml_path = config_file or (
        Path(os.environ["MODELWARD_CONFIG"]) if os.environ.get("MODELWARD_CONFIG") else None
    )
    if toml_path is not None and not toml_path.is_file():
        raise ConfigurationError(f"config file {toml_path} does not exist")

    class _Settings(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
            if toml_path is not None:
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_path))
            return tuple(sources)

    try:
        return _Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigurationError(f"invalid settings: {problems}") from exc
