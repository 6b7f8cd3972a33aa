"""Which bundle an alias names, as the registry's TUF metadata says (docs/tuf.md#workers).

A worker trusts a pinned root and nothing else: ``tuf.ngclient.Updater`` walks the chain of
root versions from it, then fetches timestamp, snapshot, the top-level targets and the
delegated role that holds the alias, checking every signature threshold, version and expiry
(rollback, freeze, mix-and-match). We do not implement any of that here; this module asks
the updater two questions and turns its answers into a decision:

1. ``ORG/NAME/aliases/ALIAS``: is there a target? Its sha256 is the bundle digest.
2. ``quarantine/<hex>``: is that digest quarantined?

The updater keeps its trusted metadata in the cache directory, so rollback protection
survives restarts. Errors: ``TrustMetadataRefused`` (the metadata failed a check, expired,
or names no such alias), ``BundleQuarantined``; transport errors stay python-tuf's
``DownloadError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuf.api.exceptions import RepositoryError
from tuf.ngclient import FetcherInterface, Updater, UpdaterConfig

from modelward.attest.tuf import alias_path, quarantine_path
from modelward.loader.errors import BundleQuarantined, RefusedError

__all__ = ["AliasResolution", "TrustMetadataRefused", "resolve_alias"]


class TrustMetadataRefused(RefusedError):  # noqa: N818 - a refusal, named as one
    """The registry's TUF metadata does not (verifiably) say what the alias names."""


@dataclass(frozen=True)
class AliasResolution:
    """An alias resolved through verified TUF metadata."""

    repo: str
    alias: str
    digest: str
    length: int


def resolve_alias(
    repo: str,
    alias: str,
    *,
    metadata_url: str,
    cache_dir: Path,
    trust_root: bytes | None,
    fetcher: FetcherInterface | None = None,
    config: UpdaterConfig | None = None,
) -> AliasResolution:
    """Resolve ``repo@alias`` through TUF from ``metadata_url``; refuse a quarantined digest.

    ``trust_root`` is the pinned root (bytes of root.json); once ``cache_dir`` holds a
    trusted root (possibly newer, reached through signed rotations), that one is used.
    ``fetcher``: how to reach the registry (``RegistryClient.tuf_fetcher()`` sends the
    worker's token); python-tuf's default fetcher otherwise.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    cached_root = cache_dir / "root.json"
    if trust_root is None and not cached_root.exists():
        raise TrustMetadataRefused(
            f"{repo}@{alias}: resolving an alias needs a pinned TUF root (--trust-root "
            "root.json, or the worker policy's trust_root); pulling by digest needs none"
        )
    updater = Updater(
        metadata_dir=str(cache_dir),
        metadata_base_url=metadata_url.rstrip("/") + "/",
        fetcher=fetcher,
        config=config,
        bootstrap=None if cached_root.exists() else trust_root,
    )
    try:
        updater.refresh()
        target = updater.get_targetinfo(alias_path(repo, alias))
        if target is None:
            raise TrustMetadataRefused(
                f"{repo}@{alias}: no signed target names this alias in the registry's TUF "
                "metadata (never published, or not yet signed by its role's keys)"
            )
        hexdigest = target.hashes.get("sha256")
        if hexdigest is None:
            raise TrustMetadataRefused(f"{repo}@{alias}: the signed target has no sha256")
        digest = f"sha256:{hexdigest}"
        if updater.get_targetinfo(quarantine_path(digest)) is not None:
            raise BundleQuarantined(digest, "listed by the signed quarantine role")
    except RepositoryError as exc:
        raise TrustMetadataRefused(
            f"{repo}@{alias}: the registry's TUF metadata was refused: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return AliasResolution(repo=repo, alias=alias, digest=digest, length=target.length)
