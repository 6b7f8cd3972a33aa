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

The updater keeps its trusted metadata in the cache directory, one per registry, so rollback
protection survives restarts. A metadata mirror (``--metadata-url``, the policy's
``tuf.metadata_url``; docs/tuf.md#mirrors) is read first, file by file, with the registry
behind it when the mirror cannot answer (``client.tuf.MirrorFetcher``: unreachable, an HTTP
error, oversized, or not within ``AliasTrust.fetch_limits``, a mirror that drips); the mirror is
untrusted, verified from the same pinned root into the same cache directory (the registry's),
so a worker never goes back in version by switching between them, and metadata from the
mirror that fails a check is refused naming the mirror, never read again from the registry.

The root a worker is given (``--trust-root``, the policy's ``tuf.root``) must be the one
that cache pinned, or an ancestor of its chain (the cache moved forward by signed
rotations); any other root is refused, naming both, with the command that re-pins
(``modelward trust pin --replace``; docs/guides/serving-workers.md#pinning-the-root). A first
pin the registry's metadata does not verify against is not kept.

Errors::

    TrustMetadataRefused      the metadata failed a check or expired
    ├── AliasNotSigned        no signed target names the alias
    ├── PinnedRootMismatch    the given root is not the cache's pinned root nor an ancestor
    └── MirrorRefused         metadata from the mirror failed a check (stale: expired)
    MetadataUrlInvalid        (an InputError) --metadata-url is not an http(s) URL
    BundleQuarantined         the verified quarantine role lists the digest
    TrustRootInvalid          (an InputError) the root file is not TUF root metadata

Transport errors stay python-tuf's ``DownloadError``; a mistyped repository is the client's
``UnknownRepository``, checked before an alias is blamed on TUF.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuf.api.exceptions import ExpiredMetadataError, RepositoryError
from tuf.api.metadata import Metadata, Root, Snapshot, Targets
from tuf.ngclient import FetcherInterface, Updater, UpdaterConfig

from modelward.attest._fileio import read_bounded
from modelward.attest.tuf import (
    QUARANTINE_ROLE,
    REASON_WITHHELD,
    WITHHELD_PRIVATE,
    alias_path,
    online_role,
    quarantine_path,
)
from modelward.client.api import NotFoundError
from modelward.client.suggest import alias_suggestions, did_you_mean
from modelward.client.tuf import FetchLimits, MirrorFetcher
from modelward.loader.errors import BundleQuarantined, InputError, RefusedError
from modelward.loader.rollout import RolloutResolution, resolve_rollout

if TYPE_CHECKING:
    from modelward.attest.policy import Policy
    from modelward.client.config import Reference
    from modelward.loader.source import RegistrySource

log = logging.getLogger("modelward.loader")
MAX_ROOT_BYTES = 1 << 20

__all__ = [
    "AliasNotSigned",
    "AliasResolution",
    "AliasTrust",
    "GivenRoot",
    "MetadataUrlInvalid",
    "MirrorRefused",
    "PinResult",
    "PinnedRootMismatch",
    "TrustMetadataRefused",
    "TrustRootInvalid",
    "check_not_quarantined",
    "check_pin",
    "load_root",
    "metadata_dir",
    "pin_root",
    "resolve_alias",
    "resolve_reference",
]


class TrustMetadataRefused(RefusedError):  # noqa: N818 - a refusal, named as one
    """The registry's TUF metadata does not (verifiably) say what the alias names."""


class AliasNotSigned(TrustMetadataRefused):
    """No signed target names the alias (never published, not yet signed, or the repository
    does not exist: ``resolve_reference`` asks the registry which)."""


class MirrorRefused(TrustMetadataRefused):
    """Metadata read from the mirror failed a check (a stale mirror: its timestamp expired);
    names the mirror. Never retried from the registry: a mirror's bytes are untrusted, and a
    refusal is what an attacker serving them would want to turn into a silent fallback."""


class MetadataUrlInvalid(InputError):  # noqa: N818 - named after what is wrong
    """The metadata URL is not an http(s) URL (the message names where it came from)."""


class TrustRootInvalid(InputError):  # noqa: N818 - named after what is wrong
    """The root file given to pin is not TUF root metadata (the message names the file)."""


@dataclass(frozen=True)
class GivenRoot:
    """A root file given to pin, as read: its bytes, and what it says of itself."""

    path: Path
    source: str  # "--trust-root", "the worker policy's tuf.root"
    data: bytes
    version: int

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def describe(self) -> str:
        return f"{self.source} {self.path} (root v{self.version}, sha256 {self.sha256[:16]}…)"


class PinnedRootMismatch(TrustMetadataRefused):
    """The given root is neither the root the cache pinned for this registry nor an ancestor
    of its chain; carries both, and the command that re-pins."""

    def __init__(self, given: GivenRoot, cached: Path, cached_version: int, repin: str) -> None:
        self.given = given
        self.cached = cached
        self.cached_version = cached_version
        cached_sha = hashlib.sha256(cached.read_bytes()).hexdigest()
        super().__init__(
            f"{given.describe()} is not the root this cache pinned for the registry, "
            f"{cached} (root v{cached_version}, sha256 {cached_sha[:16]}…), nor one it "
            "rotated from; nothing was resolved. If the given root is this registry's "
            "(check it out of band against `modelward trust root --out FILE`), re-pin with: "
            f"{repin}"
        )


@dataclass(frozen=True)
class AliasResolution:
    """An alias resolved through verified TUF metadata."""

    repo: str
    alias: str
    digest: str
    length: int
    rollout: RolloutResolution | None = None  # the rollout that chose ``digest`` (docs/rollouts.md)


def load_root(path: Path, source: str = "--trust-root") -> GivenRoot:
    """Read a root file to pin (at most ``MAX_ROOT_BYTES``); raise ``TrustRootInvalid``
    naming it when it is not TUF root metadata (other JSON, a targets file, not JSON), and
    ``InputError`` when it cannot be read. Its signatures are checked by the updater."""
    data = read_bounded(path, MAX_ROOT_BYTES, what=f"{source} {path}", error=InputError)
    try:
        parsed = Metadata[Any].from_bytes(data)
    except Exception as exc:  # noqa: BLE001 - python-tuf raises many types for bad input
        raise TrustRootInvalid(
            f"{source} {path}: not TUF root metadata (save the registry's with `modelward "
            f"trust root --out root.json`): {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(parsed.signed, Root):
        raise TrustRootInvalid(
            f"{source} {path}: TUF {parsed.signed.type} metadata, not a root (save the "
            "registry's root with `modelward trust root --out root.json`)"
        )
    return GivenRoot(path=path, source=source, data=data, version=parsed.signed.version)


def metadata_dir(cache_root: Path, base_url: str) -> Path:
    """Where the updater keeps what it trusts of the registry at ``base_url``."""
    key = hashlib.sha256(base_url.encode()).hexdigest()[:16]
    return cache_root / "tuf" / key


def _repin_command(given: GivenRoot, cache_root: Path | None) -> str:
    where = f" --cache-dir {cache_root}" if cache_root is not None else ""
    return f"modelward trust pin --trust-root {given.path} --replace{where}"


def check_pin(cache_dir: Path, given: GivenRoot, repin: str) -> None:
    """Raise ``PinnedRootMismatch`` unless ``given`` is the root ``cache_dir`` pinned or one
    the cache rotated from (python-tuf keeps every root version it trusted, byte for byte, in
    ``root_history/``); an empty cache pins nothing yet and passes.

    1. no cached root: nothing to compare;
    2. the cache trusted a root of the given version with the same bytes: the same root, or
       an ancestor of the cached chain;
    3. anything else is another root: refused, naming both and ``repin``.
    """
    # (1): nothing pinned yet
    cached = cache_dir / "root.json"
    if not cached.exists():
        return
    # (2): the same root, or one the cache rotated from
    kept = cache_dir / "root_history" / f"{given.version}.root.json"
    if kept.is_file() and kept.read_bytes() == given.data:
        return
    if cached.read_bytes() == given.data:  # a cache written before root_history existed
        return
    # (3): another root
    try:
        version = Metadata[Root].from_bytes(cached.read_bytes()).signed.version
    except Exception:  # noqa: BLE001 - a damaged cache is another root too
        version = 0
    raise PinnedRootMismatch(given, cached.resolve(), version, repin)


def _updater(
    *,
    metadata_url: str,
    cache_dir: Path,
    trust_root: bytes | None,
    fetcher: FetcherInterface | None,
    config: UpdaterConfig | None,
    what: str,
) -> Updater:
    """A refreshed updater (timestamp, snapshot, top-level targets all verified).

    A first pin (no cached root yet) that fails to verify the registry's metadata is not
    kept: the cache is left as empty as it was, and the refusal says the root may be wrong.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    cached_root = cache_dir / "root.json"
    if trust_root is None and not cached_root.exists():
        raise TrustMetadataRefused(
            f"{what}: resolving an alias needs a pinned TUF root (--trust-root root.json, "
            "or the worker policy's tuf.root; `modelward trust root --out root.json` saves "
            "the registry's, to check out of band); pulling by digest needs none"
        )
    first_pin = not cached_root.exists()
    try:
        updater = Updater(
            metadata_dir=str(cache_dir),
            metadata_base_url=metadata_url.rstrip("/") + "/",
            fetcher=fetcher,
            config=config,
            bootstrap=None if cached_root.exists() else trust_root,
        )
        updater.refresh()
    except RepositoryError as exc:
        refused = _refused(what, exc, fetcher)
        if not first_pin:
            raise refused from exc
        _empty(cache_dir)
        whose = "the mirror's" if isinstance(refused, MirrorRefused) else "the registry's"
        raise type(refused)(
            f"{refused}; nothing was pinned: {whose} metadata does not verify against the "
            "root given (is it this registry's root? save it with `modelward trust root "
            "--out root.json` and check it out of band)"
        ) from exc
    except BaseException:
        if first_pin:
            _empty(cache_dir)
        raise
    return updater


def _empty(cache_dir: Path) -> None:
    """Remove what a failed first pin wrote, leaving ``cache_dir`` empty."""
    for child in cache_dir.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _refused(
    what: str, exc: RepositoryError, fetcher: FetcherInterface | None = None
) -> TrustMetadataRefused:
    """The refusal of ``exc``, naming the mirror when ``fetcher`` read one (a stale mirror:
    its timestamp expired)."""
    failed = f"{type(exc).__name__}: {exc}"
    if not isinstance(fetcher, MirrorFetcher):
        return TrustMetadataRefused(f"{what}: the registry's TUF metadata was refused: {failed}")
    mirror = fetcher.mirror_url
    from_registry = sorted(n for n, url in fetcher.sources.items() if url != mirror)
    if len(from_registry) == len(fetcher.sources):  # the mirror served none of it
        return TrustMetadataRefused(f"{what}: the registry's TUF metadata was refused: {failed}")
    also = (
        f" ({', '.join(from_registry)} read from the registry {fetcher.fallback_url}: the "
        "mirror could not answer)"
        if from_registry
        else ""
    )
    if isinstance(exc, ExpiredMetadataError):
        return MirrorRefused(
            f"{what}: the metadata mirror {mirror} is stale: {failed}{also}; refused, not "
            "read again from the registry: keep the mirror within the timestamp's lifetime "
            "(docs/tuf.md#mirrors), or drop --metadata-url"
        )
    return MirrorRefused(
        f"{what}: the TUF metadata from the mirror {mirror} was refused: {failed}{also}; "
        "not read again from the registry (the mirror is untrusted: docs/tuf.md#mirrors)"
    )


def _trusted(cache_dir: Path, role: str) -> Metadata[Any]:
    """A top-level role as the updater verified and kept it in ``cache_dir``."""
    return Metadata.from_bytes((cache_dir / f"{role}.json").read_bytes())


def _check_quarantine(
    updater: Updater,
    cache_dir: Path,
    digest: str,
    what: str,
    fetcher: FetcherInterface | None = None,
) -> None:
    # The quarantine role is delegated from the first targets on, but has no metadata until
    # something is quarantined; the verified snapshot then does not list it, which means
    # "nothing is quarantined" (a snapshot may never drop a role a worker has seen).
    snapshot = _trusted(cache_dir, Snapshot.type).signed
    if f"{QUARANTINE_ROLE}.json" not in snapshot.meta:
        return
    try:
        listed = updater.get_targetinfo(quarantine_path(digest))
    except RepositoryError as exc:
        raise _refused(what, exc, fetcher) from exc
    if listed is not None:
        # the reason is the target's signed ``custom`` (registry: propose_quarantine), never
        # the registry's unsigned answer; withheld for a digest only private repositories hold
        custom = listed.custom if isinstance(listed.custom, dict) else {}
        reason = custom.get("reason")
        raise BundleQuarantined(
            digest,
            reason if isinstance(reason, str) else None,
            signed=True,
            withheld=custom.get(REASON_WITHHELD) == WITHHELD_PRIVATE,
        )


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
    worker_keyid: str | None = None,
) -> AliasResolution:
    """Resolve ``repo@alias`` through TUF from ``metadata_url``; refuse a quarantined digest.

    ``trust_root`` is the pinned root (bytes of root.json); once ``cache_dir`` holds a
    trusted root (possibly newer, reached through signed rotations), that one is used.
    ``online_aliases``: the alias patterns this worker accepts when only the registry's
    online key signed them (``ORG:NAME@online``); none by default.
    ``fetcher``: how to reach the registry (``RegistryClient.tuf_fetcher()`` sends the
    worker's token); python-tuf's default fetcher otherwise.
    ``worker_keyid``: this worker's key id, its identity in a rollout's cohorts
    (``loader.rollout``; None: the stable digest until the candidate has 100%).
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
    unsigned = AliasNotSigned(
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
        raise _refused(what, exc, fetcher) from exc
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
    # a rollout of the alias chooses this worker's digest (docs/rollouts.md)
    try:
        rollout = resolve_rollout(
            updater,
            cache_dir,
            repo=repo,
            alias=alias,
            alias_digest=digest,
            worker_keyid=worker_keyid,
        )
    except RepositoryError as exc:
        raise _refused(what, exc, fetcher) from exc
    length = target.length
    if rollout is not None and rollout.digest != digest:
        digest, length = rollout.digest, -1  # the candidate: no length is signed for it
    _check_quarantine(updater, cache_dir, digest, what, fetcher)
    return AliasResolution(repo=repo, alias=alias, digest=digest, length=length, rollout=rollout)


def check_not_quarantined(
    digest: str,
    *,
    metadata_url: str,
    cache_dir: Path,
    trust_root: bytes | None,
    fetcher: FetcherInterface | None = None,
) -> None:
    """Refuse ``digest`` when the verified quarantine role lists it (a pull by digest with a
    root given, or pinned in ``cache_dir``: ``trust_root`` None uses the cached one)."""
    updater = _updater(
        metadata_url=metadata_url,
        cache_dir=cache_dir,
        trust_root=trust_root,
        fetcher=fetcher,
        config=None,
        what=digest,
    )
    _check_quarantine(updater, cache_dir, digest, digest, fetcher)


@dataclass(frozen=True)
class AliasTrust:
    """How a worker resolves aliases: ``--trust-root``/``--online-alias``, or the worker
    policy's ``tuf`` section; ``unsigned`` (``--unsigned-aliases``) takes the registry's
    word instead, for registries not yet migrated (a warning says so every time), but only
    while no root is given or pinned in the cache (``resolve_reference`` step 3)."""

    root: Path | None = None
    online_aliases: tuple[str, ...] = ()
    unsigned: bool = False
    root_source: str = "--trust-root"  # what gave ``root``, for messages
    metadata_url: str | None = None  # a mirror of the registry's /tuf/ (docs/tuf.md#mirrors)
    metadata_url_source: str = "--metadata-url"
    worker_keyid: str | None = None  # this worker's identity in rollouts (docs/rollouts.md)
    # how long fetching one metadata file may take (docs/tuf.md#mirrors): the mirror's, and
    # the registry's after the mirror could not answer
    fetch_limits: FetchLimits = field(default_factory=FetchLimits)

    def with_policy(self, policy: Policy, policy_file: Path | None) -> AliasTrust:
        """Fill what the flags left out from the worker policy (paths relative to it)."""
        root, source = self.root, self.root_source
        if root is None and policy.tuf.root is not None:
            root, source = Path(policy.tuf.root), "the worker policy's tuf.root"
            if not root.is_absolute() and policy_file is not None:
                root = policy_file.parent / root
        online = self.online_aliases or tuple(policy.tuf.online_aliases)
        url, url_source = self.metadata_url, self.metadata_url_source
        if url is None and policy.tuf.metadata_url is not None:
            url, url_source = policy.tuf.metadata_url, "the worker policy's tuf.metadata_url"
        return AliasTrust(
            root=root,
            online_aliases=online,
            unsigned=self.unsigned,
            root_source=source,
            metadata_url=url,
            metadata_url_source=url_source,
            worker_keyid=self.worker_keyid,
            fetch_limits=self.fetch_limits,
        )

    def fetcher(self, client: RegistrySource) -> tuple[str, FetcherInterface]:
        """Where the updater reads the metadata, and how: the mirror with the registry
        behind it when a metadata URL is given, else the registry. Raises
        ``MetadataUrlInvalid`` naming its source when it is not an http(s) URL."""
        if self.metadata_url is None:
            return client.tuf_url, client.tuf_fetcher()
        url = self.metadata_url
        if not url.startswith(("http://", "https://")) or len(url) > 2000:
            raise MetadataUrlInvalid(
                f"{self.metadata_url_source} {url!r}: not an http:// or https:// URL (the "
                "directory a static server or bucket serves the registry's /tuf/ files from)"
            )
        mirror = MirrorFetcher(url, client.tuf_fetcher(), client.tuf_url, limits=self.fetch_limits)
        return url.rstrip("/") + "/", mirror


def resolve_reference(
    client: RegistrySource, ref: Reference, cache_dir: Path, trust: AliasTrust
) -> str:
    """The digest ``ref`` names: a digest as given (refused when the pinned root's
    quarantine role lists it), an alias through the registry's verified TUF metadata.
    ``cache_dir``: the cache root; the updater keeps what it trusts under it, one directory
    per registry.

    1. the given root is read (``TrustRootInvalid``: not a root) and must be the root the
       cache pinned for this registry, or an ancestor (``PinnedRootMismatch``);
    2. a digest: refused when the verified quarantine role lists it, whenever a root is
       given or the cache pinned one (``trust pin``; workers then run without
       ``--trust-root``): only a worker with no root at all takes the registry's word;
    3. an alias resolves through TUF (or, with ``--unsigned-aliases`` and no root given or
       pinned in the cache, by the registry's word, with a warning; with a root, the flag is
       ignored, with a warning saying so); when no signed target (or the registry) names it, a
       repository the caller cannot read is named first (``UnknownRepository``, with the
       close names it may read).
    """
    # (1): the given root is the pinned one, or an ancestor; one cache per registry, whichever
    # URL the metadata is read from (the mirror's or the registry's), so neither can take a
    # worker back in version
    metadata = metadata_dir(cache_dir, client.base_url)
    given = load_root(trust.root, trust.root_source) if trust.root is not None else None
    if given is not None:
        check_pin(metadata, given, _repin_command(given, cache_dir))
    root = given.data if given is not None else None
    # (2): a digest, checked against the quarantine role
    if ref.digest is not None:
        if root is not None or (metadata / "root.json").exists():  # given, or pinned earlier
            url, fetcher = trust.fetcher(client)
            try:
                check_not_quarantined(
                    ref.digest,
                    metadata_url=url,
                    cache_dir=metadata,
                    trust_root=root,
                    fetcher=fetcher,
                )
            finally:
                _note_fallbacks(fetcher, ref.digest)
        return ref.digest
    # (3): an alias through TUF; not signed there, it is asked whether the repository exists
    assert ref.alias is not None  # noqa: S101 - a Reference holds one of the two
    try:
        pinned = root is not None or (metadata / "root.json").exists()
        if trust.unsigned and pinned:
            # the flag is for a worker *without* a root: one given, or pinned in the cache
            # (``trust pin``, or any earlier resolution), is never set aside for the
            # registry's word
            log.warning(
                "%s@%s: --unsigned-aliases ignored: a TUF root is pinned for this registry "
                "(%s), so the alias is resolved through its signed metadata",
                ref.repo,
                ref.alias,
                trust.root_source if root is not None else metadata,
            )
        if trust.unsigned and not pinned:
            log.warning(
                "%s@%s resolved by the registry's word (--unsigned-aliases): "
                "nothing signed says which bundle it names",
                ref.repo,
                ref.alias,
            )
            return client.resolve(ref)
        url, fetcher = trust.fetcher(client)
        try:
            resolved = resolve_alias(
                ref.repo,
                ref.alias,
                metadata_url=url,
                cache_dir=metadata,
                trust_root=root,
                online_aliases=trust.online_aliases,
                fetcher=fetcher,
                worker_keyid=trust.worker_keyid,
            )
        finally:
            _note_fallbacks(fetcher, f"{ref.repo}@{ref.alias}")
    except (AliasNotSigned, NotFoundError) as exc:
        client.check_repository(ref.repo)  # UnknownRepository, with the names close to it
        hint = did_you_mean(alias_suggestions(client, ref.repo, ref.alias))
        if hint and isinstance(exc, AliasNotSigned):  # the refusal stands; a hint is added
            raise AliasNotSigned(f"{exc}; {hint}") from exc
        raise
    return resolved.digest


def _note_fallbacks(fetcher: FetcherInterface, what: str) -> None:
    """One warning (stderr in the CLI) naming the files the mirror could not answer."""
    if not isinstance(fetcher, MirrorFetcher):
        return
    fetcher.close()
    if fetcher.fallbacks:
        first = fetcher.fallbacks[0]
        log.warning(
            "%s: the metadata mirror %s could not answer %s (%s): read from the registry %s",
            what,
            fetcher.mirror_url,
            ", ".join(f.name for f in fetcher.fallbacks),
            first.why,
            fetcher.fallback_url,
        )


@dataclass(frozen=True)
class PinResult:
    """What ``pin_root`` did: the root pinned, the root the cache now trusts (after any
    signed rotations since it), and whether an earlier pin was replaced."""

    directory: Path
    pinned_version: int
    trusted_version: int
    replaced: bool
    unchanged: bool


def pin_root(
    client: RegistrySource, cache_root: Path, given: GivenRoot, *, replace: bool
) -> PinResult:
    """Pin ``given`` as this worker's root for the registry ``client`` talks to.

    1. a cache that pinned the same root (or one given rotated to) is kept as it is;
    2. a cache that pinned another root is refused (``PinnedRootMismatch``) unless
       ``replace``;
    3. the new pin is made in a fresh directory beside the cache and must verify the
       registry's current metadata (root chain, timestamp, snapshot, targets) there; only then
       does it replace the old one, so a failure leaves the cache as it was.
    """
    metadata = metadata_dir(cache_root, client.base_url)
    repin = _repin_command(given, cache_root)
    # (1), (2): the pin the cache holds
    existed = (metadata / "root.json").exists()
    try:
        check_pin(metadata, given, repin)
        unchanged = existed
    except PinnedRootMismatch:
        if not replace:
            raise
        unchanged = False
    if unchanged:
        _updater(
            metadata_url=client.tuf_url,
            cache_dir=metadata,
            trust_root=None,
            fetcher=client.tuf_fetcher(),
            config=None,
            what=str(given.path),
        )
        return PinResult(metadata, given.version, _cached_version(metadata), False, True)
    # (3): a new pin, verified beside the old one before it replaces it
    metadata.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=".pin-", dir=metadata.parent))
    try:
        _updater(
            metadata_url=client.tuf_url,
            cache_dir=fresh,
            trust_root=given.data,
            fetcher=client.tuf_fetcher(),
            config=None,
            what=str(given.path),
        )
        old = metadata.with_name(fresh.name + ".old")
        if metadata.exists():
            metadata.rename(old)
        fresh.rename(metadata)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    return PinResult(metadata, given.version, _cached_version(metadata), existed, False)


def _cached_version(cache_dir: Path) -> int:
    return Metadata[Root].from_bytes((cache_dir / "root.json").read_bytes()).signed.version
