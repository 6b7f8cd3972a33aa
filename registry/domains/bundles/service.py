"""Bundles: immutable manifests under their digest, judged before they are recorded.

``push`` runs, in order (docs/registry.md#push):
  (1) the caller may publish to the repository (authorization in the query);
  (2) the manifest bytes hash to the digest in the URL;
  (3) the digest is not quarantined, in any repository (quarantine.service);
  (4) an existing bundle with that digest is returned as is (idempotent; tombstoned: 410);
      attestations in the request that it does not hold are listed as ignored, with the
      reason (attach them with POST .../attestations);
  (5) the manifest parses strictly (attest.manifest.parse_manifest);
  (6) every layer and the config blob is stored, with the stated size, and none is a blob of
      a quarantined bundle (409 ``bundle_quarantined``; admins and reviewers excepted): a new
      manifest cannot re-wrap quarantined weights (quarantine.service);
  (7) the one bundle verifier (attest.verifier.verify_bundle) scans every stored layer,
      verifies the attestations and evaluates the repository policy; attestations no
      registered or policy signer signed are ignored and listed with their reason;
  (8) the caller may attach each verified statement's type (auth.authz);
  (9) only then, in one transaction that checks (3) again, the bundle, its verified
      attestations and an audit event are recorded.
"""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, load_only

from modelward.attest.digest import HashedBytes
from modelward.registry.domains._state import AppState, iso
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.authz import require_may_attach
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.blobs.reach import reachable_clause
from modelward.registry.domains.bundles import verdict
from modelward.registry.domains.gc.quota import require_bundle_room
from modelward.registry.domains.quarantine.service import (
    manifest_readable,
    quarantine_of,
    require_no_quarantined_blobs,
    require_not_quarantined,
)
from modelward.registry.domains.repos.listing import (
    InvalidCursor,
    Page,
    check_limit,
    decode_cursor,
    encode_cursor,
    readable_repo,
)
from modelward.registry.domains.repos.service import get_repo, repo_policy, writable_repo
from modelward.registry.errors import (
    BadRequest,
    DigestMismatchError,
    Forbidden,
    Gone,
    InvalidManifest,
    NotFound,
    PayloadTooLarge,
)
from modelward.registry.models import (
    Alias,
    Attestation,
    Blob,
    Bundle,
    BundleBlob,
    Principal,
    Repository,
)

__all__ = ["bundle_json", "find_bundle", "list_bundles", "live_bundle", "push", "tombstone"]


def find_bundle(session: Session, repo: Repository, digest: str) -> Bundle:
    row = session.execute(
        select(Bundle).where(Bundle.repo_id == repo.id, Bundle.digest == digest)
    ).scalar_one_or_none()
    if row is None:
        raise NotFound(f"no bundle {digest} in {repo.name}")
    return row


def live_bundle(session: Session, repo: Repository, digest: str) -> Bundle:
    row = find_bundle(session, repo, digest)
    if row.tombstoned:
        raise Gone(
            f"bundle {digest} in {repo.name} was deleted: {row.tombstone_reason}",
            code="bundle_tombstoned",
        )
    return row


def bundle_json(session: Session, row: Bundle, caller: Caller) -> dict[str, Any]:
    """The bundle record. The manifest (base64) is withheld (null) from callers who may not
    read it (a quarantined digest, except for admins and reviewers); the quarantine itself,
    which every worker refuses, is always shown."""
    creator = session.get(Principal, row.created_by)
    held = quarantine_of(session, row.digest)
    readable = manifest_readable(session, row.digest, caller)
    return {
        "digest": row.digest,
        "manifest": base64.b64encode(row.manifest).decode() if readable else None,
        "quarantined": held is not None,
        "quarantine_reason": held.reason if held is not None else None,
        "quarantined_at": iso(held.quarantined_at) if held is not None else None,
        "tombstoned": row.tombstoned,
        "created_by": creator.name if creator else None,
        "created_at": iso(row.created_at),
        "decision": json.loads(row.decision),
    }


def list_bundles(
    session: Session, caller: Caller, repo_name: str, *, limit: int, cursor: str | None = None
) -> Page:
    """A repository's bundles, newest first, a page at a time (authorization in the query:
    ``repos.listing.readable_repo``). Each: ``{digest, state (live, quarantined or
    tombstoned; tombstoned wins), aliases (the names pointing at it), allowed (the push
    decision), created_by, created_at, quarantined, quarantine_reason, tombstoned,
    tombstone_reason}``; no manifest. Raises NotFound, InvalidCursor."""
    check_limit(limit)
    repo = readable_repo(session, repo_name, caller)
    query = (
        select(Bundle, Principal.name)
        .options(
            load_only(
                Bundle.id,
                Bundle.digest,
                Bundle.decision,
                Bundle.created_at,
                Bundle.tombstoned,
                Bundle.tombstone_reason,
                Bundle.quarantined,
                Bundle.quarantine_reason,
            )
        )
        .outerjoin(Principal, Principal.id == Bundle.created_by)
        .where(Bundle.repo_id == repo.id)
        .order_by(Bundle.id.desc())
        .limit(limit + 1)
    )
    if cursor is not None:
        key = decode_cursor("bundles", cursor)
        if not key.isdigit() or len(key) > 18:
            raise InvalidCursor("invalid cursor for the bundles listing")
        query = query.where(Bundle.id < int(key))
    rows = session.execute(query).all()
    page, more = rows[:limit], len(rows) > limit
    names: dict[str, list[str]] = {}
    digests = {row.digest for row, _ in page}
    if digests:
        for alias, digest in session.execute(
            select(Alias.name, Alias.digest)
            .where(Alias.repo_id == repo.id, Alias.digest.in_(digests))
            .order_by(Alias.name)
        ).tuples():
            names.setdefault(digest, []).append(alias)
    items = [_listed(row, creator, names.get(row.digest, [])) for row, creator in page]
    return Page(items, encode_cursor("bundles", str(page[-1][0].id)) if more else None)


def _listed(row: Bundle, creator: str | None, aliases: list[str]) -> dict[str, Any]:
    state = "tombstoned" if row.tombstoned else "quarantined" if row.quarantined else "live"
    decision = json.loads(row.decision)
    return {
        "digest": row.digest,
        "state": state,
        "aliases": aliases,
        "allowed": bool(decision.get("allowed")) if isinstance(decision, dict) else False,
        "created_by": creator,
        "created_at": iso(row.created_at),
        "quarantined": bool(row.quarantined),
        "quarantine_reason": row.quarantine_reason,
        "tombstoned": row.tombstoned,
        "tombstone_reason": row.tombstone_reason,
    }


def _parse(manifest_bytes: bytes, state: AppState) -> Any:
    from modelward.attest.errors import BundleError
    from modelward.attest.manifest import ManifestLimits, parse_manifest

    try:
        return parse_manifest(
            manifest_bytes, ManifestLimits(max_bytes=state.settings.max_manifest_bytes)
        )
    except BundleError as exc:
        raise InvalidManifest(f"invalid manifest: {exc}", detail=str(exc)) from exc


def _blob_digests(manifest: Any) -> set[str]:
    """The config blob's and every layer's digest."""
    return {manifest.config.digest} | {layer.digest for layer in manifest.layers}


def _missing_blobs(session: Session, manifest: Any, caller: Caller) -> list[dict[str, Any]]:
    """The manifest's blobs that are not stored, or stored with another size. A blob the
    caller may not reach (``blobs.reach``: held only by private repositories he may not read,
    and not uploaded for this push) is "not uploaded": dedup never lends him its bytes."""
    wanted = [("(config)", manifest.config.digest, manifest.config.size)]
    wanted += [(layer.path, layer.digest, layer.size) for layer in manifest.layers]
    found = {
        b.digest: b.size
        for b in session.execute(
            select(Blob).where(
                Blob.digest.in_({d for _, d, _ in wanted}), reachable_clause(caller, Blob.digest)
            )
        ).scalars()
    }
    problems = []
    for path, digest, size in wanted:
        if digest not in found:
            problems.append({"path": path, "digest": digest, "reason": "blob not uploaded"})
        elif found[digest] != size:
            problems.append(
                {
                    "path": path,
                    "digest": digest,
                    "reason": f"stored size {found[digest]} != stated size {size}",
                }
            )
    return problems


def push(
    state: AppState,
    *,
    repo_name: str,
    digest: str,
    manifest_bytes: bytes,
    attestations: list[bytes],
    caller: Caller,
) -> tuple[dict[str, Any], bool, list[dict[str, str]]]:
    """Judge and record a bundle; returns (decision, created, ignored): ``ignored`` names, by
    sha256 and with the reason, each attestation in the request that was not recorded.
    Raises on every refusal."""
    with state.db.read() as session:
        # (1): the caller may publish here.
        repo = writable_repo(session, repo_name, caller)
        # (2): the bytes are the ones the digest names: hashed once for the whole request
        # (no-op when a /v2 PUT already hashed them), the digest kept with them for (5), (7).
        received = HashedBytes(manifest_bytes)
        if received.digest != digest:
            raise DigestMismatchError(
                f"manifest digest mismatch: URL names {digest}, bytes hash to {received.digest}",
                detail={"expected": digest, "actual": received.digest},
            )
        # (3): a quarantined digest is refused in every repository.
        require_not_quarantined(session, digest, caller)
        # (4): immutable and idempotent.
        existing = session.execute(
            select(Bundle).where(Bundle.repo_id == repo.id, Bundle.digest == digest)
        ).scalar_one_or_none()
        if existing is not None:
            live_bundle(session, repo, digest)
            return json.loads(existing.decision), False, _not_held(session, existing, attestations)
        # (5): strict parse.
        manifest = _parse(received, state)
        # (6): every blob present with its stated size.
        missing = _missing_blobs(session, manifest, caller)
        if missing:
            raise BadRequest(
                f"{len(missing)} blob(s) missing or of the wrong size, first: "
                f"{missing[0]['path']}: {missing[0]['reason']}",
                detail=missing,
                code="missing_blobs",
            )
        require_no_quarantined_blobs(session, _blob_digests(manifest), caller)
        policy = repo_policy(repo, state.default_policy_yaml)
        trust = verdict.trust_for(session, repo, policy, state)
    # (7): the one verifier: scan, attestations, policy.
    trusted = verdict.judge(
        state, manifest=manifest, attestations=attestations, policy=policy, trust=trust
    )
    ignored = [
        {"sha256": a.sha256, "reason": f"no registered or policy signer signed it: {a.reason}"}
        for a in trusted.ignored
    ]
    # (9): record everything in one transaction.
    with state.db.write() as session:
        repo = get_repo(session, repo_name, caller)
        require_not_quarantined(session, digest, caller)  # (3) again: quarantined meanwhile
        # (6) again, and the quota: garbage collection deletes under this same write lock
        # (docs/registry.md#storage-hygiene), so the blobs are either still here or refused.
        missing = _missing_blobs(session, manifest, caller)
        if missing:
            raise BadRequest(
                f"{len(missing)} blob(s) were garbage-collected while the push ran, first: "
                f"{missing[0]['path']}: {missing[0]['reason']}; push again",
                detail=missing,
                code="missing_blobs",
            )
        require_no_quarantined_blobs(session, _blob_digests(manifest), caller)  # (6) again
        require_bundle_room(session, repo, manifest, state.settings)
        # (8): who may attach what, from each verified statement.
        for item in trusted.verified:
            stmt = item.statement
            require_may_attach(session, repo, caller, stmt.predicate_type, stmt.kind)
        again = session.execute(
            select(Bundle).where(Bundle.repo_id == repo.id, Bundle.digest == digest)
        ).scalar_one_or_none()
        if again is not None:  # another process recorded it meanwhile
            return json.loads(again.decision), False, _not_held(session, again, attestations)
        decision = trusted.decision
        row = Bundle(
            repo_id=repo.id,
            digest=digest,
            manifest=manifest_bytes,
            decision=json.dumps(decision.as_dict()),
            findings=verdict.findings_to_json(trusted.findings),
            created_by=caller.id,
            created_at=datetime.now(UTC),
            tombstoned=False,
        )
        session.add(row)
        session.flush()
        held = _blob_digests(manifest)
        session.add_all(BundleBlob(bundle_id=row.id, digest=d) for d in sorted(held))
        for item in trusted.verified:
            session.add(attestation_row(row, item.data, item.statement, caller))
        append(
            session,
            actor=caller.name,
            action="bundle.push",
            subject=f"{repo.name}@{digest}",
            details={
                "layers": len(manifest.layers),
                "attestations": len(trusted.verified),
                "ignored_attestations": [i["sha256"] for i in ignored],
                "signers": [s.name for s in decision.signers],
            },
        )
    return decision.as_dict(), True, ignored


def _not_held(session: Session, bundle: Bundle, attestations: list[bytes]) -> list[dict[str, str]]:
    held = set(
        session.execute(
            select(Attestation.sha256).where(
                Attestation.bundle_id == bundle.id, Attestation.is_live()
            )
        ).scalars()
    )
    shas = {"sha256:" + hashlib.sha256(a).hexdigest() for a in attestations}
    reason = "the bundle exists already; attach it with `modelward attestation add`"
    return [{"sha256": s, "reason": reason} for s in sorted(shas - held)]


def attestation_row(bundle: Bundle, data: bytes, stmt: Any, caller: Caller) -> Attestation:
    return Attestation(
        bundle_id=bundle.id,
        kind=stmt.kind,
        predicate_type=stmt.predicate_type,
        data=data,
        sha256="sha256:" + hashlib.sha256(data).hexdigest(),
        signers=json.dumps(
            [{"name": s.name, "kind": s.kind, "detail": s.detail} for s in stmt.signers]
        ),
        created_by=caller.id,
        created_at=datetime.now(UTC),
    )


def tombstone(
    session: Session, *, repo_name: str, digest: str, reason: str, caller: Caller
) -> None:
    if not caller.is_admin:
        raise Forbidden("only an admin may delete (tombstone) a bundle")
    if not reason.strip():
        raise BadRequest("a deletion needs a reason")
    repo = get_repo(session, repo_name, caller)
    row = live_bundle(session, repo, digest)
    row.tombstoned = True
    row.tombstone_reason = reason
    append(
        session,
        actor=caller.name,
        action="bundle.tombstone",
        subject=f"{repo.name}@{digest}",
        details={"reason": reason},
    )


def check_sizes(state: AppState, manifest: bytes, attestations: list[bytes]) -> None:
    if len(manifest) > state.settings.max_manifest_bytes:
        raise PayloadTooLarge(f"manifest larger than {state.settings.max_manifest_bytes} bytes")
    for i, data in enumerate(attestations):
        if len(data) > state.settings.max_attestation_bytes:
            raise PayloadTooLarge(
                f"attestation {i} larger than {state.settings.max_attestation_bytes} bytes"
            )
