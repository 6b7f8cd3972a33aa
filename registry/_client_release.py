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

from modelward.registry._client_errors import APIError, NotFound, RegistryClientError

if TYPE_CHECKING:
    from modelward.registry.client import RegistryClient

__all__ = ["MAX_ROLE_VERSIONS", "ReleaseInputError", "collect_release"]

MAX_ROLE_VERSIONS = 1000  # role and targets versions read back at most, to find the signer


class ReleaseInputError(RegistryClientError):
    """The registry cannot give what a release record needs; the message names the thing."""


def _history(client: RegistryClient, repo: str, alias: str) -> list[dict[str, Any]]:
    try:
        history = client.alias_history(repo, alias)
    except NotFound as exc:
        raise ReleaseInputError(f"{repo}@{alias}: no such alias ({exc})") from None
    if not history:
        raise ReleaseInputError(f"{repo}@{alias}: the alias has no history")
    return history


def _tuf_roots(client: RegistryClient) -> list[bytes]:
    roots = []
    for version in range(1, MAX_ROLE_VERSIONS + 1):
        try:
            roots.append(client.tuf_file(f"{version}.root.json"))
        except NotFound:
            break
    if not roots:
        raise ReleaseInputError("the registry serves no TUF root (GET /tuf/1.root.json)")
    return roots


def _target_digest(data: bytes, path: str) -> str | None:
    from tuf.api.metadata import Metadata, Targets

    target = Metadata[Targets].from_bytes(data).signed.targets.get(path)
    return None if target is None else "sha256:" + str(target.hashes.get("sha256"))


def _role_version(
    client: RegistryClient,
    role: str,
    current: int,
    *,
    path: str,
    digest: str,
    occurrence: int,
    moves: int,
) -> bytes:
    """The role version that set ``path`` to ``digest`` for the ``occurrence``-th time
    (0-based) of the ``moves`` times the alias history moved there. When the role moved there
    another number of times (a move the registry recorded unsigned), which signed version
    records this move is ambiguous: refused rather than guessed."""
    found: list[bytes] = []
    previous: str | None = None
    first = max(1, current - MAX_ROLE_VERSIONS + 1)
    for version in range(first, current + 1):
        data = client.tuf_file(f"{version}.{role}.json")
        named = _target_digest(data, path)
        if named == digest and previous != digest:
            found.append(data)
        previous = named
    if not found:
        raise ReleaseInputError(
            f"{path}: no signed version of TUF role {role} names {digest}: that move is the "
            "registry's word only (unsigned); sign it first (`modelward trust adopt`)"
        )
    if first == 1 and len(found) != moves:
        raise ReleaseInputError(
            f"{path}: the alias history moved to {digest} {moves} time(s) and its signed TUF "
            f"role {role} {len(found)} time(s): a move was the registry's word only, so which "
            "signed version records this one is ambiguous"
        )
    return found[min(occurrence, len(found) - 1)]


def _targets_for(client: RegistryClient, current: int, role: str, role_data: bytes) -> bytes:
    """The newest top-level targets version whose delegation verifies ``role_data``."""
    from tuf.api.exceptions import RepositoryError
    from tuf.api.metadata import Metadata, Targets

    role_md = Metadata[Targets].from_bytes(role_data)
    for version in range(current, max(0, current - MAX_ROLE_VERSIONS), -1):
        data = client.tuf_file(f"{version}.targets.json")
        try:
            Metadata[Targets].from_bytes(data).verify_delegate(role, role_md)
        except (RepositoryError, ValueError):
            continue
        return data
    raise ReleaseInputError(
        f"no top-level targets version delegates {role} with the keys that "
        f"signed its version {role_md.signed.version}"
    )


def _tuf(
    client: RegistryClient, repo: str, alias: str, digest: str, *, occurrence: int, moves: int
) -> dict[str, Any]:
    from tuf.api.metadata import Metadata, Snapshot, Targets, Timestamp

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
    role_data = _role_version(
        client, role, meta.version, path=path, digest=digest, occurrence=occurrence, moves=moves
    )
    return {
        "roots": roots,
        "targets": _targets_for(client, targets_version, role, role_data),
        "role": role,
        "role_metadata": role_data,
    }


def _audit(
    client: RegistryClient, repo: str, alias: str, *, digest: str, version: int, role_subject: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The audit events around the promotion, and the registry's approvals from them."""
    events: list[dict[str, Any]] = []
    approvals: dict[str, dict[str, Any]] = {}
    try:
        stream: Iterator[dict[str, Any]] = client.iter_audit()
        for event in stream:
            subject, details = event.get("subject"), event.get("details") or {}
            about_alias = subject == f"{repo}@{alias}" and (
                details.get("to") == digest or details.get("version") in (version, version + 1)
            )
            about_bundle = subject == f"{repo}@{digest}"
            about_role = subject == role_subject
            if not (about_alias or about_bundle or about_role):
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


def collect_release(
    client: RegistryClient, repo: str, alias: str, version: int | None
) -> dict[str, Any]:
    """The keyword arguments of ``attest.release.build_predicate`` for ``repo@alias`` at
    history ``version`` (None: the current one). Raises ReleaseInputError naming what is
    missing (no such alias, a version out of range, an unsigned move)."""
    from tuf.api.metadata import Metadata, Targets

    from modelward.attest.manifest import parse_manifest

    history = _history(client, repo, alias)
    versions = [int(h["version"]) for h in history]
    if version is None:
        version = int(client.get_alias(repo, alias)["version"])
    entry = next((h for h in history if int(h["version"]) == version), None)
    if entry is None or entry.get("to_digest") is None:
        raise ReleaseInputError(
            f"{repo}@{alias}: --version {version} is out of range (history "
            f"has versions {min(versions)} to {max(versions)})"
        )
    digest = str(entry["to_digest"])
    # the moves *to* the digest (from another), as the role's versions change to it
    ordered = sorted(history, key=lambda h: int(h["version"]))
    arrivals = [
        int(h["version"])
        for prev, h in zip([None, *ordered], ordered, strict=False)
        if h.get("to_digest") == digest and (prev is None or prev.get("to_digest") != digest)
    ]
    occurrence = max(0, sum(1 for v in arrivals if v <= version) - 1)
    manifest = client.get_manifest(repo, digest)
    parsed = parse_manifest(manifest)
    config = client.get_blob(parsed.config.digest)
    spec_layer = next((x for x in parsed.layers if x.path == "modelward.yaml"), None)
    spec = client.get_blob(spec_layer.digest) if spec_layer is not None else None
    policy_text = str(client.get_repo(repo)["effective_policy_yaml"])
    tuf = _tuf(client, repo, alias, digest, occurrence=occurrence, moves=len(arrivals))
    role_version = Metadata[Targets].from_bytes(tuf["role_metadata"]).signed.version
    events, approvals = _audit(
        client,
        repo,
        alias,
        digest=digest,
        version=version,
        role_subject=f"{tuf['role']} v{role_version}",
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
    }
