"""The console's release record page: the record ``modelward release record`` would write for
an alias's signed move, built by the same ``attest.release.build_predicate`` from what the
registry holds, and shown with the same template as ``release record --html``
(``templates/release_body.html``).

An unsigned view: nothing is signed here, and the TUF chain a record embeds for offline
verification (the roots and top-level targets versions) is not gathered; the page says so
and gives the command that writes the signed record. The inputs, read with the API's rules
for the caller (the audit events need a reviewer or an admin, as ``GET /v1/audit``):

  (1) the alias's history rows (unsigned context), the repository's policy in force;
  (2) the alias's TUF role (the current top-level targets' delegation of its path) and that
      role's versions 1 to the current one: the signed moves; the move shown (default the
      latest that names a bundle) and the role versions through the move that ended it;
  (3) the bundle's manifest, config and ``modelward.yaml`` from the blob store, its live
      attestations;
  (4) the audit events about the promotion (the alias's rows for this digest, the bundle,
      the role version) and the registry's approvals among them, newest ``AUDIT_SCAN`` only;
      the current signed checkpoint.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tuf.api.metadata import Metadata, Targets

from modelward.attest.audit.chain import event_to_json
from modelward.attest.manifest import parse_manifest
from modelward.attest.release import build_predicate, signed_moves
from modelward.attest.tuf import alias_path
from modelward.registry.domains._state import AppState
from modelward.registry.domains.aliases import service as aliases
from modelward.registry.domains.attestations import service as attestations
from modelward.registry.domains.audit.checkpoints import current_checkpoint
from modelward.registry.domains.audit.keyfile import checkpoint_signer
from modelward.registry.domains.audit.service import page as audit_page
from modelward.registry.domains.auth.authz import Action
from modelward.registry.domains.auth.deps import require
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.bundles.service import find_bundle
from modelward.registry.domains.repos import listing
from modelward.registry.domains.signing.online import repository
from modelward.registry.errors import NotFound
from modelward.registry.policy import builtin_default_policy

__all__ = ["AUDIT_SCAN", "MAX_ROLE_VERSIONS", "release_page"]

AUDIT_SCAN = 20_000  # the newest events searched for the promotion's
MAX_ROLE_VERSIONS = 1000
MAX_SMALL_BLOB = 16 * 2**20  # config.json, modelward.yaml


def _blob(state: AppState, digest: str, size: int) -> bytes | None:
    if size > MAX_SMALL_BLOB:
        return None
    with state.store.open(digest) as stream:
        data: bytes = stream.read(size)
    return data


def _role_versions(state: AppState, repo_name: str, alias: str) -> tuple[str, list[bytes]]:
    path = alias_path(repo_name, alias)
    with state.db.read() as session:
        tuf = repository(session, state)
        targets = tuf.current("targets")
        delegations = targets.signed.delegations if targets is not None else None
        role = (
            None
            if delegations is None
            else next((name for name, _ in delegations.get_roles_for_target(path)), None)
        )
        if role is None:
            raise NotFound(f"{repo_name}@{alias}: no TUF role is delegated this alias yet")
        current = tuf.accepted_version(role)
    if not current:
        raise NotFound(f"{repo_name}@{alias}: TUF role {role} has no signed version")
    every = []
    for version in range(1, min(current, MAX_ROLE_VERSIONS) + 1):
        found = state.tuf_files.load(role, version)
        if found is None:
            raise NotFound(f"TUF role {role} has no version {version}")
        every.append(found.data)
    return role, every


def _events(
    state: AppState, *, repo_name: str, alias: str, digest: str, rows: set[int], role_subject: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    signer = checkpoint_signer(state.settings)
    size = current_checkpoint(state.db, signer).size
    with state.db.read() as session:
        found = audit_page(session, after=max(0, size - AUDIT_SCAN), limit=AUDIT_SCAN)
    events, approvals = [], {}
    for row in found:
        event = event_to_json(row)
        details = row.details or {}
        about_alias = row.subject == f"{repo_name}@{alias}" and (
            details.get("to") == digest or details.get("version") in rows
        )
        about_bundle = row.subject == f"{repo_name}@{digest}"
        if not (about_alias or about_bundle or row.subject == role_subject):
            continue
        events.append(event)
        if about_bundle and details.get("alias") == alias and row.action == "bundle.approve":
            approvals[row.actor] = {
                "principal": row.actor,
                "at": row.at,
                "seq": row.seq,
                "withdrawn": None,
            }
        elif about_bundle and row.action == "bundle.approval.withdraw" and row.actor in approvals:
            approvals[row.actor]["withdrawn"] = {
                "at": row.at,
                "reason": details.get("reason"),
                "seq": row.seq,
            }
    return events, list(approvals.values())


def release_page(
    state: AppState, caller: Caller, repo_name: str, alias: str, version: int | None
) -> dict[str, Any]:
    """The release record (``p``, unsigned) of ``repo_name@alias`` at its signed move
    ``version`` (None: the latest), and the command that writes it signed (``command``).
    Raises Forbidden (not a reviewer or an admin), NotFound (repository, alias, no signed
    move, ``version`` out of range)."""
    require(Action.REVIEW)(caller)
    # (1): history and policy
    with state.db.read() as session:
        repo = listing.readable_repo(session, repo_name, caller)
        history = aliases.history(session, repo_name, alias, caller)
        policy_text = repo.policy_yaml or state.default_policy_yaml or builtin_default_policy()
    # (2): the signed moves
    role, every = _role_versions(state, repo_name, alias)
    moves = signed_moves(
        alias_path(repo_name, alias), [Metadata[Targets].from_bytes(d) for d in every]
    )
    named = [i + 1 for i, m in enumerate(moves) if m["to_digest"]]
    if not named:
        raise NotFound(f"{repo_name}@{alias}: no signed version of TUF role {role} names a bundle")
    version = version or named[-1]
    if not 1 <= version <= len(moves) or moves[version - 1]["to_digest"] is None:
        raise NotFound(
            f"{repo_name}@{alias}: signed move {version} is not a move to a bundle (moves 1 "
            f"to {len(moves)})"
        )
    digest = str(moves[version - 1]["to_digest"])
    last = moves[version]["role_version"] if version < len(moves) else len(every)
    # (3): the bundle
    with state.db.read() as session:
        manifest = find_bundle(session, repo, digest).manifest
    parsed = parse_manifest(manifest)
    config = _blob(state, parsed.config.digest, parsed.config.size)
    spec_layer = next((x for x in parsed.layers if x.path == "modelward.yaml"), None)
    spec = _blob(state, spec_layer.digest, spec_layer.size) if spec_layer else None
    listed = attestations.list_for_bundle(
        state, repo_name=repo_name, digest=digest, caller=caller, include_retracted=False
    )
    # (4): the audit events
    rows = {
        int(h["version"])
        for h in history
        if h.get("to_digest") == digest or h.get("from_digest") == digest
    }
    role_version = moves[version - 1]["role_version"]
    role_md = Metadata[Targets].from_bytes(every[role_version - 1])
    events, approvals = _events(
        state,
        repo_name=repo_name,
        alias=alias,
        digest=digest,
        rows=rows,
        role_subject=f"{role} v{role_md.signed.version}",
    )
    signer = checkpoint_signer(state.settings)
    checkpoint = current_checkpoint(state.db, signer).to_json(signer)
    predicate = build_predicate(
        repository=repo_name,
        alias=alias,
        version=version,
        made_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        registry="this registry (an unsigned view in the console)",
        manifest=manifest,
        config=config,
        spec=spec,
        policy_text=policy_text,
        attestations=listed,
        roots=[],
        targets=[],
        role=role,
        role_versions=every[:last],
        history=history,
        approvals=approvals,
        audit_events=events,
        audit_checkpoint=checkpoint,
    )
    return {"p": predicate, "command": _command(repo_name, alias, version)}


def _command(repo_name: str, alias: str, version: int) -> str:
    return (
        f"modelward release record {repo_name}@{alias} --version {version} --key KEY "
        f"--out {alias}-v{version}.release.json --html {alias}-v{version}.html"
    )
