"""Which bundle an alias names, as the registry's TUF metadata says (docs/tuf.md#workers).

A worker trusts a pinned root and nothing else: ``tuf.ngclient.Updater`` walks the chain of
root versions from it, then fetches timestamp, snapshot, the top-level targets and the
delegated role that holds the alias, checking every signature threshold, version and expiry
(rollback, freeze, mix-and-match). We do not implement any of that here; this module asks
the updater two questions and turns its answers into a decision:

1. ``ORG/NAME/aliases/ALIAS``: is there a target? Its sha256 is the bundle digest. When
   only the registry's online key signs it (an ``online: true`` alias rule), the worker
   must list the alias among those it accepts so (never by default).
2. ``quarantine/<hex>``: is that digest quarantined?

The updater keeps its trusted metadata in the cache directory, so rollback protection
survives restarts. Errors: ``TrustMetadataRefused`` (the metadata failed a check, expired,
or names no such alias), ``BundleQuarantined``; transport errors stay python-tuf's
``DownloadError``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuf.api.exceptions import RepositoryError
from tuf.api.metadata import Metadata, Snapshot, Targets
from tuf.ngclient import FetcherInterface, Updater, UpdaterConfig

from modelward.attest._fileio import read_bounded
from modelward.attest.tuf import QUARANTINE_ROLE, alias_path, online_role, quarantine_path
from modelward.loader.errors import BundleQuarantined, InputError, RefusedError

if TYPE_CHECKING:
    from modelward.attest.policy import Policy
    from modelward.loader.source import RegistrySource
    from modelward.registry._client_config import Reference

log = logging.getLogger("modelward.loader")
MAX_ROOT_BYTES = 1 << 20

__all__ = [
    "AliasResolution",
    "AliasTrust",
    "TrustMetadataRefused",
    "check_not_quarantined",
    "resolve_alias",
    "resolve_reference",
]


class TrustMetadataRefused(RefusedError):  # noqa: N818 - a refusal, named as one
    """The registry's TUF metadata does not (verifiably) say what the alias names."""


@dataclass(frozen=True)
class AliasResolution:
    """An alias resolved through verified TUF metadata."""

    repo: str
    alias: str
    digest: str
    length: int


def _updater(
    *,
    metadata_url: str,
    cache_dir: Path,
    trust_root: bytes | None,
    fetcher: FetcherInterface | None,
    config: UpdaterConfig | None,
    what: str,
) -> Updater:
    """A refreshed updater (timestamp, snapshot, top-level targets all verified)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    cached_root = cache_dir / "root.json"
    if trust_root is None and not cached_root.exists():
        raise TrustMetadataRefused(
            f"{what}: resolving an alias needs a pinned TUF root (--trust-root root.json, "
            "or the worker policy's tuf.root; `modelward trust root --out root.json` saves "
            "the registry's, to check out of band); pulling by digest needs none"
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
    except RepositoryError as exc:
        raise _refused(what, exc) from exc
    return updater


def _refused(what: str, exc: RepositoryError) -> TrustMetadataRefused:
    return TrustMetadataRefused(
        f"{what}: the registry's TUF metadata was refused: {type(exc).__name__}: {exc}"
    )


def _trusted(cache_dir: Path, role: str) -> Metadata[Any]:
    """A top-level role as the updater verified and kept it in ``cache_dir``."""
    return Metadata.from_bytes((cache_dir / f"{role}.json").read_bytes())


def _check_quarantine(updater: Updater, cache_dir: Path, digest: str, what: str) -> None:
    # The quarantine role is delegated from the first targets on, but has no metadata until
    # something is quarantined; the verified snapshot then does not list it, which means
    # "nothing is quarantined" (a snapshot may never drop a role a worker has seen).
    snapshot = _trusted(cache_dir, Snapshot.type).signed
    if f"{QUARANTINE_ROLE}.json" not in snapshot.meta:
        return
    try:
        listed = updater.get_targetinfo(quarantine_path(digest))
    except RepositoryError as exc:
        raise _refused(what, exc) from exc
    if listed is not None:
        # the reason is the target's signed ``custom`` (registry: propose_quarantine), never
        # the registry's unsigned answer
        custom = listed.custom if isinstance(listed.custom, dict) else {}
        reason = custom.get("reason")
        raise BundleQuarantined(digest, reason if isinstance(reason, str) else None, signed=True)


def _deciding_role(cache_dir: Path, path: str) -> str | None:
    targets = _trusted(cache_dir, Targets.type).signed
    if targets.delegations is None:
        return None
    return next((name for name, _ in targets.delegations.get_roles_for_target(path)), None)


def resolve_alias(
    repo: str,
    alias: str,
    *,
    metadata_url: str,
    cache_dir: Path,
    trust_root: bytes | None,
    online_aliases: Sequence[str] = (),
    fetcher: FetcherInterface | None = None,
    config: UpdaterConfig | None = None,
) -> AliasResolution:
    """Resolve ``repo@alias`` through TUF from ``metadata_url``; refuse a quarantined digest.

    ``trust_root`` is the pinned root (bytes of root.json); once ``cache_dir`` holds a
    trusted root (possibly newer, reached through signed rotations), that one is used.
    ``online_aliases``: the alias patterns this worker accepts when only the registry's
    online key signed them (``ORG:NAME@online``); none by default.
    ``fetcher``: how to reach the registry (``RegistryClient.tuf_fetcher()`` sends the
    worker's token); python-tuf's default fetcher otherwise.
    """
    what = f"{repo}@{alias}"
    updater = _updater(
        metadata_url=metadata_url,
        cache_dir=cache_dir,
        trust_root=trust_root,
        fetcher=fetcher,
        config=config,
        what=what,
    )
    path = alias_path(repo, alias)
    deciding = _deciding_role(cache_dir, path)
    unsigned = TrustMetadataRefused(
        f"{what}: no signed target names this alias in the registry's TUF metadata (never "
        "published, or not yet signed by its role's keys: `modelward alias pending`)"
    )
    if (
        deciding is not None
        and f"{deciding}.json" not in _trusted(cache_dir, Snapshot.type).signed.meta
    ):
        raise unsigned  # its role has no signed version at all yet
    try:
        target = updater.get_targetinfo(path)
    except RepositoryError as exc:
        raise _refused(what, exc) from exc
    if target is None:
        raise unsigned
    if _deciding_role(cache_dir, path) == online_role(repo) and not any(
        fnmatchcase(alias, pattern) for pattern in online_aliases
    ):
        raise TrustMetadataRefused(
            f"{what}: only the registry's online key signed this alias, and this worker "
            "accepts that for no alias matching it (worker policy tuf.online_aliases, or "
            "--online-alias PATTERN)"
        )
    hexdigest = target.hashes.get("sha256")
    if hexdigest is None:
        raise TrustMetadataRefused(f"{what}: the signed target has no sha256")
    digest = f"sha256:{hexdigest}"
    _check_quarantine(updater, cache_dir, digest, what)
    return AliasResolution(repo=repo, alias=alias, digest=digest, length=target.length)


def check_not_quarantined(
    digest: str,
    *,
    metadata_url: str,
    cache_dir: Path,
    trust_root: bytes | None,
    fetcher: FetcherInterface | None = None,
) -> None:
    """Refuse ``digest`` when the verified quarantine role lists it (a pull by digest with a
    pinned root)."""
    updater = _updater(
        metadata_url=metadata_url,
        cache_dir=cache_dir,
        trust_root=trust_root,
        fetcher=fetcher,
        config=None,
        what=digest,
    )
    _check_quarantine(updater, cache_dir, digest, digest)


@dataclass(frozen=True)
class AliasTrust:
    """How a worker resolves aliases: ``--trust-root``/``--online-alias``, or the worker
    policy's ``tuf`` section; ``unsigned`` (``--unsigned-aliases``) takes the registry's
    word instead, for registries not yet migrated (a warning says so every time)."""

    root: Path | None = None
    online_aliases: tuple[str, ...] = ()
    unsigned: bool = False
    root_source: str = "--trust-root"  # what gave ``root``, for messages

    def with_policy(self, policy: Policy, policy_file: Path | None) -> AliasTrust:
        """Fill what the flags left out from the worker policy (paths relative to it)."""
        root, source = self.root, self.root_source
        if root is None and policy.tuf.root is not None:
            root, source = Path(policy.tuf.root), "the worker policy's tuf.root"
            if not root.is_absolute() and policy_file is not None:
                root = policy_file.parent / root
        online = self.online_aliases or tuple(policy.tuf.online_aliases)
        return AliasTrust(
            root=root, online_aliases=online, unsigned=self.unsigned, root_source=source
        )


def _root_bytes(path: Path | None, source: str) -> bytes | None:
    if path is None:
        return None
    return read_bounded(path, MAX_ROOT_BYTES, what=f"{source} {path}", error=InputError)


def resolve_reference(
    client: RegistrySource, ref: Reference, cache_dir: Path, trust: AliasTrust
) -> str:
    """The digest ``ref`` names: a digest as given (refused when the pinned root's
    quarantine role lists it), an alias through the registry's verified TUF metadata.
    ``cache_dir``: where the updater keeps what it trusts, one directory per registry."""
    key = hashlib.sha256(client.base_url.encode()).hexdigest()[:16]
    metadata = cache_dir / "tuf" / key
    root = _root_bytes(trust.root, trust.root_source)
    if ref.digest is not None:
        if root is not None:
            check_not_quarantined(
                ref.digest,
                metadata_url=client.tuf_url,
                cache_dir=metadata,
                trust_root=root,
                fetcher=client.tuf_fetcher(),
            )
        return ref.digest
    assert ref.alias is not None  # noqa: S101 - a Reference holds one of the two
    if trust.unsigned and root is None:
        log.warning(
            "%s@%s resolved by the registry's word (--unsigned-aliases): "
            "nothing signed says which bundle it names",
            ref.repo,
            ref.alias,
        )
        return client.resolve(ref)
    resolved = resolve_alias(
        ref.repo,
        ref.alias,
        metadata_url=client.tuf_url,
        cache_dir=metadata,
        trust_root=root,
        online_aliases=trust.online_aliases,
        fetcher=client.tuf_fetcher(),
    )
    return resolved.digest
