"""attest.audit: the verifiers of the registry's audit log: pure logic, no I/O, no database.

- ``chain``: the hash chain over the events (``verify_chain`` names the first broken link);
- ``tree``: the RFC 6962 / RFC 9162 Merkle tree over the same events, its proofs and their
  verification;
- ``signed_note``: C2SP signed notes with Ed25519 keys;
- ``checkpoint``: C2SP tlog-checkpoints of the tree, and ``TrustedLog``, the one object that
  decides "this log only grew since a checkpoint" (docs/registry.md#checkpoints).

Callers (the registry, ``modelward audit verify``, serving workers) fetch the bytes and hand
them in. Every failure is an ``attest.errors.AuditVerificationError`` carrying its evidence
(``code``, ``detail``); caller misuse is a ``ValueError``.
"""
