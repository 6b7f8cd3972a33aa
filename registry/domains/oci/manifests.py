"""Manifests, tags, referrers and the catalog of ``/v2`` (docs/oci.md#states).

``put`` sorts a pushed manifest, in order:
  (1) the bytes are within ``max_manifest_bytes``, a JSON object, an OCI image manifest
      (an index or a Docker schema is UNSUPPORTED); its digest is sha256 of the bytes;
  (2) with a ``subject`` it is a referrer: exactly one layer holding an attestation of an
      attestation artifactType (media_types), the empty config and a safe layer title
      (``oci_media.check_referrer``), pushed by digest; ``attach_referrer``;
  (3) otherwise it must be a ModelPack bundle: ``bundles.service.push`` judges it (the one
      verifier: strict parse, blobs present, scanner, attestations, policy). A bundle that
      exists is taken as is. A refusal whose only failed checks are about attestations
      (subject, predicate, threshold, builder, source) stores the bytes as ``pending``;
      every other refusal stores nothing;
  (4) pushed by tag: the tag is an alias and moves through ``aliases.service.set_alias``
      (exactly the alias rules: approvals, baselines, replays, compare-and-swap, audit).
      A pending manifest cannot be tagged (DENIED, naming the failed checks).

``attach_referrer`` for a bundle goes through ``attestations.service.attach`` (verified and
stored like any attestation); for a pending subject the attestation is verified against it
(``verdict.verify_attachment``) and held, then the pending manifest is judged again with
every held attestation (``push`` as its original publisher) and becomes a bundle when the
policy passes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.attest import oci_media as mt
from modelward.attest.digest import HashedBytes
from modelward.attest.errors import ManifestError
from modelward.attest.policy import ATTESTATION_STEPS, PolicyDenied
from modelward.registry.domains._state import AppState
from modelward.registry.domains.attestations import service as attestations
from modelward.registry.domains.attestations.repository import live_attestations
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth import authz
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.blobs.service import visible_blob_size
from modelward.registry.domains.blobs.streaming import DIGEST_RE
from modelward.registry.domains.bundles import service as bundles
from modelward.registry.domains.bundles import verdict
from modelward.registry.domains.oci.errors import OciError
from modelward.registry.domains.quarantine.service import readable_digest, require_readable
from modelward.registry.domains.repos.listing import readable_repos
from modelward.registry.domains.repos.service import get_repo, repo_policy
from modelward.registry.errors import NotFound, Refused
from modelward.registry.models import (
    Alias,
    Attestation,
    Blob,
    Bundle,
    OciManifest,
    Principal,
    Repository,
)

__all__ = [
    "ManifestOut",
    "attestation_blob",
    "catalog",
    "get",
    "put",
    "referrers",
    "tags",
]

PENDING, ACCEPTED, REFERRER, HELD = "pending", "accepted", "referrer", "held"
MAX_PAGE = 1000


@dataclass(frozen=True)
class ManifestOut:
    digest: str
    media_type: str
    data: bytes
    state: str  # bundle, pending, accepted, referrer, held
    subject: str | None = None


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _media_type(doc: dict[str, Any]) -> str:
    value = doc.get("mediaType")
    return value if isinstance(value, str) else mt.IMAGE_MANIFEST


# -- reading ----------------------------------------------------------------------------------
def _synthesized(
    session: Session, repo: Repository, subject: str | None = None
) -> dict[str, tuple[bytes, Attestation, str]]:
    """The referrer manifest of every live attestation of the repository's bundles (of the
    bundle ``subject`` when given) that no pushed referrer carries, by manifest digest:
    (manifest bytes, attestation, subject digest)."""
    carried = select(OciManifest.attestation_id).where(
        OciManifest.repo_id == repo.id, OciManifest.attestation_id.is_not(None)
    )
    query = (
        select(Attestation, Bundle.digest, Bundle.manifest)
        .join(Bundle, Bundle.id == Attestation.bundle_id)
        .where(
            Bundle.repo_id == repo.id,
            Attestation.retracted_at.is_(None),
            Attestation.id.not_in(carried),
        )
        .order_by(Attestation.id)
    )
    if subject is not None:
        query = query.where(Bundle.digest == subject)
    rows = session.execute(query).all()
    out: dict[str, tuple[bytes, Attestation, str]] = {}
    for att, bundle_digest, manifest in rows:
        if att.kind not in mt.ARTIFACT_TYPE_BY_KIND:
            continue
        data = mt.referrer_manifest(
            kind=att.kind,
            predicate_type=att.predicate_type,
            attestation_digest=att.sha256,
            attestation_size=len(att.data),
            subject_digest=bundle_digest,
            subject_size=len(manifest),
        )
        out[_digest(data)] = (data, att, bundle_digest)
    return out


def get(state: AppState, *, repo_name: str, reference: str, caller: Caller) -> ManifestOut:
    """The manifest a tag or digest names in the repository; 404 MANIFEST_UNKNOWN.

    Whatever it is stored as here (a bundle, a ``pending`` or ``accepted`` copy, a pushed or
    synthesized referrer), ``require_readable`` is asked about its digest and, for a
    referrer, its subject: a digest quarantined through any repository raises
    Quarantined (403 DENIED) unless ``caller`` is an admin or reviewer."""
    with state.db.read() as session:
        repo = get_repo(session, repo_name, caller)
        digest = reference
        if not DIGEST_RE.fullmatch(reference):
            if reference.startswith("sha256:") or ":" in reference:
                raise OciError(400, "DIGEST_INVALID", f"invalid digest {reference[:100]!r}")
            alias = session.execute(
                select(Alias).where(Alias.repo_id == repo.id, Alias.name == reference)
            ).scalar_one_or_none()
            if alias is None:
                raise OciError(404, "MANIFEST_UNKNOWN", f"no tag {reference!r} in {repo_name}")
            digest = alias.digest
        row = session.execute(
            select(Bundle).where(Bundle.repo_id == repo.id, Bundle.digest == digest)
        ).scalar_one_or_none()
        if row is not None:
            bundles.live_bundle(session, repo, digest)  # tombstoned: 404 MANIFEST_UNKNOWN
            require_readable(session, digest, caller)
            return ManifestOut(digest, mt.IMAGE_MANIFEST, row.manifest, "bundle")
        oci = session.execute(
            select(OciManifest).where(OciManifest.repo_id == repo.id, OciManifest.digest == digest)
        ).scalar_one_or_none()
        if oci is not None:
            require_readable(session, digest, caller)
            if oci.subject is not None:
                require_readable(session, oci.subject, caller)
            return ManifestOut(digest, oci.media_type, oci.manifest, oci.state, oci.subject)
        synth = _synthesized(session, repo).get(digest)
        if synth is not None:
            require_readable(session, synth[2], caller)
            return ManifestOut(digest, mt.IMAGE_MANIFEST, synth[0], REFERRER, synth[2])
    raise OciError(404, "MANIFEST_UNKNOWN", f"no manifest {digest} in {repo_name}")


def attestation_blob(
    state: AppState, *, repo_name: str, digest: str, caller: Caller
) -> bytes | None:
    """The bytes of an attestation of this repository's bundles (a synthesized referrer's
    layer), or the empty config; None when ``digest`` is neither. Quarantined when
    the attestation is about a quarantined bundle (``require_readable``)."""
    if digest == mt.EMPTY_CONFIG_DIGEST:
        return mt.EMPTY_JSON
    with state.db.read() as session:
        repo = get_repo(session, repo_name, caller)
        row = session.execute(
            select(Attestation.data, Bundle.digest)
            .join(Bundle, Bundle.id == Attestation.bundle_id)
            .where(Bundle.repo_id == repo.id, Attestation.sha256 == digest)
            .limit(1)
        ).first()
        if row is None:
            return None
        require_readable(session, row[1], caller)
    return bytes(row[0])


def referrers(
    state: AppState, *, repo_name: str, digest: str, artifact_type: str | None, caller: Caller
) -> list[dict[str, Any]]:
    """Descriptors of every attestation about ``digest`` in the repository (pushed
    referrers, held ones and those attached through ``/v1``), oldest first.
    Quarantined when ``digest`` is quarantined (``require_readable``)."""
    out: list[dict[str, Any]] = []
    with state.db.read() as session:
        repo = get_repo(session, repo_name, caller)
        require_readable(session, digest, caller)
        retracted = select(Attestation.id).where(Attestation.retracted_at.is_not(None))
        pushed = (
            session.execute(
                select(OciManifest)
                .where(
                    OciManifest.repo_id == repo.id,
                    OciManifest.subject == digest,
                    OciManifest.state.in_((REFERRER, HELD)),
                    (OciManifest.attestation_id.is_(None))
                    | OciManifest.attestation_id.not_in(retracted),
                )
                .order_by(OciManifest.id)
            )
            .scalars()
            .all()
        )
        kinds = {
            a_id: (kind, ptype)
            for a_id, kind, ptype in session.execute(
                select(Attestation.id, Attestation.kind, Attestation.predicate_type).where(
                    Attestation.id.in_([r.attestation_id for r in pushed if r.attestation_id])
                )
            )
        }
        for row in pushed:
            doc = json.loads(row.manifest)
            annotations = doc.get("annotations")
            annotations = dict(annotations) if isinstance(annotations, dict) else {}
            if row.attestation_id in kinds:  # what the verifier found it to be
                kind, ptype = kinds[row.attestation_id]
                annotations |= {mt.ANNOTATION_KIND: kind, mt.ANNOTATION_PREDICATE_TYPE: ptype}
            out.append(
                _descriptor(
                    row.digest, len(row.manifest), row.media_type, row.artifact_type, annotations
                )
            )
        for manifest_digest, (data, att, _) in _synthesized(session, repo, digest).items():
            out.append(
                _descriptor(
                    manifest_digest,
                    len(data),
                    mt.IMAGE_MANIFEST,
                    mt.ARTIFACT_TYPE_BY_KIND[att.kind],
                    json.loads(data)["annotations"],
                )
            )
    if artifact_type is not None:
        out = [d for d in out if d.get("artifactType") == artifact_type]
    return out


def _descriptor(
    digest: str, size: int, media_type: str, artifact_type: str | None, annotations: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {"mediaType": media_type, "digest": digest, "size": size}
    if artifact_type:
        out["artifactType"] = artifact_type
    if isinstance(annotations, dict) and annotations:
        out["annotations"] = annotations
    return out


def _page(names: Sequence[str], n: int | None) -> tuple[list[str], bool]:
    limit = MAX_PAGE if n is None else min(n, MAX_PAGE)
    return list(names[:limit]), len(names) > limit


def tags(
    state: AppState, *, repo_name: str, n: int | None, last: str | None, caller: Caller
) -> tuple[list[str], bool]:
    """The repository's aliases in name order after ``last``; (page, more follow). Tags on
    a quarantined digest are left out (``readable_digest``; admins and reviewers see them)."""
    limit = MAX_PAGE if n is None else min(n, MAX_PAGE)
    with state.db.read() as session:
        repo = get_repo(session, repo_name, caller)
        query = (
            select(Alias.name)
            .where(Alias.repo_id == repo.id, readable_digest(Alias.digest, caller))
            .order_by(Alias.name)
        )
        if last:
            query = query.where(Alias.name > last)
        names = list(session.execute(query.limit(limit + 1)).scalars())
    return _page(names, n)


def catalog(
    state: AppState, *, n: int | None, last: str | None, caller: Caller
) -> tuple[list[str], bool]:
    """The names of the repositories ``caller`` may read after ``last``
    (``repos.listing.readable_repos``: a private one he may not read is not listed)."""
    limit = MAX_PAGE if n is None else min(n, MAX_PAGE)
    with state.db.read() as session:
        query = readable_repos(caller).with_only_columns(Repository.name).order_by(Repository.name)
        if last:
            query = query.where(Repository.name > last)
        names = list(session.execute(query.limit(limit + 1)).scalars())
    return _page(names, n)


# -- writing ----------------------------------------------------------------------------------
def _parse_json(state: AppState, body: bytes) -> dict[str, Any]:
    # (1): bounded, a JSON object, an OCI image manifest.
    if len(body) > state.settings.max_manifest_bytes:
        raise OciError(
            413,
            "SIZE_INVALID",
            f"manifest of {len(body)} bytes exceeds the limit of "
            f"{state.settings.max_manifest_bytes} bytes",
        )
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise OciError(400, "MANIFEST_INVALID", f"manifest is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise OciError(400, "MANIFEST_INVALID", "manifest must be a JSON object")
    media = doc.get("mediaType", mt.IMAGE_MANIFEST)
    if media != mt.IMAGE_MANIFEST or doc.get("schemaVersion") != 2:
        raise OciError(
            415,
            "UNSUPPORTED",
            f"manifest mediaType {str(media)[:100]!r}: only OCI image manifests "
            f"({mt.IMAGE_MANIFEST}, schemaVersion 2) are stored here",
        )
    return doc


def _check_tag(reference: str) -> str | None:
    """The tag ``reference`` names (an alias name), or None when it is a digest."""
    from modelward.registry.domains.moves.service import ALIAS_RE

    if DIGEST_RE.fullmatch(reference):
        return None
    if reference.startswith("sha256:") or ":" in reference:
        raise OciError(400, "DIGEST_INVALID", f"invalid digest {reference[:100]!r}")
    if not ALIAS_RE.fullmatch(reference):
        raise OciError(
            400,
            "MANIFEST_INVALID",
            f"invalid tag {reference[:100]!r}: a tag is an alias name "
            "([A-Za-z0-9][A-Za-z0-9._-]{0,99})",
        )
    return reference


def put(
    state: AppState, *, repo_name: str, reference: str, body: bytes, caller: Caller
) -> ManifestOut:
    """Store a pushed manifest and move the tag it was pushed by (module doc)."""
    tag = _check_tag(reference)
    # hashed once for the request: the digest travels with the bytes (bundles.push reuses it)
    body = HashedBytes(body)
    digest = body.digest
    if tag is None and reference != digest:
        raise OciError(
            400,
            "DIGEST_INVALID",
            f"manifest digest mismatch: URL names {reference}, bytes hash to {digest}",
            detail={"expected": reference, "actual": digest},
        )
    doc = _parse_json(state, body)
    with state.db.read() as session:
        get_repo(session, repo_name, caller)
    if "subject" in doc:
        # (2): an attestation as a referrer.
        if tag is not None:
            raise OciError(
                400,
                "UNSUPPORTED",
                "a referrer (a manifest with subject) is pushed by digest: tags "
                "name bundles; find referrers with GET /v2/<name>/referrers/<digest>",
            )
        return attach_referrer(
            state, repo_name=repo_name, digest=digest, body=body, doc=doc, caller=caller
        )
    # (3): a ModelPack bundle, judged by the one verifier.
    art = doc.get("artifactType")
    config = doc.get("config")
    config_type = config.get("mediaType") if isinstance(config, dict) else None
    if art != mt.MODEL_ARTIFACT_TYPE and config_type != mt.MODEL_CONFIG:
        raise OciError(
            415,
            "UNSUPPORTED",
            f"artifactType {str(art)[:100]!r}: this registry stores ModelPack "
            f"bundles ({mt.MODEL_ARTIFACT_TYPE}) and attestations as referrers",
        )
    out = _store_bundle(state, repo_name=repo_name, digest=digest, body=body, caller=caller)
    # (4): the tag is an alias.
    if tag is not None:
        if out.state == PENDING:
            with state.db.read() as session:
                row = _oci_row(session, get_repo(session, repo_name, caller), digest)
                reasons = json.loads(row.reasons) if row is not None else []
            raise OciError(
                403,
                "DENIED",
                f"{repo_name}@{tag} not moved: {digest} is stored as pending, the policy does "
                f"not pass yet: {'; '.join(reasons)}; push its attestations as referrers",
                detail={"state": PENDING, "digest": digest, "reasons": reasons},
            )
        move_tag(state, repo_name=repo_name, tag=tag, digest=digest, caller=caller)
    return out


def move_tag(state: AppState, *, repo_name: str, tag: str, digest: str, caller: Caller) -> None:
    """Move the alias ``tag`` to ``digest`` under the alias rules (unchanged: nothing)."""
    from modelward.registry.domains.aliases.service import set_alias

    with state.db.read() as session:
        repo = get_repo(session, repo_name, caller)
        row = session.execute(
            select(Alias).where(Alias.repo_id == repo.id, Alias.name == tag)
        ).scalar_one_or_none()
        version = 0 if row is None else row.version
        if row is not None and row.digest == digest:
            return
    set_alias(
        state,
        repo_name=repo_name,
        alias=tag,
        digest=digest,
        expected_version=version,
        reason=f"OCI push by {caller.name}",
        rollback=False,
        caller=caller,
    )


def _oci_row(session: Session, repo: Repository, digest: str) -> OciManifest | None:
    return session.execute(
        select(OciManifest).where(OciManifest.repo_id == repo.id, OciManifest.digest == digest)
    ).scalar_one_or_none()


def _pending_reasons(exc: Refused) -> list[str] | None:
    """The failed checks when every one is about attestations (the evaluator's typed
    ``ATTESTATION_STEPS``, read from the ``PolicyDenied`` the refusal came from, never from
    its message or detail), else None."""
    denied = exc.__cause__
    if not isinstance(denied, PolicyDenied):
        return None
    failed = [c for c in denied.decision.checks if not c.passed]
    if failed and all(c.step in ATTESTATION_STEPS for c in failed):
        return [f"{c.name}: {c.message}" for c in failed]
    return None


def _store_bundle(
    state: AppState, *, repo_name: str, digest: str, body: bytes, caller: Caller
) -> ManifestOut:
    with state.db.read() as session:
        repo = get_repo(session, repo_name, caller)
        existing = session.execute(
            select(Bundle).where(Bundle.repo_id == repo.id, Bundle.digest == digest)
        ).scalar_one_or_none()
        if existing is not None:
            bundles.live_bundle(session, repo, digest)
            return ManifestOut(digest, mt.IMAGE_MANIFEST, existing.manifest, "bundle")
        pending = _oci_row(session, repo, digest)
        held = _held_data(state, session, repo, digest) if pending is not None else []
    try:
        bundles.push(
            state,
            repo_name=repo_name,
            digest=digest,
            manifest_bytes=body,
            attestations=held,
            caller=caller,
        )
    except Refused as exc:
        reasons = _pending_reasons(exc)
        if reasons is None:
            raise
        _record_pending(
            state, repo_name=repo_name, digest=digest, body=body, reasons=reasons, caller=caller
        )
        return ManifestOut(digest, mt.IMAGE_MANIFEST, body, PENDING)
    _accepted(state, repo_name=repo_name, digest=digest, caller=caller)
    return ManifestOut(digest, mt.IMAGE_MANIFEST, body, "bundle")


def _held_data(state: AppState, session: Session, repo: Repository, digest: str) -> list[bytes]:
    """The attestation bytes of the referrers held for a pending ``digest``."""
    rows = (
        session.execute(
            select(OciManifest)
            .where(
                OciManifest.repo_id == repo.id,
                OciManifest.subject == digest,
                OciManifest.state == HELD,
            )
            .order_by(OciManifest.id)
        )
        .scalars()
        .all()
    )
    out = []
    for row in rows:
        layer = json.loads(row.manifest)["layers"][0]
        if session.get(Blob, layer["digest"]) is None:  # collected: push the referrer again
            continue
        out.append(b"".join(state.store.read(layer["digest"])))
    return out


def _record_pending(
    state: AppState, *, repo_name: str, digest: str, body: bytes, reasons: list[str], caller: Caller
) -> None:
    with state.db.write() as session:
        repo = get_repo(session, repo_name, caller)
        row = _oci_row(session, repo, digest)
        if row is None:
            session.add(
                OciManifest(
                    repo_id=repo.id,
                    digest=digest,
                    media_type=mt.IMAGE_MANIFEST,
                    artifact_type=mt.MODEL_ARTIFACT_TYPE,
                    subject=None,
                    state=PENDING,
                    manifest=body,
                    reasons=json.dumps(reasons),
                    attestation_id=None,
                    created_by=caller.id,
                    created_at=datetime.now(UTC),
                )
            )
            append(
                session,
                actor=caller.name,
                action="oci.manifest.pending",
                subject=f"{repo_name}@{digest}",
                details={"reasons": reasons},
            )
        else:
            row.reasons = json.dumps(reasons)


def _accepted(state: AppState, *, repo_name: str, digest: str, caller: Caller) -> None:
    """A pending manifest became a bundle: it and its held referrers point at the bundle's
    stored attestations."""
    with state.db.write() as session:
        repo = get_repo(session, repo_name, caller)
        row = _oci_row(session, repo, digest)
        if row is None:
            return
        bundle = bundles.find_bundle(session, repo, digest)
        row.state = ACCEPTED
        row.reasons = "[]"
        stored = {a.sha256: a.id for a in session.execute(live_attestations(bundle.id)).scalars()}
        held = (
            session.execute(
                select(OciManifest).where(
                    OciManifest.repo_id == repo.id,
                    OciManifest.subject == digest,
                    OciManifest.state == HELD,
                )
            )
            .scalars()
            .all()
        )
        for ref in held:
            layer = json.loads(ref.manifest)["layers"][0]
            ref.state = REFERRER
            ref.attestation_id = stored.get(layer["digest"])
        append(
            session,
            actor="registry",
            action="oci.manifest.accepted",
            subject=f"{repo_name}@{digest}",
            details={"referrers": len(held)},
        )


# -- referrers --------------------------------------------------------------------------------
def _referrer_parts(state: AppState, doc: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(subject digest, artifactType, the one layer) of a pushed referrer; MANIFEST_INVALID."""
    subject = doc.get("subject")
    if not isinstance(subject, dict) or not DIGEST_RE.fullmatch(str(subject.get("digest"))):
        raise OciError(400, "MANIFEST_INVALID", "subject must be a descriptor with a sha256 digest")
    config = doc.get("config")
    config_type = config.get("mediaType") if isinstance(config, dict) else None
    art = doc.get("artifactType") or config_type
    if art not in mt.ATTESTATION_ARTIFACT_TYPES:
        raise OciError(
            415,
            "UNSUPPORTED",
            f"artifactType {str(art)[:100]!r}: referrers stored here are "
            f"attestations ({', '.join(sorted(mt.ATTESTATION_ARTIFACT_TYPES))})",
        )
    layers = doc.get("layers")
    if not isinstance(layers, list) or len(layers) != 1 or not isinstance(layers[0], dict):
        raise OciError(
            400, "MANIFEST_INVALID", "a referrer carries exactly one layer: the attestation"
        )
    try:  # what it claims: the empty config, a safe layer title (the bundles' rules)
        mt.check_referrer(doc, str(art))
    except ManifestError as exc:
        raise OciError(400, "MANIFEST_INVALID", str(exc)) from exc
    layer = layers[0]
    if not DIGEST_RE.fullmatch(str(layer.get("digest"))) or not isinstance(layer.get("size"), int):
        raise OciError(400, "MANIFEST_INVALID", "layers[0] needs a sha256 digest and a size")
    if layer["size"] > state.settings.max_attestation_bytes:
        raise OciError(
            413,
            "SIZE_INVALID",
            f"attestation of {layer['size']} bytes exceeds the limit of "
            f"{state.settings.max_attestation_bytes} bytes",
        )
    return str(subject["digest"]), str(art), layer


def _sniff_kinds(data: bytes) -> frozenset[str]:
    """The attestation kinds the bytes can be, read cheaply before verifying."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return frozenset()
    if not isinstance(doc, dict):
        return frozenset()
    if str(doc.get("mediaType", "")).startswith("application/vnd.dev.sigstore.bundle"):
        return frozenset({"sigstore", "oms"})
    if "payloadType" in doc and "signatures" in doc:
        return frozenset({"dsse"})
    return frozenset()


def _read_layer(state: AppState, layer: dict[str, Any], caller: Caller) -> bytes:
    """The stored blob ``layer`` names, if ``caller`` may reach it (``blobs.reach``): a blob
    only repositories he may not read hold is answered as one never stored (the same
    MANIFEST_BLOB_UNKNOWN), so a referrer push does not tell him whether it is stored."""
    digest, size = str(layer["digest"]), int(layer["size"])
    with state.db.read() as session:
        try:
            stored: int | None = visible_blob_size(session, digest, caller)
        except NotFound:
            stored = None
    if stored is None or stored != size:
        raise OciError(
            400,
            "MANIFEST_BLOB_UNKNOWN",
            f"layer {digest} of {size} bytes is not uploaded: push the blob first",
            detail={"digest": digest},
        )
    data = b"".join(state.store.read(digest))
    if _digest(data) != digest:
        raise OciError(400, "DIGEST_INVALID", f"stored blob {digest} does not hash to itself")
    return data


def attach_referrer(
    state: AppState,
    *,
    repo_name: str,
    digest: str,
    body: bytes,
    doc: dict[str, Any],
    caller: Caller,
) -> ManifestOut:
    """Verify and store the attestation a referrer carries (module doc)."""
    from modelward.attest.manifest import parse_manifest

    subject, art, layer = _referrer_parts(state, doc)
    data = _read_layer(state, layer, caller)
    kinds = _sniff_kinds(data)
    if not kinds & mt.KINDS_BY_ARTIFACT_TYPE[art]:
        raise OciError(
            400,
            "MANIFEST_INVALID",
            f"artifactType {art} does not match the layer: it is not "
            f"{' or '.join(sorted(mt.KINDS_BY_ARTIFACT_TYPE[art]))}",
        )
    with state.db.read() as session:
        repo = get_repo(session, repo_name, caller)
        existing = _oci_row(session, repo, digest)
        if existing is not None:
            return ManifestOut(
                digest, existing.media_type, existing.manifest, existing.state, existing.subject
            )
        bundle = session.execute(
            select(Bundle).where(Bundle.repo_id == repo.id, Bundle.digest == subject)
        ).scalar_one_or_none()
        pending = _oci_row(session, repo, subject)
        if bundle is None and (pending is None or pending.state != PENDING):
            raise OciError(
                400,
                "MANIFEST_INVALID",
                f"subject {subject} is not a bundle or a pending manifest in "
                f"{repo_name}: push it first",
            )
    if bundle is not None:
        summary, _ = attestations.attach(
            state, repo_name=repo_name, digest=subject, data=data, caller=caller
        )
        _record_referrer(
            state,
            repo_name=repo_name,
            digest=digest,
            body=body,
            art=art,
            subject=subject,
            state_=REFERRER,
            attestation_id=int(summary["id"]),
            caller=caller,
        )
        return ManifestOut(digest, mt.IMAGE_MANIFEST, body, REFERRER, subject)
    # A pending subject: verify against it, hold, judge the subject again.
    assert pending is not None  # noqa: S101 - checked above
    manifest = parse_manifest(pending.manifest)
    with state.db.read() as session:
        repo = get_repo(session, repo_name, caller)
        authz.require_may_attach_some(session, repo, caller)
        policy = repo_policy(repo, state.default_policy_yaml)
        trust = verdict.trust_for(session, repo, policy, state)
        publisher = session.get(Principal, pending.created_by)
    stmt = verdict.verify_attachment(state, manifest=manifest, data=data, trust=trust).statement
    with state.db.read() as session:
        authz.require_may_attach(
            session, get_repo(session, repo_name, caller), caller, stmt.predicate_type, stmt.kind
        )
    _record_referrer(
        state,
        repo_name=repo_name,
        digest=digest,
        body=body,
        art=art,
        subject=subject,
        state_=HELD,
        attestation_id=None,
        caller=caller,
    )
    if publisher is not None:
        original = Caller(id=publisher.id, name=publisher.name, role=publisher.role)
        out = _store_bundle(
            state, repo_name=repo_name, digest=subject, body=pending.manifest, caller=original
        )
        if out.state != PENDING:
            return ManifestOut(digest, mt.IMAGE_MANIFEST, body, REFERRER, subject)
    return ManifestOut(digest, mt.IMAGE_MANIFEST, body, HELD, subject)


def _record_referrer(
    state: AppState,
    *,
    repo_name: str,
    digest: str,
    body: bytes,
    art: str,
    subject: str,
    state_: str,
    attestation_id: int | None,
    caller: Caller,
) -> None:
    with state.db.write() as session:
        repo = get_repo(session, repo_name, caller)
        if _oci_row(session, repo, digest) is not None:
            return
        session.add(
            OciManifest(
                repo_id=repo.id,
                digest=digest,
                media_type=mt.IMAGE_MANIFEST,
                artifact_type=art,
                subject=subject,
                state=state_,
                manifest=body,
                reasons="[]",
                attestation_id=attestation_id,
                created_by=caller.id,
                created_at=datetime.now(UTC),
            )
        )
        append(
            session,
            actor=caller.name,
            action="oci.referrer",
            subject=f"{repo_name}@{subject}",
            details={
                "manifest": digest,
                "artifact_type": art,
                "state": state_,
                "attestation_id": attestation_id,
            },
        )
