"""Row seals: what the registry signs delegations from must be what the registry wrote
(docs/tuf.md#keys).

The delegations (who may sign which alias) are made from database rows: principals and
their roles, their signing keys, the repositories' publisher lists. The registry signs them
with its online targets key in the embedded default, so a row a database writer inserted
would otherwise become a key that signs ``prod``. Each such row therefore carries a *seal*:
an HMAC-SHA256, by a key the registry keeps in its TUF keys directory (``rows.key``, mode
0600, next to the online TUF keys and out of the database's reach), over the row's
meaning, made when the registry writes the row (registration, revocation, a publisher
added). ``registry.domains.signing.tuf.state`` makes the delegations from sealed rows only.

What a seal covers:

- a principal: its id, name and role (a role edited in the database breaks it), and whether
  it is disabled (an enabled principal's seal is over the first three only, as it always
  was; a disabled one's also over "disabled": clearing ``disabled_at`` in the database does
  not bring its keys back into any delegation);
- a signing key: its keyid, owner, public key and whether it is revoked (so un-revoking a
  key in the database, or moving it to another principal, breaks it);
- a publisher: the repository's *name* and the principal (renaming a repository in the
  database, so that its publishers become another's, breaks it);
- a repository: its name and its stored policy (the alias rules the delegations follow:
  which aliases are protected, by how many approvals, which the online key signs).

A seal is deterministic, so a database writer who saved a row's seal can put that exact
row back (a key revoked since, a publisher removed since): the limit documented in
docs/tuf.md#keys. Rows that exist when the registry first makes ``rows.key`` (an upgrade,
or the embedded bootstrap) are sealed then, on the database's word: trust on first use.

Pure HMAC here; no I/O. The key is read by ``signing.tuf.keys.OnlineKeys.row_seals``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.registry.models import Principal, RepoPublisher, Repository, SigningKey

__all__ = ["ROW_KEY", "RowSeals", "seal_unsealed_rows"]

log = logging.getLogger("modelward.registry")

ROW_KEY = "rows"  # ``rows.key`` in the TUF keys directory
KEY_BYTES = 32


class RowSeals:
    """HMACs over the rows the delegations are made from, with the registry's row key."""

    def __init__(self, key: bytes) -> None:
        if len(key) < KEY_BYTES:
            raise ValueError(f"a row seal key has at least {KEY_BYTES} bytes, not {len(key)}")
        self._key = key

    def _mac(self, kind: str, *fields: str | int | bool) -> str:
        message = json.dumps([kind, *fields], separators=(",", ":"), ensure_ascii=True)
        return hmac.new(self._key, message.encode(), hashlib.sha256).hexdigest()

    def principal(self, row: Principal) -> str:
        """Over id, name and role; a disabled principal's also over "disabled" (so a
        database writer who clears ``disabled_at`` breaks it, and its keys stay out of every
        delegation: ``disabled_by_seal``). An enabled row's seal is the one it always was."""
        if row.disabled_at is not None:
            return self._mac("principal", int(row.id), row.name, row.role, "disabled")
        return self._mac("principal", int(row.id), row.name, row.role)

    def disabled_by_seal(self, row: Principal) -> bool:
        """Whether ``row`` carries the seal the registry made when it disabled it, whatever
        its ``disabled_at`` says now."""
        return self._same(
            row.seal, self._mac("principal", int(row.id), row.name, row.role, "disabled")
        )

    def principal_sealed_either_way(self, row: Principal) -> bool:
        """Whether the registry sealed ``row``'s id, name and role, enabled or disabled (a
        row disabled before seals covered it carries the enabled form)."""
        return self.disabled_by_seal(row) or self._same(
            row.seal, self._mac("principal", int(row.id), row.name, row.role)
        )

    def signing_key(self, row: SigningKey) -> str:
        return self._mac(
            "signing_key",
            row.keyid,
            int(row.principal_id),
            row.public_key_pem,
            row.revoked_at is not None,
        )

    def publisher(self, repo_name: str, principal_id: int) -> str:
        return self._mac("repo_publisher", repo_name, int(principal_id))

    def policy(self, repo_name: str, policy_yaml: str | None) -> str:
        return self._mac("repository_policy", repo_name, policy_yaml or "")

    def policy_ok(self, row: Repository) -> bool:
        return self._same(row.seal, self.policy(row.name, row.policy_yaml))

    @staticmethod
    def _same(seal: str | None, expected: str) -> bool:
        return seal is not None and hmac.compare_digest(seal, expected)

    def principal_ok(self, row: Principal) -> bool:
        return self._same(row.seal, self.principal(row))

    def signing_key_ok(self, row: SigningKey) -> bool:
        return self._same(row.seal, self.signing_key(row))

    def publisher_ok(self, row: RepoPublisher, repo_name: str) -> bool:
        return self._same(row.seal, self.publisher(repo_name, row.principal_id))


def seal_unsealed_rows(session: Session, seals: RowSeals) -> int:
    """Seal every row that has no seal yet: called once, when the registry makes its row
    key (the embedded bootstrap, or the first start after the upgrade that added seals):
    those rows are taken on the database's word then, and never again. Returns how many."""
    count = 0
    for principal in session.scalars(select(Principal).where(Principal.seal.is_(None))):
        principal.seal = seals.principal(principal)
        count += 1
    for key in session.scalars(select(SigningKey).where(SigningKey.seal.is_(None))):
        key.seal = seals.signing_key(key)
        count += 1
    for repo in session.scalars(select(Repository).where(Repository.seal.is_(None))):
        repo.seal = seals.policy(repo.name, repo.policy_yaml)
        count += 1
    rows = session.execute(
        select(RepoPublisher, Repository.name)
        .join(Repository, Repository.id == RepoPublisher.repo_id)
        .where(RepoPublisher.seal.is_(None))
    ).all()
    for publisher, repo_name in rows:
        publisher.seal = seals.publisher(repo_name, publisher.principal_id)
        count += 1
    session.flush()
    if count:
        log.warning(
            json.dumps({"event": "tuf_rows_sealed", "rows": count, "on": "first use of rows.key"})
        )
    return count
