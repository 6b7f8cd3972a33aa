"""Server settings: flags > ``MODELWARD_*`` environment > TOML file > defaults.

Built by ``load_settings`` (a factory); nothing reads the environment at import time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, IPvAnyNetwork, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from modelward.registry.errors import ConfigurationError

__all__ = [
    "DEFAULT_PORT",
    "WORKER_SETTINGS_ENV",
    "Settings",
    "load_settings",
    "settings_from_json",
    "worker_settings_json",
]

DEFAULT_PORT = 8700
# ``serve --workers N`` hands the resolved settings to its worker processes in this variable
# (no MODELWARD_ prefix: the settings sources never read it). Never the bootstrap token.
WORKER_SETTINGS_ENV = "_MODELWARD_WORKER_SETTINGS"


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
    audit_unauthenticated_per_minute: int = Field(default=60, ge=1)  # per client address
    # the audit checkpoint signing key (docs/registry.md#checkpoints); None: created on first
    # use at <data_dir>/audit-checkpoint.key. When set, the file must exist (never created).
    audit_checkpoint_key: Path | None = None
    # the key that authenticates backups (docs/operations.md#the-backup-key): a file of at
    # least 32 random bytes, mode 0600, kept apart from the backups; never created
    backup_key: Path | None = None
    upload_ttl_seconds: int = Field(default=900, ge=1)  # an upload session idle this long expires
    max_open_uploads: int = Field(default=64, ge=1)  # per principal
    # garbage collection spares blobs, leases and upload sessions younger than this
    # (docs/registry.md#storage-hygiene)
    gc_window_seconds: int = Field(default=86_400, ge=1)
    # peers whose X-Forwarded-For is believed (IPs or CIDRs; comma-separated in the
    # environment); none by default (docs/registry.md#audit-log)
    trusted_proxies: Annotated[tuple[IPvAnyNetwork, ...], NoDecode] = ()
    # TUF (docs/tuf.md): where the online keys live (default <data_dir>/tuf-keys; replicas
    # share it), how long a timestamp and a snapshot stay valid, and how often a background
    # thread re-signs them once half of that has passed
    tuf_keys_dir: Path | None = None
    tuf_timestamp_expiry_seconds: int = Field(default=86_400, ge=2)
    tuf_snapshot_expiry_seconds: int = Field(default=7 * 86_400, ge=2)
    tuf_refresh_interval_seconds: float = Field(default=60.0, gt=0)
    # /tuf/ answers without a token (the metadata is signed; it names repositories, aliases
    # and digests, which a registry may want to keep to its principals: off by default)
    tuf_public: bool = False
    # /tuf/ from memory (docs/tuf.md#serving): each server process re-checks the database's
    # current timestamp at most this often, so a publish by a program writing the database
    # directly, or a replica on another machine, is served within this many seconds (this
    # process's own, and those of processes sharing its tuf_keys_dir, at once). 0: no
    # cache, every request reads the database
    tuf_freshness_seconds: float = Field(default=1.0, ge=0, le=60)
    # /tuf/ reads trust a token that authenticated within this many seconds (per process,
    # keyed by its hash): a revoked token stops reading /tuf/ within it. 0: every request
    tuf_token_cache_seconds: float = Field(default=5.0, ge=0, le=300)
    # the metadata as static files (docs/tuf.md#mirrors): written after every publish, at
    # start and on retries to this directory (default <data_dir>/mirror/tuf; with an s3://
    # blob store and this unset: the bucket's <prefix>/tuf/)
    tuf_metadata_dir: Path | None = None
    workers: int | None = Field(default=None, ge=1, le=64)  # None: see resolved_workers()
    threads: int = Field(default=8, ge=1, le=1000)  # blocking-work threads per worker process
    db_pool_size: int = Field(default=8, ge=1, le=1000)  # connections kept per worker process
    db_max_overflow: int = Field(default=8, ge=0, le=1000)  # opened beyond that, then closed
    # the reviewer console (/ui/, docs/console.md): a login session ends this long after it began
    ui_session_seconds: int = Field(default=8 * 3600, ge=60, le=30 * 86_400)
    # a serving worker with no fleet report for this long is ``silent`` in rollout status
    # (docs/rollouts.md#fleet-reports): three 10-second report intervals by default
    rollout_silent_after_seconds: float = Field(default=30.0, gt=0, le=86_400)
    # the rollout controller judges the rollouts under way this often and acts on them
    # (docs/rollouts.md#analysis); 0: this process runs no controller
    rollout_analysis_seconds: float = Field(default=10.0, ge=0, le=3600)
    # signed webhooks (docs/webhooks.md): the waits between a failed attempt and the next
    # (comma-separated durations: ms, s, m, h; the Standard Webhooks recommendation after the
    # first, immediate attempt), at most this many attempts per delivery, each given this
    # long, the delivery loop's poll interval (0: this process delivers nothing) and how many
    # deliveries one process sends at once
    webhook_retry_schedule: str = "5s,5m,30m,2h,5h,10h"
    webhook_max_attempts: int = Field(default=7, ge=1, le=50)
    webhook_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    webhook_poll_seconds: float = Field(default=1.0, ge=0, le=3600)
    webhook_concurrency: int = Field(default=4, ge=1, le=64)
    # fleet reports and finished webhook messages older than this are deleted, every
    # retention_interval_seconds (docs/operations.md#retention); 0 keeps them (and 0 for the
    # interval: this process prunes nothing)
    retention_seconds: float = Field(default=30 * 86_400, ge=0, le=3650 * 86_400)
    retention_interval_seconds: float = Field(default=3600.0, ge=0, le=86_400)

    @field_validator("webhook_retry_schedule")
    @classmethod
    def _retry_schedule(cls, value: str) -> str:
        retry_schedule(value)  # ValueError naming the bad part
        return value

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'registry.db').resolve()}"

    def resolved_blob_store(self) -> str:
        if self.blob_store:
            return self.blob_store
        return f"file://{(self.data_dir / 'blobs').resolve()}"

    def resolved_audit_checkpoint_key(self) -> Path:
        if self.audit_checkpoint_key is not None:
            return self.audit_checkpoint_key
        return (self.data_dir / "audit-checkpoint.key").resolve()

    def resolved_tuf_keys_dir(self) -> Path:
        return (self.tuf_keys_dir or self.data_dir / "tuf-keys").resolve()

    def resolved_tuf_metadata_dir(self) -> Path:
        return (self.tuf_metadata_dir or self.data_dir / "mirror" / "tuf").resolve()

    def resolved_webhook_retry_schedule(self) -> tuple[float, ...]:
        return retry_schedule(self.webhook_retry_schedule)

    def resolved_workers(self) -> int:
        """Server processes: ``workers`` if set; else 1 on SQLite (one writer at a time, so
        more processes only queue on its lock) and ``min(4, cpu_count)`` on PostgreSQL."""
        if self.workers is not None:
            return self.workers
        if self.resolved_database_url().startswith("sqlite"):
            return 1
        return min(4, os.cpu_count() or 1)


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def retry_schedule(text: str) -> tuple[float, ...]:
    """``"5s,5m,30m"`` as seconds; raises ValueError naming the part that is not a
    duration (a number and a unit: ms, s, m, h; at most 1 day each; empty: no retries)."""
    waits: list[float] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        unit = next((u for u in ("ms", "s", "m", "h") if part.endswith(u)), None)
        try:
            number = float(part[: -len(unit)]) if unit else float("nan")
        except ValueError:
            number = float("nan")
        if unit is None or not 0 <= number * _UNITS[unit] <= 86_400:
            raise ValueError(
                f"{part!r} is not a duration (a number and ms, s, m or h; at most 24h)"
            )
        waits.append(number * _UNITS[unit])
    if len(waits) > 49:
        raise ValueError("more than 49 retries")
    return tuple(waits)


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build settings; ``overrides`` (command-line flags) win, ``None`` values are ignored.

    The TOML file is ``config_file`` or ``$MODELWARD_CONFIG``. Raises ConfigurationError.
    """
    toml_path = config_file or (
        Path(os.environ["MODELWARD_CONFIG"]) if os.environ.get("MODELWARD_CONFIG") else None
    )
    if toml_path is not None and not toml_path.is_file():
        raise ConfigurationError(f"config file {toml_path} does not exist")

    cls = _settings_class(environment=True, toml_path=toml_path)
    try:
        return cls(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        raise ConfigurationError(f"invalid settings: {_problems(exc)}") from exc


def _settings_class(*, environment: bool, toml_path: Path | None) -> type[Settings]:
    """``Settings`` reading its keywords, then ``MODELWARD_*`` (when ``environment``), then
    the TOML file (when given); earlier sources win."""

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
            sources = [init_settings, *([env_settings] if environment else [])]
            if toml_path is not None:
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_path))
            return tuple(sources)

    return _Settings


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
    )


def worker_settings_json(settings: Settings) -> str:
    """``settings`` resolved (absolute paths, database and blob URLs) as JSON for worker
    processes, without the bootstrap token: the parent bootstraps before workers start."""
    data = settings.model_dump(mode="json", exclude={"bootstrap_token"})
    data["data_dir"] = str(settings.data_dir.resolve())
    data["database_url"] = settings.resolved_database_url()
    data["blob_store"] = settings.resolved_blob_store()
    data["policy"] = str(settings.policy.resolve()) if settings.policy else None
    key = settings.audit_checkpoint_key
    data["audit_checkpoint_key"] = str(key.resolve()) if key else None  # None: the default
    data["tuf_keys_dir"] = str(settings.resolved_tuf_keys_dir())
    if settings.tuf_metadata_dir is not None:  # unset: the data dir's, or the S3 bucket's
        data["tuf_metadata_dir"] = str(settings.resolved_tuf_metadata_dir())
    data["workers"] = settings.resolved_workers()
    return json.dumps(data)


def settings_from_json(text: str) -> Settings:
    """Settings from ``worker_settings_json`` output only (no environment, no file).

    Raises ConfigurationError.
    """

    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ConfigurationError("worker settings are not a JSON object")
        return _settings_class(environment=False, toml_path=None)(**data)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"worker settings are not JSON: {exc}") from exc
    except ValidationError as exc:
        raise ConfigurationError(f"invalid worker settings: {_problems(exc)}") from exc
