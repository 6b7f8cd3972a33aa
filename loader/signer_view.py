"""A signer's own view of the registry's TUF repository (docs/tuf.md#what-a-signer-checks).

The registry is untrusted by signers too. Before a person signs a proposed role version,
the command verifies the registry's metadata from the signer's pinned root, with the same
updater and cache a worker keeps (``loader.tuf_resolve``): the root chain, timestamp,
snapshot, the top-level targets and the role itself. What the signature changes is then
computed from the proposal's bytes against that verified version
(``attest.signed_change``), never against bytes the registry hands over unverified.

1. the signer's root: the one given (``MODELWARD_TRUST_ROOT``, ``--trust-root``) must be
   the cache's pin for this registry or an ancestor of it (``check_pin``); none given, the
   cache's pin; neither: refused (``SignerRootMissing``), naming ``trust pin``;
2. the updater refreshes from it (a refusal is ``TrustMetadataRefused``). One exception,
   for a signer of the top-level targets only: when a root rotation changed the targets
   keys, the registry's current targets no longer verifies until the admins sign the next
   one, and the change is then computed against the targets this machine verified last
   (it no longer verifies against the current root either: that is how a rotation is told
   from a forged targets, which is refused);
3. the role as verified: the top-level targets, or a delegated role at the version the
   verified snapshot lists, checked against its delegation. A listed version that does not
   verify (its signers' keys were revoked since) is no version a worker accepts: the role
   then has none, and ``note`` says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from tuf.api.exceptions import RepositoryError
from tuf.api.metadata import DelegatedRole, Metadata, Root, Snapshot, Targets
from tuf.api.serialization import DeserializationError
from tuf.ngclient import Updater

from modelward.loader.errors import InputError
from modelward.loader.tuf_resolve import (
    GivenRoot,
    _empty,
    _refused,
    _repin_command,
    _trusted,
    check_pin,
    metadata_dir,
)

if TYPE_CHECKING:
    from modelward.loader.source import RegistrySource

__all__ = ["SignerRootMissing", "VerifiedRole", "verified_role"]


class SignerRootMissing(InputError):  # noqa: N818 - named after what is missing
    """No root is pinned for the registry on the signer's machine, and none was given."""


@dataclass(frozen=True)
class VerifiedRole:
    """``role`` as the signer's client verified it now."""

    role: str
    data: bytes | None  # the verified current version's bytes; None: it has none
    delegation: DelegatedRole | None  # in the verified top-level targets (None: targets)
    root: bytes  # the root this machine trusts now, reached from its pin through signed rotations
    note: str | None = None  # why a version the snapshot lists is not the one shown

    @property
    def root_version(self) -> int:
        return Metadata[Root].from_bytes(self.root).signed.version


def _refresh(
    client: RegistrySource, metadata: Path, given: GivenRoot | None, role: str
) -> tuple[Updater, bytes | None]:
    """(2): an updater refreshed from the signer's root, as ``Updater.refresh`` does it
    (root chain, timestamp, snapshot, top-level targets), and the top-level targets this
    machine verified last when the current one no longer verifies (a root rotation changed
    the targets keys, and the admins are about to sign the next targets: only a targets
    signer gets past that). A first pin that fails is not kept."""
    first_pin = not (metadata / "root.json").exists()
    metadata.mkdir(parents=True, exist_ok=True)
    kept = metadata / "targets.json"
    last_targets = kept.read_bytes() if kept.exists() else None
    what = f"signing {role}"
    try:
        updater = Updater(
            metadata_dir=str(metadata),
            metadata_base_url=client.tuf_url.rstrip("/") + "/",
            fetcher=client.tuf_fetcher(),
            bootstrap=given.data if first_pin and given is not None else None,
        )
        # python-tuf's refresh, step by step (tuf.ngclient.Updater.refresh)
        updater._load_root()
        updater._load_timestamp()
        updater._load_snapshot()
        try:
            updater._load_targets(Targets.type, Root.type)
        except RepositoryError:
            if role != Targets.type or not _rotated_away(metadata, last_targets):
                raise
            return updater, last_targets
    except RepositoryError as exc:
        if first_pin:
            _empty(metadata)
        raise _refused(what, exc) from exc
    except BaseException:
        if first_pin:
            _empty(metadata)
        raise
    return updater, None


def _rotated_away(metadata: Path, last_targets: bytes | None) -> bool:
    """Whether the targets this machine verified last no longer verifies against the root
    it trusts now (a rotation changed the targets keys since). When it still does, a current
    targets that fails is the registry's fault, and nothing is signed."""
    if last_targets is None:
        return False
    try:
        md = Metadata[Targets].from_bytes(last_targets)
        _trusted(metadata, Root.type).signed.verify_delegate(
            Targets.type, md.signed_bytes, md.signatures
        )
    except (RepositoryError, ValueError, DeserializationError):
        return True
    return False


def verified_role(
    client: RegistrySource, cache_root: Path, given: GivenRoot | None, role: str
) -> VerifiedRole:
    """``role`` verified from the signer's pinned root (steps in the module docstring).
    Raises ``SignerRootMissing``, ``PinnedRootMismatch`` or ``TrustMetadataRefused``."""
    metadata = metadata_dir(cache_root, client.base_url)
    # (1): the signer's root
    if given is not None:
        check_pin(metadata, given, _repin_command(given, cache_root))
    elif not (metadata / "root.json").exists():
        raise SignerRootMissing(
            "signing needs this registry's TUF root pinned on this machine, to check what "
            "is signed against metadata verified here (the registry is not trusted to say "
            "what changes): run `modelward trust pin --trust-root root.json` once (a root "
            "your admins gave you, checked out of band), or set MODELWARD_TRUST_ROOT "
            f"(cache {cache_root})"
        )
    # (2): the updater, from that root
    updater, last_targets = _refresh(client, metadata, given, role)
    root = (metadata / "root.json").read_bytes()
    # (3): the role as verified
    if role == Targets.type:
        if last_targets is not None:
            return VerifiedRole(
                role,
                last_targets,
                None,
                root,
                note="the registry's current targets does not verify against the root "
                "trusted here (its targets keys changed): compared with the targets this "
                "machine verified last",
            )
        return VerifiedRole(role, (metadata / "targets.json").read_bytes(), None, root)
    top = _trusted(metadata, Targets.type)
    delegations = top.signed.delegations
    delegation = (delegations.roles or {}).get(role) if delegations is not None else None
    listed = _trusted(metadata, Snapshot.type).signed.meta.get(f"{role}.json")
    if delegation is None or listed is None:
        return VerifiedRole(role, None, delegation, root)
    try:
        updater._load_targets(role, Targets.type)
    except RepositoryError as exc:
        return VerifiedRole(
            role,
            None,
            delegation,
            root,
            note=f"{role} v{listed.version} does not verify against its delegation "
            f"({type(exc).__name__}: {exc}): no worker accepts it",
        )
    data = (metadata / f"{quote(role, safe='')}.json").read_bytes()
    return VerifiedRole(role, data, delegation, root)
