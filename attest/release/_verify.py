"""The one decision about a release record file: ``verify_record`` (docs/release.md).

Offline and pure: the file's bytes, the caller's pinned ``root.json`` and the public keys
the caller trusts go in; a ``VerifiedRecord`` comes out, or ``ReleaseRecordInvalid`` naming
the check and the field. The checks run in the order of the spec, as python-tuf's
``TrustedMetadataSet`` does: nothing read from the file decides whom to trust before the
check that verifies it.

1. file: the bytes are within the limit and exactly their canonical form (RFC 8785 JSON,
   one newline, standard base64), so any changed byte shows;
2. tuf: the statement, read unverified only to find the TUF metadata it embeds, is a
   release record about one bundle; the root chain verifies from the pinned root, the
   top-level targets (every version from the oldest embedded to the newest, no gap) by the
   newest root, every version of the alias's role (1 to the last embedded) by their
   delegation (python-tuf ``verify_delegate``); the record's version is a signed move of
   the alias to exactly the subject digest; the role versions from that move on verify by
   the newest targets' delegation (a key removed from the role since counts for nothing
   the record claims); and the moves it claims (``history``) are exactly those the
   verified role versions make;
3. signature: the envelope verifies (attest.dsse) with a key the verified chain holds for
   this record (the top-level targets' or the alias role's) or one the caller gave;
4. envelopes: every embedded envelope is about the subject and verifies (attest.dsse)
   where a key of the verified metadata, or one the caller gave, claims a signature;
5. digests: every digest the record states matches the embedded bytes it names;
6. rollouts: the rollouts of the release (``_rollouts``) are exactly the plans the alias's
   verified role signed between the previous move and this one, each with the steps
   ``ORG:NAME@=rollout`` signed for it (verified by the top-level targets' delegation), in
   an order the plan allows, and the signed abort reason; the registry's times, verdicts
   and rollback figures are noted as unsigned.

Expiry is not checked: a record is about the past (docs/release.md#what-it-does-not-prove).
"""

from __future__ import annotations

import base64
import binascii
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import rfc8785
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from securesystemslib.signer import Key
from tuf.api.exceptions import RepositoryError
from tuf.api.metadata import Metadata, Root, Targets
from tuf.api.serialization import DeserializationError

from modelward.attest.dsse import EnvelopeLimits, verify_envelope
from modelward.attest.errors import UntrustedSigner, VerificationError
from modelward.attest.keys import keyid
from modelward.attest.release._digests import check_digests
from modelward.attest.release._model import (
    ATTESTATION_SECTIONS,
    PREDICATE_TYPE,
    PinnedRootError,
    RecordKeyRefused,
    RecordLimits,
    ReleaseRecordInvalid,
    VerifiedRecord,
    b64,
    canonical_b64,
    embedded,
    get,
)
from modelward.attest.release._moves import signed_moves
from modelward.attest.release._rollout_check import check_rollouts
from modelward.attest.statement import parse_statement, strict_json_loads
from modelward.attest.trust import Subject, TrustedKey, TrustSet, VerifiedStatement
from modelward.attest.tuf import alias_path, online_role, public_key_of

__all__ = ["record_signing_keys", "verify_record", "verify_record_key"]


@dataclass(frozen=True)
class _Statement:
    """The record's statement as check (2) read it, before anything verified it."""

    payload: bytes
    predicate: Mapping[str, Any]
    digest: str
    repository: str
    alias: str
    version: int


@dataclass(frozen=True)
class _Chain:
    """What check (2) verified: the alias's role and the keys of the verified metadata."""

    role: str
    targets_version: int  # the newest embedded top-level targets: the record is as of it
    record_keys: dict[str, PublicKeyTypes]  # may sign the record: top-level targets, the role
    metadata_keys: dict[str, PublicKeyTypes]  # every key the verified root and targets hold
    role_versions: tuple[Metadata[Targets], ...] = ()  # the alias's role, 1 on, verified
    targets: tuple[Metadata[Targets], ...] = ()  # the top-level targets, oldest first, verified


def verify_record(
    data: bytes,
    trust_root: bytes,
    public_keys: Sequence[PublicKeyTypes] = (),
    limits: RecordLimits = RecordLimits(),
) -> VerifiedRecord:
    """Verify a release record file offline against ``trust_root`` (root.json bytes) and
    ``public_keys`` the caller trusts besides the chain's. Checks 1-6 in order
    (docs/release.md#modelward-release-verify); returns what was established.

    Raises ReleaseRecordInvalid naming the check and the field at fault; PinnedRootError
    when ``trust_root`` is not TUF root metadata signed by its own keys (a wrong file given).
    """
    pinned = _pinned(trust_root)
    extra = {keyid(k): k for k in public_keys}
    notes: list[str] = []
    # (1): file: within the limit, and exactly its canonical form.
    envelope = _check_file(data, limits)
    # (2): tuf: the chain from the pinned root names the subject for the alias.
    statement = _read_statement(envelope)
    chain = _check_tuf(statement, pinned)
    # (3): signature: attest.dsse, with the keys the verified chain holds for this record.
    verified = _check_signature(
        data,
        envelope,
        statement,
        role=chain.role,
        keys={**chain.record_keys, **extra},
        limits=limits,
    )
    notes.append(
        f"tuf: as of top-level targets version {chain.targets_version}, the newest the record "
        "holds; a newer one is not proven absent (docs/release.md#what-it-does-not-prove)"
    )
    notes += [f"envelope: {note}" for note in verified.notes]
    predicate = verified.statement["predicate"]
    # (4): envelopes: about the subject; verified where a key of the chain claims them.
    _check_envelopes(predicate, statement.digest, {**chain.metadata_keys, **extra}, notes)
    # (5): digests: every digest the record states matches the bytes it names.
    check_digests(predicate, statement.digest, statement.version, notes)
    # (6): rollouts: the plans and steps of this release, as the verified chain signs them.
    check_rollouts(
        predicate,
        repository=statement.repository,
        alias=statement.alias,
        version=statement.version,
        digest=statement.digest,
        role_versions=chain.role_versions,
        targets=chain.targets,
        notes=notes,
    )
    return VerifiedRecord(
        repository=statement.repository,
        alias=statement.alias,
        version=statement.version,
        digest=statement.digest,
        signers=tuple(s.detail for s in verified.signers),
        predicate=predicate,
        notes=tuple(notes),
    )


def verify_record_key(statement: bytes, trust_root: bytes, public_key: PublicKeyTypes) -> str:
    """Refuse, before a record is signed, a key ``verify_record`` would not trust for it:
    check (2) on ``statement`` (the record's statement bytes) against ``trust_root``, then
    check (3)'s rule (``record_signing_keys``). Returns the alias's role.

    Raises RecordKeyRefused naming the key and the role; ReleaseRecordInvalid when the
    statement's TUF metadata does not verify; PinnedRootError as ``verify_record``."""
    pinned = _pinned(trust_root)
    chain = _check_tuf(_read_statement({"payload": b64(statement)}), pinned)
    kid = keyid(public_key)
    if kid not in chain.record_keys:
        raise RecordKeyRefused(kid, chain.role)
    return chain.role


def _pinned(trust_root: bytes) -> Metadata[Root]:
    """The caller's root, loaded as python-tuf loads its trusted root: signed by its own
    root keys. Raises PinnedRootError."""
    try:
        pinned: Metadata[Root] = Metadata[Root].from_bytes(trust_root)
    except DeserializationError as exc:
        raise PinnedRootError(f"not TUF root metadata: {exc}") from None
    if not isinstance(pinned.signed, Root):
        raise PinnedRootError("not TUF root metadata")
    try:
        pinned.verify_delegate(Root.type, pinned)
    except RepositoryError as exc:
        raise PinnedRootError(
            f"root version {pinned.signed.version} is not signed by its own root keys: {exc}"
        ) from None
    return pinned


def _check_file(data: bytes, limits: RecordLimits) -> Any:
    """Check (1). The file is within ``limits`` and exactly its canonical form: RFC 8785 JSON
    and one newline, and standard padded base64 where base64 would also accept another
    spelling of the same bytes. Returns the parsed JSON; its structure is attest.dsse's to
    judge in (3)."""
    if len(data) > limits.max_bytes:
        raise ReleaseRecordInvalid(
            1, "file", f"{len(data)} bytes, over the limit of {limits.max_bytes}"
        )
    try:
        parsed = strict_json_loads(data, "the file")
        canonical = rfc8785.dumps(parsed) + b"\n"
    except VerificationError as exc:
        raise ReleaseRecordInvalid(1, "file", str(exc)) from None
    except rfc8785.CanonicalizationError as exc:
        raise ReleaseRecordInvalid(1, "file", f"has no canonical form: {exc}") from None
    if data != canonical:
        raise ReleaseRecordInvalid(
            1,
            "file",
            "not in canonical form (RFC 8785 JSON and one "
            "newline): the file was changed after it was written",
        )
    if isinstance(parsed, dict):
        if isinstance(parsed.get("payload"), str):
            canonical_b64(parsed["payload"], "envelope.payload", 1)
        signatures = parsed.get("signatures")
        for i, sig in enumerate(signatures if isinstance(signatures, list) else ()):
            if isinstance(sig, dict) and isinstance(sig.get("sig"), str):
                canonical_b64(sig["sig"], f"envelope.signatures[{i}].sig", 1)
    return parsed


def _unverified_statement(
    envelope: Any, where: str, statement_at: str, check: int
) -> tuple[bytes, Mapping[str, Any], str, tuple[Subject, ...]]:
    """The statement inside a DSSE envelope, read WITHOUT verifying it: its payload bytes
    and what attest.statement parses from them. Only ``payload`` is read; the envelope is
    attest.dsse's to verify, and nothing read here counts until it has."""
    payload = envelope.get("payload") if isinstance(envelope, dict) else None
    if not isinstance(payload, str):
        raise ReleaseRecordInvalid(check, f"{where}.payload", "missing: not a DSSE envelope")
    try:
        raw = base64.b64decode(payload.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error) as exc:
        raise ReleaseRecordInvalid(check, f"{where}.payload", f"not base64: {exc}") from None
    try:
        statement, predicate_type, subjects = parse_statement(raw)
    except VerificationError as exc:
        raise ReleaseRecordInvalid(check, statement_at, str(exc)) from None
    return raw, statement, predicate_type, subjects


def _read_statement(envelope: Any) -> _Statement:
    """Check (2), first: the statement is a release record about one bundle, read only to
    find the TUF metadata that says who may have signed it (verified in (3))."""
    payload, statement, predicate_type, subjects = _unverified_statement(
        envelope, "envelope", "statement", 2
    )
    if predicate_type != PREDICATE_TYPE:
        raise ReleaseRecordInvalid(
            2, "statement.predicateType", f"{predicate_type!r}, not {PREDICATE_TYPE!r}"
        )
    if len(subjects) != 1 or "sha256" not in subjects[0].digest:
        raise ReleaseRecordInvalid(2, "statement.subject", "must be exactly one sha256 subject")
    digest = "sha256:" + subjects[0].digest["sha256"]
    predicate = statement["predicate"]
    if get(predicate, "record.digest", str, 2) != digest:
        raise ReleaseRecordInvalid(2, "record.digest", f"is not the subject {digest}")
    return _Statement(
        payload=payload,
        predicate=predicate,
        digest=digest,
        repository=get(predicate, "record.repository", str, 2),
        alias=get(predicate, "record.alias", str, 2),
        version=get(predicate, "record.version", int, 2),
    )


def _load_md(data: bytes, cls: type[Root] | type[Targets], where: str) -> Metadata[Any]:
    try:
        md: Metadata[Any] = Metadata.from_bytes(data)
    except DeserializationError as exc:
        raise ReleaseRecordInvalid(2, where, f"not TUF metadata: {exc}") from None
    if not isinstance(md.signed, cls):
        raise ReleaseRecordInvalid(2, where, f"not {cls.type} metadata")
    return md


def _root_chain(tuf: Mapping[str, Any], pinned: Metadata[Root]) -> Metadata[Root]:
    """The newest root reached from ``pinned`` through the embedded roots (TUF 5.3.4: each
    new root signed by the threshold of the previous one and its own)."""
    trusted = pinned
    roots = [
        _load_md(embedded(item, f"tuf.roots[{i}]", 2), Root, f"tuf.roots[{i}]")
        for i, item in enumerate(get(tuf, "roots", list, 2))
    ]
    for i, md in sorted(enumerate(roots), key=lambda pair: int(pair[1].signed.version)):
        if md.signed.version <= trusted.signed.version:
            continue
        if md.signed.version != trusted.signed.version + 1:
            raise ReleaseRecordInvalid(
                2,
                f"tuf.roots[{i}]",
                f"root version {md.signed.version} does not follow {trusted.signed.version}",
            )
        try:
            trusted.verify_delegate(Root.type, md)
            md.verify_delegate(Root.type, md)
        except RepositoryError as exc:
            raise ReleaseRecordInvalid(
                2,
                f"tuf.roots[{i}]",
                f"root version {md.signed.version}: {type(exc).__name__}: {exc}",
            ) from None
        trusted = md
    return trusted


def _usable(keyids: Iterable[str], keys: Mapping[str, Key]) -> dict[str, PublicKeyTypes]:
    """The keys named by ``keyids`` that modelward can verify with (attest.tuf.public_key_of)."""
    found = {kid: public_key_of(keys[kid]) for kid in keyids if kid in keys}
    return {kid: key for kid, key in found.items() if key is not None}


def _check_tuf(statement: _Statement, pinned: Metadata[Root]) -> _Chain:
    """Check (2), then: the root chain from the pinned root, the top-level targets by the
    newest root, every version of the alias's role by a delegation of those targets
    (python-tuf ``verify_delegate``, the checks a worker's updater makes), the versions from
    the recorded move on by the newest targets' delegation, and the moves the record claims
    are the signed moves those versions make. Returns the role and the keys of that verified
    metadata."""
    tuf = get(statement.predicate, "tuf", dict, 2)
    path = alias_path(statement.repository, statement.alias)
    # (2a): the root chain, from the root the caller pinned.
    trusted = _root_chain(tuf, pinned)
    # (2b): each top-level targets version, by the newest root's targets keys, with no gap
    # from the oldest embedded to the newest; each delegates the alias to the role the
    # record names.
    role_entry = get(tuf, "role", dict, 2)
    role_name = get(role_entry, "name", str, 2)
    all_targets = _targets_versions(tuf, trusted, path, role_name)
    # (2c): every version of the role, 1 to the last embedded, by a delegation of (2b):
    # before the recorded move, the targets of their time may vouch for them ((2e) then
    # holds the rest to the newest).
    role_mds = _role_versions(tuf, all_targets, role_name)
    # (2d): the record's version is a signed move of the alias to exactly the subject.
    moves = signed_moves(path, role_mds)
    version = statement.version
    move = moves[version - 1] if 1 <= version <= len(moves) else None
    if move is None or move["to_digest"] != statement.digest:
        named = None if move is None else move["to_digest"]
        raise ReleaseRecordInvalid(
            2,
            "record.version",
            f"{role_name} versions 1 to {len(role_mds)} make {len(moves)} signed move(s) of "
            f"{path}; move {version} is to {named}, not the subject {statement.digest}",
        )
    if get(role_entry, "version", int, 2) != move["role_version"]:
        raise ReleaseRecordInvalid(
            2,
            "tuf.role.version",
            f"{role_entry['version']}, but {role_name} version {move['role_version']} made "
            f"move {version}",
        )
    # (2e): from the recorded move on, every role version verifies by the delegation of the
    # newest targets: the keys that made the move, and the next, are the keys the role has
    # as of the record, not keys an older targets version gave it and a newer one removed.
    newest = all_targets[-1]
    _current_from(role_mds, newest, role_name, move["role_version"])
    # (2f): the moves the record claims (``history``) are exactly the signed ones: this move
    # and the next, each made by a verified role version; nothing else is claimed.
    claimed = get(statement.predicate, "history", list, 2)
    signed = moves[version - 1 : version + 1]
    if claimed != signed:
        raise ReleaseRecordInvalid(
            2,
            "history",
            f"claims {_moves_text(claimed)}; the signed versions of {role_name} make "
            f"{_moves_text(signed)}: a move not backed by a signed role version",
        )
    root = trusted.signed
    return _Chain(
        role=role_name,
        targets_version=int(newest.signed.version),
        role_versions=tuple(role_mds),
        targets=tuple(all_targets),
        record_keys=record_signing_keys(trusted, newest, role_name, statement.repository),
        metadata_keys={
            **_usable(root.keys, root.keys),
            **{
                k: v
                for md in all_targets
                for k, v in _usable(
                    (md.signed.delegations.keys or {}) if md.signed.delegations else {},
                    (md.signed.delegations.keys or {}) if md.signed.delegations else {},
                ).items()
            },
        },
    )


def record_signing_keys(
    root: Metadata[Root], targets: Metadata[Targets], role: str, repository: str
) -> dict[str, PublicKeyTypes]:
    """The one rule for who may sign a release record (check 3, and ``release record --key``
    through ``verify_record_key``): the top-level targets keys of the verified ``root``, and
    the keys ``targets`` delegates ``role`` to; never the registry's online alias key of an
    ``ORG:NAME@online`` role: it may vouch for an online alias, but a record signed with it
    would be the registry's word about its own evidence, approvals and audit log."""
    keys = _usable(root.signed.roles[Targets.type].keyids, root.signed.keys)
    delegations = targets.signed.delegations
    if role != online_role(repository) and delegations is not None and delegations.roles:
        delegated = delegations.roles.get(role)
        if delegated is not None:
            keys.update(_usable(delegated.keyids, delegations.keys or {}))
    return keys


def _moves_text(moves: Sequence[Any]) -> str:
    if not moves:
        return "no move"
    return "; ".join(
        f"move {m.get('move')} at role version {m.get('role_version')} "
        f"{m.get('from_digest')} -> {m.get('to_digest')}"
        if isinstance(m, dict)
        else repr(m)
        for m in moves
    )


def _targets_versions(
    tuf: Mapping[str, Any], trusted: Metadata[Root], path: str, role_name: str
) -> list[Metadata[Targets]]:
    """Check (2b): the embedded top-level targets versions, oldest first, each signed by the
    targets keys of the newest root and delegating ``path`` to ``role_name``, with no gap
    between the oldest and the newest (a missing version could hide a change of the
    role's keys)."""
    found: list[Metadata[Targets]] = []
    entries = get(tuf, "targets", list, 2)
    if not entries:
        raise ReleaseRecordInvalid(2, "tuf.targets", "holds no top-level targets version")
    for i, item in enumerate(entries):
        where = f"tuf.targets[{i}]"
        md = _load_md(embedded(item, where, 2), Targets, where)
        try:
            trusted.verify_delegate(Targets.type, md)
        except RepositoryError as exc:
            raise ReleaseRecordInvalid(
                2,
                where,
                f"not signed by the targets keys of the trust root's chain (root "
                f"version {trusted.signed.version}; a root of another registry?): "
                f"{type(exc).__name__}: {exc}",
            ) from None
        delegations = md.signed.delegations
        deciding = None
        if delegations is not None and delegations.roles is not None:
            deciding = next((name for name, _ in delegations.get_roles_for_target(path)), None)
        if deciding != role_name:
            raise ReleaseRecordInvalid(
                2,
                "tuf.role.name",
                f"{role_name!r}, but targets version {md.signed.version} delegates {path} "
                f"to {deciding!r}",
            )
        found.append(md)
    found.sort(key=lambda md: int(md.signed.version))
    versions = [int(md.signed.version) for md in found]
    for older, newer in itertools.pairwise(versions):
        if newer != older + 1:
            raise ReleaseRecordInvalid(
                2,
                "tuf.targets",
                f"holds top-level targets versions {_versions_text(versions)}: "
                + (
                    f"version {newer} twice"
                    if newer == older
                    else f"version {older + 1} is missing"
                    if newer == older + 2
                    else f"versions {older + 1} to {newer - 1} are missing"
                )
                + "; the record must hold every version from the oldest it embeds to the "
                "newest, with no gap (a missing version could hide a change of the role's keys)",
            )
    return found


def _versions_text(versions: Sequence[int]) -> str:
    shown = ", ".join(str(v) for v in versions[:10])
    return shown + (f", ... ({len(versions)} in all)" if len(versions) > 10 else "")


def _current_from(
    role_mds: Sequence[Metadata[Targets]],
    newest: Metadata[Targets],
    role_name: str,
    first: int,
) -> None:
    """Check (2e): role versions ``first`` (the recorded move's) to the last embedded verify
    by the delegation of ``newest``, the newest embedded top-level targets."""
    for md in role_mds[first - 1 :]:
        try:
            newest.verify_delegate(role_name, md)
        except RepositoryError as exc:
            raise ReleaseRecordInvalid(
                2,
                f"tuf.role_versions[{int(md.signed.version) - 1}]",
                f"{role_name} version {md.signed.version} (at or after the recorded move, "
                f"role version {first}) fails the delegation of the newest top-level targets, "
                f"version {newest.signed.version}: {type(exc).__name__}: {exc}; only the "
                "keys the role has as of the record vouch for the move and what follows it "
                "(a key removed from the role since counts for nothing)",
            ) from None


def _role_versions(
    tuf: Mapping[str, Any], all_targets: Sequence[Metadata[Targets]], role_name: str
) -> list[Metadata[Targets]]:
    """Check (2c): the role's versions 1, 2, ... (no gap: a missing version could hide a
    move), each verified by the delegation of one of the verified targets versions."""
    mds: list[Metadata[Targets]] = []
    for i, item in enumerate(get(tuf, "role_versions", list, 2)):
        where = f"tuf.role_versions[{i}]"
        md = _load_md(embedded(item, where, 2), Targets, where)
        if md.signed.version != i + 1:
            raise ReleaseRecordInvalid(
                2,
                where,
                f"{role_name} version {md.signed.version} where version {i + 1} was expected: "
                "the record must hold every version of the role from 1, in order",
            )
        failures = []
        for targets in reversed(all_targets):
            try:
                targets.verify_delegate(role_name, md)
                break
            except RepositoryError as exc:
                failures.append(f"targets version {targets.signed.version}: {exc}")
        else:
            raise ReleaseRecordInvalid(
                2,
                where,
                f"{role_name} version {md.signed.version} fails its delegation: "
                + "; ".join(failures),
            )
        mds.append(md)
    if not mds:
        raise ReleaseRecordInvalid(2, "tuf.role_versions", f"holds no version of {role_name}")
    return mds


def _trust(keys: Mapping[str, PublicKeyTypes]) -> TrustSet:
    return TrustSet(keys=tuple(TrustedKey(kid, kid, key) for kid, key in sorted(keys.items())))


def _line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def _check_signature(
    data: bytes,
    envelope: Any,
    statement: _Statement,
    *,
    role: str,
    keys: Mapping[str, PublicKeyTypes],
    limits: RecordLimits,
) -> VerifiedStatement:
    """Check (3). The file verifies as a DSSE envelope (attest.dsse) with a key of the top-level
    targets or of the alias's role in the chain (2) verified, or a key the caller gave; every
    trusted signature is filed under its own keyid (a changed keyid shows). Signatures by
    other keys are ignored and noted, as TUF ignores them."""
    envelope_limits = EnvelopeLimits(
        max_bytes=limits.max_bytes, max_signatures=limits.max_signatures
    )
    try:
        verified = verify_envelope(data, _trust(keys), envelope_limits)
    except UntrustedSigner as exc:
        raise ReleaseRecordInvalid(
            3,
            "envelope.signatures",
            f"no signature by a key of the top-level targets or of "
            f"{role} in the verified chain, nor by a --public-key: {_line(exc)}",
        ) from None
    except VerificationError as exc:
        raise ReleaseRecordInvalid(3, "envelope", _line(exc)) from None
    if verified.payload != statement.payload:  # the bytes (2) read; they cannot differ
        raise ReleaseRecordInvalid(3, "envelope.payload", "is not the statement check 2 read")
    hints = {sig.get("keyid", "") for sig in envelope["signatures"]}  # structure: (3) verified
    for signer in verified.signers:
        if signer.detail not in hints:
            raise ReleaseRecordInvalid(
                3,
                "envelope.signatures",
                f"the signature by key {signer.detail} is filed under another keyid",
            )
    return verified


def _check_envelopes(
    predicate: Mapping[str, Any], digest: str, keys: Mapping[str, PublicKeyTypes], notes: list[str]
) -> None:
    """Check (4). Each embedded envelope verifies (attest.dsse) where a key of the verified
    metadata claims a signature, and its statement is about the subject; one signed by no
    such key (a worker's baseline) is read unverified for its subject and noted."""
    trust = _trust(keys)
    for section in ATTESTATION_SECTIONS:
        for i, item in enumerate(get(predicate, section, list, 4)):
            where = f"{section}[{i}]"
            raw = embedded(item, where, 4)
            try:
                subjects = verify_envelope(raw, trust).subjects
            except UntrustedSigner:
                notes.append(
                    f"{where}: signed by no key of the verified metadata; signature not checked"
                )
                try:
                    envelope = strict_json_loads(raw, where)
                except VerificationError as exc:
                    raise ReleaseRecordInvalid(4, where, str(exc)) from None
                subjects = _unverified_statement(envelope, where, f"{where}.statement", 4)[3]
            except VerificationError as exc:
                raise ReleaseRecordInvalid(4, where, _line(exc)) from None
            if not any("sha256:" + s.digest.get("sha256", "") == digest for s in subjects):
                raise ReleaseRecordInvalid(4, where, f"is not about {digest}")
