"""The root role and the online keys: the next root version and the next online keys
(``trust init``, ``trust rotate``; docs/tuf.md#keys)."""

from __future__ import annotations

from typing import Any

from tuf.api.metadata import Metadata, Root, Targets

from modelward.registry.domains._state import AppState
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.signing.online import repository, trust_of
from modelward.registry.domains.signing.tuf.bootstrap import (
    sync_delegations,
)
from modelward.registry.domains.signing.tuf.keys import (
    ONLINE_ROLES,
    next_role,
)
from modelward.registry.errors import BadRequest


def install_root(state: AppState, data: bytes, *, caller: Caller) -> dict[str, Any]:
    """Keep the next root version (``trust init``/``trust rotate``). When the registry holds
    the current root key online (the embedded default) it adds its signature, which is
    what the old root's threshold needs; root and targets keys the new root no longer
    lists are deleted from the registry. Audited as ``tuf.root``."""
    from securesystemslib.signer import Signature

    if len(data) > 1 << 20:
        raise BadRequest("root metadata larger than 1 MiB")
    try:
        md = Metadata[Root].from_bytes(data)
    except Exception as exc:
        raise BadRequest(f"not TUF root metadata: {type(exc).__name__}: {exc}") from exc
    keys = trust_of(state.settings).keys
    with state.db.write() as session:
        repo = repository(session, state)
        old_targets = list(repo.root().roles[Targets.type].keyids)
        if keys.has("root"):
            signer = keys.signer("root")
            if signer.public_key.keyid in repo.root().roles[Root.type].keyids:
                own: Signature = signer.sign(md.signed_bytes)
                md.signatures[own.keyid] = own
        try:
            repo.install_root(md.to_bytes())
        except Exception as exc:
            raise BadRequest(
                f"root version {md.signed.version} refused: {type(exc).__name__}: {exc}",
                code="root_refused",
            ) from exc
        offline = [
            role
            for role in ("root", "targets")
            if keys.has(role)
            and keys.signer(role).public_key.keyid not in md.signed.roles[role].keyids
        ]
        # online keys rotated (``trust rotate --online``): the new root names the next keys
        promoted = [
            role
            for role in ONLINE_ROLES
            if keys.has(next_role(role))
            and keys.signer(next_role(role)).public_key.keyid in md.signed.roles[role].keyids
        ]
        append(
            session,
            actor=caller.name,
            action="tuf.root",
            subject=f"root v{md.signed.version}",
            details={
                "root_keys": md.signed.roles[Root.type].keyids,
                "targets_keys": md.signed.roles[Targets.type].keyids,
                "now_offline": offline,
            },
        )
        # snapshot and timestamp are signed again under the new root right away; new targets
        # keys need a new targets version: signed here if the registry holds the key, else
        # a proposal for the admins (``trust init`` signs it with the new keys)
        repo.signers = {r: s for r, s in keys.signers().items() if r not in offline}
        for role in promoted:
            repo.signers = {**repo.signers, role: [keys.signer(next_role(role))]}
        if list(md.signed.roles[Targets.type].keyids) != old_targets:
            sync_delegations(
                session, repo, keys, state.default_policy_yaml, proposer_id=caller.id, force=True
            )
        repo.do_snapshot(force=True)
        repo.do_timestamp(force=True)
        held = sorted(repo.signers)
    for role in offline:  # only once the new root is committed
        keys.forget(role)
    for role in promoted:
        keys.promote(role)
    return {"version": md.signed.version, "online_keys": held, "rotated": promoted}


def next_online_keys(state: AppState, *, caller: Caller) -> dict[str, Any]:
    """New snapshot and timestamp keys for a rotation, kept as ``ROLE.next.key`` until a
    root naming them is installed (an existing next key is reused): their public halves,
    as TUF keys, for the admins to put in the next root. Audited as ``tuf.online_keys``."""
    keys = trust_of(state.settings).keys
    answer = {}
    for role in ONLINE_ROLES:
        keys.create(next_role(role))
        public = keys.signer(next_role(role)).public_key
        answer[role] = {"keyid": public.keyid, "key": public.to_dict()}
    with state.db.write() as session:
        append(
            session,
            actor=caller.name,
            action="tuf.online_keys",
            subject="next",
            details={role: a["keyid"] for role, a in answer.items()},
        )
    return answer
