"""Gather what a release record holds, through the registry client (docs/release.md).

``collect_release`` fetches, with ``RegistryClient`` methods only, every input of
``attest.release.build_predicate`` for ``REPO@ALIAS`` at one version of its history: the
manifest, config and ``modelward.yaml`` bytes (each checked against its digest by the
client), the effective policy, the bundle's attestations, the TUF metadata that signs the
alias at that version (root chain, top-level targets, the alias's role version that named
the digest), the alias history and the audit events around the promotion, and the signed
audit checkpoint. Nothing is trusted here: ``attest.release.verify_record`` checks the
record offline.

Errors: ``ReleaseInputError`` (the alias, the version or the registry's state does not
allow a record, naming which); the client's own errors pass through.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from modelward.client.errors import APIError, NotFoundError, RegistryClientError

if TYPE_CHECKING:
    from modelward.client.api import RegistryClient

__all__ = ["MAX_ROLE_VERSIONS", "ReleaseInputError", "collect_release"]

MAX_ROLE_VERSIONS = 1000  # role and targets versions read back at most, to find the signer


class ReleaseInputError(RegistryClientError):
    """The registry cannot give what a release record needs; the message names the thing."""


def _history(client: RegistryClient, repo: str, alias: str) -> list[dict[str, Any]]:
    try:
        history = client.alias_history(repo, alias)
    except NotFoundError as exc:
        raise ReleaseInputError(f"{repo}@{alias}: no such alias ({exc})") from None
    if not history:
        raise ReleaseInputError(f"{repo}@{alias}: the alias has no history")
    return history


def _tuf_roots(client: RegistryClient) -> list[bytes]:
    roots = []
    for version in range(1, MAX_ROLE_VERSIONS + 1):
        try:
            roots.append(client.tuf_file(f"{version}.root.json"))
        except NotFoundError:
            break
    if not roots:
        raise ReleaseInputError("the registry serves no TUF root (GET /tuf/1.root.json)")
    return roots


def _role_versions(client: RegistryClient, role: str, current: int) -> list[bytes]:
    """Every version of ``role``, 1 to ``current``: the alias's signed history."""
    if current > MAX_ROLE_VERSIONS:
        raise ReleaseInputError(
            f"TUF role {role} has {current} versions, more than a record holds "
            f"({MAX_ROLE_VERSIONS})"
        )
    return [client.tuf_file(f"{version}.{role}.json") for version in range(1, current + 1)]


def _targets_for(
    client: RegistryClient, current: int, role: str, path: str, role_versions: list[bytes]
) -> list[bytes]:
    """Top-level targets versions, oldest first: from the oldest that delegates ``path`` to
    ``role`` and verifies one of ``role_versions`` (for each, the newest that does) to
    ``current``, every version."""
    from tuf.api.exceptions import RepositoryError
    from tuf.api.metadata import Metadata, Targets

    fetched: dict[int, Metadata[Targets]] = {}
    raw: dict[int, bytes] = {}

    def delegates(version: int, role_md: Metadata[Targets]) -> bool:
        if version not in fetched:
            raw[version] = client.tuf_file(f"{version}.targets.json")
            fetched[version] = Metadata[Targets].from_bytes(raw[version])
        md = fetched[version]
        delegations = md.signed.delegations
        if delegations is None or delegations.roles is None:
            return False
        if next((n for n, _ in delegations.get_roles_for_target(path)), None) != role:
            return False
        try:
            md.verify_delegate(role, role_md)
        except (RepositoryError, ValueError):
            return False
        return True

    chosen: set[int] = set()
    for data in role_versions:
        role_md = Metadata[Targets].from_bytes(data)
        candidates = sorted(chosen, reverse=True) + [
            v for v in range(current, max(0, current - MAX_ROLE_VERSIONS), -1) if v not in chosen
        ]
        found = next((v for v in candidates if delegates(v, role_md)), None)
        if found is None:
            raise ReleaseInputError(
                f"no top-level targets version delegates {path} to {role} with the keys "
                f"that signed its version {role_md.signed.version}"
            )
        chosen.add(found)
    # Every version from the oldest chosen to the current one, no gap: `release verify`
    # holds the role versions from the recorded move on to the newest (docs/release.md).
    for version in range(min(chosen), current + 1):
        if version not in raw:
            raw[version] = client.tuf_file(f"{version}.targets.json")
    return [raw[v] for v in range(min(chosen), current + 1)]


def _tuf(client: RegistryClient, repo: str, alias: str, version: int | None) -> dict[str, Any]:
    """The TUF metadata of a record of signed move ``version`` (None: the latest) of
    ``repo@alias``: the roots, the role's versions 1 to the one that ended the move (or the
    current one), the targets versions delegating them; and the move chosen."""
    from tuf.api.metadata import Metadata, Snapshot, Targets, Timestamp

    from modelward.attest.release import signed_moves
    from modelward.attest.tuf import alias_path

    roots = _tuf_roots(client)
    timestamp = Metadata[Timestamp].from_bytes(client.tuf_file("timestamp.json"))
    snapshot = Metadata[Snapshot].from_bytes(
        client.tuf_file(f"{timestamp.signed.snapshot_meta.version}.snapshot.json")
    )
    targets_version = snapshot.signed.meta["targets.json"].version
    targets = Metadata[Targets].from_bytes(client.tuf_file(f"{targets_version}.targets.json"))
    path = alias_path(repo, alias)
    delegations = targets.signed.delegations
    role = (
        None
        if delegations is None
        else next((name for name, _ in delegations.get_roles_for_target(path)), None)
    )
    if role is None:
        raise ReleaseInputError(
            f"{repo}@{alias}: no TUF role is delegated this alias yet (`modelward trust pending`)"
        )
    meta = snapshot.signed.meta.get(f"{role}.json")
    if meta is None:
        raise ReleaseInputError(f"{repo}@{alias}: TUF role {role} has no signed version")
    every = _role_versions(client, role, meta.version)
    moves = signed_moves(path, [Metadata[Targets].from_bytes(data) for data in every])
    if not any(m["to_digest"] for m in moves):
        raise ReleaseInputError(
            f"{path}: no signed version of TUF role {role} names a bundle: every move of it "
            "is the registry's word only (unsigned); sign it first (`modelward trust adopt`)"
        )
    if version is None:
        version = len(moves)
    if not 1 <= version <= len(moves):
        raise ReleaseInputError(
            f"{repo}@{alias}: --version {version} is out of range (the alias's signed "
            f"history, TUF role {role}, has moves 1 to {len(moves)}; moves the registry "
            "recorded unsigned are not versions of it)"
        )
    move = moves[version - 1]
    if move["to_digest"] is None:
        raise ReleaseInputError(
            f"{repo}@{alias}: signed move {version} (TUF role {role} version "
            f"{move['role_version']}) removes the alias: there is no bundle to record"
        )
    last = moves[version]["role_version"] if version < len(moves) else meta.version
    role_versions = every[:last]
    return {
        "version": version,
        "digest": str(move["to_digest"]),
        "moves": moves[version - 1 : version + 1],
        "roots": roots,
        "targets": _targets_for(client, targets_version, role, path, role_versions),
        "role": role,
        "role_versions": role_versions,
    }


def _audit(
    client: RegistryClient,
    repo: str,
    alias: str,
    *,
    digest: str,
    rows: set[int],
    role_subject: str,
    rollout_ids: frozenset[str] = frozenset(),
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The audit events around the promotion (``rows``: the registry's alias-history versions
    shown as its context; ``rollout_ids``: the release's rollouts, whose ``rollout.*`` events
    it holds too), and the registry's approvals from them."""
    events: list[dict[str, Any]] = []
    approvals: dict[str, dict[str, Any]] = {}
    try:
        stream: Iterator[dict[str, Any]] = client.iter_audit()
        for event in stream:
            subject, details = event.get("subject"), event.get("details") or {}
            about_alias = subject == f"{repo}@{alias}" and (
                details.get("to") == digest or details.get("version") in rows
            )
            about_bundle = subject == f"{repo}@{digest}"
            about_role = subject == role_subject
            about_rollout = (
                subject == f"{repo}@{alias}"
                and str(event.get("action", "")).startswith("rollout.")
                and details.get("rollout_id") in rollout_ids
            )
            if not (about_alias or about_bundle or about_role or about_rollout):
                continue
            events.append(event)
            if about_bundle and details.get("alias") == alias:
                if event.get("action") == "bundle.approve":
                    approvals[str(event["actor"])] = {
                        "principal": event["actor"],
                        "at": event["at"],
                        "seq": event["seq"],
                        "withdrawn": None,
                    }
                elif (
                    event.get("action") == "bundle.approval.withdraw"
                    and str(event["actor"]) in approvals
                ):
                    approvals[str(event["actor"])]["withdrawn"] = {
                        "at": event["at"],
                        "reason": details.get("reason"),
                        "seq": event["seq"],
                    }
    except APIError as exc:
        if exc.status == 403:
            raise ReleaseInputError(
                f"reading the audit log needs a reviewer's or an admin's token ({exc})"
            ) from None
        raise
    return events, list(approvals.values())


def _rollouts(
    client: RegistryClient, repo: str, alias: str, version: int, role_versions: list[bytes]
) -> dict[str, dict[str, Any]]:
    """For each rollout of signed move ``version`` (``attest.release.signed_plans`` of the
    alias's role versions: the plans it signed since the previous move; and
    ``later_plans``: those run from this move's digest since), by rollout id: the
    versions of ``ORG:NAME@=rollout`` from the first to the last that the registry says
    signed one of its steps (consecutive: ``release verify`` holds them to it), and the
    registry's status of it (unsigned context: times, verdicts, the rollback figures)."""
    from tuf.api.metadata import Metadata, Targets

    from modelward.attest.release import later_plans, signed_moves, signed_plans
    from modelward.attest.rollout.paths import rollout_role
    from modelward.attest.tuf import alias_path

    mds = [Metadata[Targets].from_bytes(data) for data in role_versions]
    moves = signed_moves(alias_path(repo, alias), mds)
    plans = signed_plans(repo, alias, mds, moves, version)
    plans += later_plans(repo, alias, mds, moves, version)
    if not plans:
        return {}
    try:
        statuses = {
            str(r["rollout_id"]): r for r in client.rollout_history(repo, alias)["rollouts"]
        }
    except NotFoundError as exc:
        raise ReleaseInputError(
            f"{repo}@{alias}: the alias's role signed rollout plans "
            f"({', '.join(p.plan.rollout_id for p in plans)}) but the registry lists no "
            f"rollout history ({exc})"
        ) from None
    role = rollout_role(repo)
    out: dict[str, dict[str, Any]] = {}
    for signed in plans:
        status = statuses.get(signed.plan.rollout_id)
        signed_at = sorted(
            int(h["tuf_version"])
            for h in (status or {}).get("history") or []
            if h.get("tuf_version") is not None
        )
        if signed_at and signed_at[-1] - signed_at[0] >= MAX_ROLE_VERSIONS:
            raise ReleaseInputError(
                f"rollout {signed.plan.rollout_id}: its steps span versions {signed_at[0]} to "
                f"{signed_at[-1]} of TUF role {role}, more than a record holds "
                f"({MAX_ROLE_VERSIONS})"
            )
        versions = (
            [client.tuf_file(f"{v}.{role}.json") for v in range(signed_at[0], signed_at[-1] + 1)]
            if signed_at
            else []
        )
        out[signed.plan.rollout_id] = {"role_versions": versions, "registry": status}
    return out


def collect_release(
    client: RegistryClient, repo: str, alias: str, version: int | None
) -> dict[str, Any]:
    """The keyword arguments of ``attest.release.build_predicate`` for ``repo@alias`` at its
    signed move ``version`` (None: the latest): the moves its TUF role versions make, never
    the registry's alias-history rows (kept as unsigned context). Raises ReleaseInputError
    naming what is missing (no such alias, a version out of range, no signed move)."""
    from tuf.api.exceptions import RepositoryError
    from tuf.api.metadata import Metadata, Targets

    from modelward.attest.manifest import parse_manifest

    history = _history(client, repo, alias)
    try:
        tuf = _tuf(client, repo, alias, version)
    except (RepositoryError, ValueError, KeyError) as exc:  # the registry's bytes
        raise ReleaseInputError(
            f"{repo}@{alias}: the registry's TUF metadata is malformed: {type(exc).__name__}: {exc}"
        ) from None
    version, digest = int(tuf.pop("version")), str(tuf.pop("digest"))
    moves = tuf.pop("moves")
    manifest = client.get_manifest(repo, digest)
    parsed = parse_manifest(manifest)
    config = client.get_blob(parsed.config.digest)
    spec_layer = next((x for x in parsed.layers if x.path == "modelward.yaml"), None)
    spec = client.get_blob(spec_layer.digest) if spec_layer is not None else None
    policy_text = str(client.get_repo(repo)["effective_policy_yaml"])
    role_version = moves[0]["role_version"]
    role_md = Metadata[Targets].from_bytes(tuf["role_versions"][role_version - 1])
    rows = {
        int(h["version"])
        for h in history
        if h.get("to_digest") == digest or h.get("from_digest") == digest
    }
    rollouts = _rollouts(client, repo, alias, version, tuf["role_versions"])
    events, approvals = _audit(
        client,
        repo,
        alias,
        digest=digest,
        rows=rows,
        role_subject=f"{tuf['role']} v{role_md.signed.version}",
        rollout_ids=frozenset(rollouts),
    )
    try:
        checkpoint: dict[str, Any] | None = client.audit_checkpoint()
    except APIError:
        checkpoint = None
    return {
        "repository": repo,
        "alias": alias,
        "version": version,
        "made_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "registry": client.base_url,
        "manifest": manifest,
        "config": config,
        "spec": spec,
        "policy_text": policy_text,
        "attestations": client.list_attestations(repo, digest),
        **tuf,
        "history": history,
        "approvals": approvals,
        "audit_events": events,
        "audit_checkpoint": checkpoint,
        "rollouts": rollouts,
    }
