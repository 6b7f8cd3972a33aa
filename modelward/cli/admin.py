"""``modelward admin backup DEST`` and ``admin restore SRC``
(docs/operations.md#backup-and-restore).

Both work straight on the registry the flags name (``--data-dir``, ``--database-url``,
``--blob-store``, ``--config``; default ``./.modelward``), not over the API: a backup runs
beside the serving registry, a restore before any server starts on the target.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from modelward.cli.common import fail
from modelward.cli.local_database import reaching

__all__ = ["backup", "restore"]

EXIT_ENVIRONMENT = 3

DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help="The registry's data directory (./.modelward)")
]
DbUrl = Annotated[
    str | None,
    typer.Option("--database-url", help="The registry's database (sqlite:///..., postgresql://)"),
]
BlobStore = Annotated[
    str | None,
    typer.Option(
        "--blob-store", "--storage-url", help="The registry's blob store (file:///dir, s3://...)"
    ),
]
ConfigFile = Annotated[Path | None, typer.Option("--config", help="TOML settings file")]
AsJson = Annotated[bool, typer.Option("--json", help="One JSON document on stdout")]
BackupKey = Annotated[
    Path | None,
    typer.Option(
        "--backup-key",
        help="The key file that authenticates backups (else the backup_key setting, "
        "MODELWARD_BACKUP_KEY): 32+ random bytes, mode 0600, kept apart from the backups",
    ),
]


def _settings(
    config: Path | None,
    data_dir: Path | None,
    database_url: str | None,
    blob_store: str | None,
    backup_key: Path | None,
) -> Any:
    from modelward.registry.errors import ConfigurationError
    from modelward.registry.settings import load_settings

    try:
        return load_settings(
            config,
            data_dir=data_dir,
            database_url=database_url,
            blob_store=blob_store,
            backup_key=backup_key,
        )
    except ConfigurationError as exc:
        fail(str(exc), code=2)


def _emit(summary: Any, as_json: bool, line: str) -> None:
    if as_json:
        document = {
            "directory": str(summary.directory),
            "database": summary.database,
            "schema_revision": summary.schema_revision,
            "files": summary.files,
            "bytes": summary.bytes,
            "blobs": summary.blobs,
            "blob_store": summary.blob_store,
        }
        if summary.guarded is not None:  # a restore against the published metadata
            document["reserved_versions"] = summary.guarded.reserved
            document["quarantines_lifted"] = list(summary.guarded.lifted)
            document["quarantines_reimposed"] = list(summary.guarded.reimposed)
        typer.echo(json.dumps(document, indent=2, sort_keys=True))
    else:
        typer.echo(line)


def backup(
    dest: Annotated[Path, typer.Argument(metavar="DEST", help="A new or empty directory")],
    *,
    data_dir: DataDir = None,
    database_url: DbUrl = None,
    blob_store: BlobStore = None,
    config: ConfigFile = None,
    backup_key: BackupKey = None,
    as_json: AsJson = False,
) -> None:
    """Back up the registry while it serves: database snapshot, blobs, TUF keys, with a
    manifest of digests (docs/operations.md).

    A consistent database snapshot (SQLite's online backup, or pg_dump), the file blob
    store, the TUF keys and the audit checkpoint key, with a manifest of sizes and digests
    and its HMAC under the backup key. S3 blobs are not copied (bucket versioning keeps
    them)."""
    from modelward.registry.backup import BackupError, BackupToolMissing
    from modelward.registry.backup import backup as take

    settings = _settings(config, data_dir, database_url, blob_store, backup_key)
    try:
        with reaching(settings.resolved_database_url()):
            summary = take(settings, dest)
    except BackupToolMissing as exc:
        fail(str(exc), code=EXIT_ENVIRONMENT)
    except BackupError as exc:
        fail(str(exc))
    blobs = (
        f"{summary.blobs} blob(s)"
        if summary.blob_store == "copied"
        else f"blobs left in {summary.blob_store} (not copied)"
    )
    _emit(
        summary,
        as_json,
        f"backed up the {summary.database} database (schema {summary.schema_revision}), "
        f"{blobs}, keys: {summary.files} files, {summary.bytes} bytes in {dest}",
    )
    typer.echo(
        f"warning: {dest} holds the registry's online signing keys: keep it as secret as "
        "the data directory",
        err=True,
    )


def restore(
    src: Annotated[
        Path,
        typer.Argument(
            metavar="SRC", help="A directory `admin backup` wrote", exists=True, file_okay=False
        ),
    ],
    *,
    data_dir: DataDir = None,
    database_url: DbUrl = None,
    blob_store: BlobStore = None,
    config: ConfigFile = None,
    backup_key: BackupKey = None,
    published_metadata: Annotated[
        Path | None,
        typer.Option(
            "--published-metadata",
            help="The TUF metadata the registry published (its mirror, tuf_metadata_dir; "
            "default: the target's, when it holds a timestamp): versions up to its are "
            "never used again, and changed quarantines are listed",
            file_okay=False,
        ),
    ] = None,
    unsafe_without_published_metadata: Annotated[
        bool,
        typer.Option(
            "--unsafe-without-published-metadata",
            help="Restore without the published metadata: the registry may publish version "
            "numbers again that workers saw with other content",
        ),
    ] = False,
    accept_quarantine_changes: Annotated[
        bool,
        typer.Option(
            "--accept-quarantine-changes",
            help="Restore even though it lifts quarantines made after the backup, or "
            "quarantines again what was lifted after it (listed)",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Restore a backup into an empty data directory or database, after checking every
    digest.

    The manifest's HMAC (the backup key), every file's size and digest, the database kind
    and the schema revision are checked first, and the target (data directory, blob store,
    database) must be empty: nothing is written unless all pass. Against the metadata the
    registry published (--published-metadata), the restored registry's next versions go
    above the published ones, and a restore that changes quarantines made or lifted after
    the backup is refused unless --accept-quarantine-changes. Then start `modelward serve`
    on it."""
    from modelward.registry.backup import BackupError, BackupToolMissing
    from modelward.registry.backup import restore as put_back
    from modelward.registry.writer_lock import DataDirInUse, writer_holding

    settings = _settings(config, data_dir, database_url, blob_store, backup_key)
    try:
        writer_holding(settings.resolved_database_url(), doing="nothing was written")
    except DataDirInUse as exc:
        fail(str(exc), code=EXIT_ENVIRONMENT)
    try:
        with reaching(settings.resolved_database_url()):
            summary = put_back(
                src,
                settings,
                published=published_metadata,
                unsafe_without_published=unsafe_without_published_metadata,
                accept_quarantine_changes=accept_quarantine_changes,
            )
    except BackupToolMissing as exc:
        fail(str(exc), code=EXIT_ENVIRONMENT)
    except BackupError as exc:
        fail(str(exc))
    _emit(
        summary,
        as_json,
        f"restored {src} ({summary.database}, schema {summary.schema_revision}, "
        f"{summary.blobs} blob(s)) into {settings.data_dir}",
    )
    guarded = summary.guarded
    if guarded is None:
        typer.echo(
            "warning: restored without the published metadata: the registry may publish "
            "version numbers again that workers saw with other content",
            err=True,
        )
    else:
        for role, version in sorted(guarded.reserved.items()):
            typer.echo(f"reserved {role} up to v{version}: its next version is above", err=True)
        for digest in guarded.lifted:
            typer.echo(f"warning: lifted the quarantine of {digest} (made after it)", err=True)
        for digest in guarded.reimposed:
            typer.echo(f"warning: quarantined {digest} again (lifted after it)", err=True)
    typer.echo(
        "note: workers that saw newer signed state than this backup refuse it (rollback "
        "protection): docs/operations.md#restoring-an-older-backup",
        err=True,
    )
