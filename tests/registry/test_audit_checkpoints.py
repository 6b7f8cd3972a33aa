"""Signed checkpoints of the audit log against real registries (SQLite and PostgreSQL): someone
with database access rewrites or truncates the log, recomputing everything the database holds;
a verifier holding an earlier checkpoint and the pinned key finds out, through the API and
straight from the database. The tampering is undone afterwards (the registry is shared).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelward.attest.audit.chain import AuditEvent, event_entry, event_hash, next_event
from modelward.attest.audit.checkpoint import open_checkpoint, verify_event_inclusion
from modelward.attest.audit.signed_note import (
    NoteVerifier,
    UnverifiedNote,
    generate_signer_key,
    parse_verifier_key,
)
from modelward.attest.audit.tree import leaf_hash, node_hash
from modelward.client.api import BadRequestError
from modelward.client.audit import (
    checkpoint_from_answer,
    events_from_api,
    proof_from_answer,
    verify_through_api,
    witness_checkpoint,
)
from tests.registry.conftest import Registry, new_publisher, push_new, unique
from tests.registry.test_audit_cli import COLUMNS, Db

TABLES = {
    "audit_events": COLUMNS,
    "audit_tree_nodes": ("level", "idx", "hash"),
    "audit_checkpoints": ("id", "tree_size", "root_hash", "key", "note", "created_at"),
}


class Attacker:
    """Someone with the database and nothing else: rewrites rows, recomputes the hash chain and
    the whole Merkle tree, and deletes the signed checkpoints that would give it away."""

    def __init__(self, db: Db) -> None:
        self.db = db
        self.saved = {t: self.db.run(f"SELECT {', '.join(c)} FROM {t}") for t, c in TABLES.items()}

    def events(self) -> list[AuditEvent]:
        rows = self.db.run(f"SELECT {', '.join(COLUMNS)} FROM audit_events ORDER BY seq")
        return [
            AuditEvent(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), r[6], r[7]) for r in rows
        ]

    def rewrite(self, events: list[AuditEvent]) -> None:
        """Replace the log with ``events``, re-chained, its tree rebuilt, no checkpoints."""
        chained: list[AuditEvent] = []
        for e in events:
            prev = chained[-1].hash if chained else e.prev_hash
            fields = {
                "seq": e.seq,
                "at": e.at,
                "actor": e.actor,
                "action": e.action,
                "subject": e.subject,
                "details": e.details,
                "prev_hash": prev,
            }
            chained.append(AuditEvent(**fields, hash=event_hash(**fields)))
        self.db.run("DELETE FROM audit_events")
        self.db.run("DELETE FROM audit_tree_nodes")
        self.db.run("DELETE FROM audit_checkpoints")
        import rfc8785

        for e in chained:
            self.db.insert(
                (
                    e.seq,
                    e.at,
                    e.actor,
                    e.action,
                    e.subject,
                    rfc8785.dumps(dict(e.details)).decode(),
                    e.prev_hash,
                    e.hash,
                )
            )
        level = [leaf_hash(event_entry(e)) for e in chained]
        height = 0
        while level:
            for i, digest in enumerate(level):
                self.db.run(
                    "INSERT INTO audit_tree_nodes (level, idx, hash) VALUES (?, ?, ?)",
                    height,
                    i,
                    digest,
                )
            level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
            height += 1

    def restore(self) -> None:
        for table, columns in TABLES.items():
            self.db.run(f"DELETE FROM {table}")
            marks = ", ".join("?" for _ in columns)
            for row in self.saved[table]:
                self.db.run(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", *row)


@pytest.fixture
def attacker(registry: Registry) -> Iterator[Attacker]:
    db = Db(registry.database_url)
    registry.admin.audit_checkpoint()  # the registry's key exists from here on
    mallory = Attacker(db)
    try:
        yield mallory
    finally:
        mallory.restore()
        db.conn.close()


def _key(reg: Registry) -> str:
    """The registry's checkpoint verifier key, read from its data dir as an operator would;
    the registry creates the key when it signs its first checkpoint, so ask for one first
    (the shared registry may not have signed any yet, whatever ran before)."""
    reg.admin.audit_checkpoint()
    out = reg.cli("audit", "key", "--data-dir", str(reg.server.data_dir), check=True)
    return out.stdout.strip().splitlines()[-1]


def _save_checkpoint(reg: Registry, tmp: Path, key: str) -> tuple[Path, int]:
    path = tmp / f"{unique('cp')}.txt"
    reg.cli("audit", "checkpoint", "--out", str(path), "--key", key, check=True)
    return path, open_checkpoint(path.read_bytes(), parse_verifier_key(key)).size


def _grow(reg: Registry, tmp: Path) -> None:
    pub = new_publisher(reg)
    push_new(pub, reg.repo(pub), tmp, alias="dev")


def _verify(reg: Registry, *args: str) -> Any:
    return reg.cli("audit", "verify", *args)


def test_the_log_that_only_grew_verifies_against_a_checkpoint(
    registry: Registry, tmp_path: Path
) -> None:
    registry.admin.audit_checkpoint()
    key = _key(registry)
    assert key == registry.admin.audit_checkpoint()["verifier_key"]
    key_file = registry.server.data_dir / "audit-checkpoint.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    saved, size = _save_checkpoint(registry, tmp_path, key)
    _grow(registry, tmp_path)
    via_api = _verify(registry, "--since", str(saved), "--key", key)
    assert via_api.returncode == 0, via_api.stdout + via_api.stderr
    assert f"only grew since the checkpoint of {size} events" in via_api.stdout
    via_db = _verify(
        registry, "--database-url", registry.database_url, "--since", str(saved), "--key", key
    )
    assert via_db.returncode == 0, via_db.stdout + via_db.stderr
    report = verify_through_api(
        registry.admin, verifier=parse_verifier_key(key), since=saved.read_bytes()
    )
    assert report.since is not None
    assert report.since.size == size
    assert report.checkpoints[-1].size > size


def test_edited_past_event_with_recomputed_chain_is_detected_against_a_checkpoint(
    registry: Registry, attacker: Attacker, tmp_path: Path
) -> None:
    key = _key(registry)
    saved, size = _save_checkpoint(registry, tmp_path, key)
    _grow(registry, tmp_path)
    events = attacker.events()
    victim = size - 2
    events[victim - 1] = dataclasses.replace(events[victim - 1], actor="mallory")
    attacker.rewrite(events)
    # what the hash chain alone says: nothing is wrong
    plain = _verify(registry, "--database-url", registry.database_url)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert _verify(registry).returncode == 0
    # against the checkpoint saved before the edit
    via_api = _verify(registry, "--since", str(saved), "--key", key)
    assert via_api.returncode == 1, via_api.stdout + via_api.stderr
    assert "consistency proof" in via_api.stderr, via_api.stderr
    assert "rewritten or forked" in via_api.stderr
    via_db = _verify(
        registry, "--database-url", registry.database_url, "--since", str(saved), "--key", key
    )
    assert via_db.returncode == 1, via_db.stdout + via_db.stderr
    assert f"checkpoint of size {size}" in via_db.stderr, via_db.stderr


def test_truncated_tail_is_detected_against_a_checkpoint(
    registry: Registry, attacker: Attacker, tmp_path: Path
) -> None:
    _grow(registry, tmp_path)
    key = _key(registry)
    saved, size = _save_checkpoint(registry, tmp_path, key)
    attacker.rewrite(attacker.events()[: size - 3])
    via_api = _verify(registry, "--since", str(saved), "--key", key)
    assert via_api.returncode == 1, via_api.stdout + via_api.stderr
    assert f"fewer than the {size}" in via_api.stderr, via_api.stderr
    via_db = _verify(
        registry, "--database-url", registry.database_url, "--since", str(saved), "--key", key
    )
    assert via_db.returncode == 1, via_db.stdout + via_db.stderr
    assert "truncated" in via_db.stderr, via_db.stderr
    # the log grows back past the checkpoint: now it is a fork of the saved one
    for _ in range(5):
        registry.admin.create_principal(unique("re"), "reader")
    assert int(registry.admin.audit_checkpoint()["tree_size"]) > size
    regrown = _verify(registry, "--since", str(saved), "--key", key)
    assert regrown.returncode == 1, regrown.stdout + regrown.stderr
    assert "consistency proof" in regrown.stderr, regrown.stderr


def test_checkpoint_signed_by_another_key_is_refused(registry: Registry, tmp_path: Path) -> None:
    key = _key(registry)
    saved, _ = _save_checkpoint(registry, tmp_path, key)
    # the same log name, another key: what a registry whose key was swapped would sign with
    other = generate_signer_key(parse_verifier_key(key).name).verifier.key_string
    refused = _verify(registry, "--since", str(saved), "--key", other)
    assert refused.returncode == 1
    assert "no signature by the pinned key" in refused.stderr, refused.stderr
    fetch = registry.cli("audit", "checkpoint", "--key", other)
    assert fetch.returncode == 1
    assert "no signature by the pinned key" in fetch.stderr
    reader = registry.actor("reader").client
    with pytest.raises(UnverifiedNote):
        witness_checkpoint(reader, other)


def test_malformed_saved_checkpoint_is_named_not_a_crash(
    registry: Registry, tmp_path: Path
) -> None:
    """A --since file that is cut short, not UTF-8 or edited is refused as the saved
    checkpoint it is (attest.errors.TrustedCheckpointRefused), through the API and straight
    from the database: exit 1 with the reason, no traceback."""
    key = _key(registry)
    saved, _ = _save_checkpoint(registry, tmp_path, key)
    good = saved.read_bytes()
    origin, size, rest = good.split(b"\n", 2)
    bad = {
        "no blank line before its signatures": good[: good.rfind(b"\n\n") + 1],
        "not UTF-8": b"\xff" + good,
        "the note was changed or forged": b"\n".join([origin, str(int(size) + 1).encode(), rest]),
    }
    for reason, note in bad.items():
        path = tmp_path / f"{unique('bad')}.txt"
        path.write_bytes(note)
        for where in ((), ("--database-url", registry.database_url)):
            out = _verify(registry, *where, "--since", str(path), "--key", key)
            assert out.returncode == 1, (reason, where, out.stdout, out.stderr)
            assert "the trusted checkpoint (saved earlier) is refused" in out.stderr, out.stderr
            assert reason in out.stderr, out.stderr
            assert "Traceback" not in out.stderr


def test_malformed_checkpoint_from_the_registry_is_named_not_a_crash(
    registry: Registry, attacker: Attacker
) -> None:
    """A stored checkpoint note edited in the database is served as it is (the registry
    signs, it does not re-verify what it stored: no 500); the CLI names what is wrong."""
    key = registry.admin.audit_checkpoint()["verifier_key"]
    attacker.db.run(
        "UPDATE audit_checkpoints SET note = ? WHERE id = (SELECT MAX(id) FROM audit_checkpoints)",
        "not a note\n",
    )
    assert registry.admin.audit_checkpoint()["checkpoint"] == "not a note\n"
    fetch = registry.cli("audit", "checkpoint", "--key", key)
    assert fetch.returncode == 1
    assert "the registry's checkpoint is refused" in fetch.stderr, fetch.stderr
    assert "no blank line before its signatures" in fetch.stderr
    out = _verify(registry, "--key", key)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "no blank line before its signatures" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr + fetch.stderr


def test_since_needs_the_pinned_key(registry: Registry, tmp_path: Path) -> None:
    saved, _ = _save_checkpoint(registry, tmp_path, _key(registry))
    out = _verify(registry, "--since", str(saved))
    assert out.returncode == 2
    assert "--since needs --key" in out.stderr


def test_registry_refuses_to_sign_a_checkpoint_its_log_no_longer_matches(
    registry: Registry, attacker: Attacker
) -> None:
    registry.admin.create_principal(unique("cp"), "reader")
    signed = int(registry.admin.audit_checkpoint()["tree_size"])
    events = attacker.events()
    events[1] = dataclasses.replace(events[1], subject="rewritten")
    attacker.rewrite(events)
    stored = attacker.saved["audit_checkpoints"]
    for row in stored:  # a sloppy attacker: the signed checkpoints stay
        attacker.db.run(
            "INSERT INTO audit_checkpoints (id, tree_size, root_hash, key, note, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?)",
            *row,
        )
    registry.admin.create_principal(unique("cp"), "reader")  # appends still work
    out = registry.cli("audit", "checkpoint")
    assert out.returncode == 1
    assert "audit_log_inconsistent" in out.stderr or "rewritten" in out.stderr, out.stderr
    assert signed >= 2


def test_inclusion_proof_of_one_event(registry: Registry) -> None:
    answer = registry.admin.audit_checkpoint()
    verifier: NoteVerifier = parse_verifier_key(answer["verifier_key"])
    checkpoint = open_checkpoint(checkpoint_from_answer(answer), verifier)
    events = list(events_from_api(registry.admin))[: checkpoint.size]
    for event in (events[0], events[len(events) // 2], events[-1]):
        proof_answer = registry.admin.audit_inclusion_proof(event.seq - 1, checkpoint.size)
        assert base64.b64decode(proof_answer["leaf_hash"]) == leaf_hash(event_entry(event))
        verify_event_inclusion(event, proof_from_answer(proof_answer), checkpoint)
    with pytest.raises(BadRequestError, match="events, not"):
        registry.admin.audit_inclusion_proof(0, checkpoint.size + 10_000)
    with pytest.raises(BadRequestError, match="fewer"):
        registry.admin.audit_consistency_proof(2, 1)


def test_worker_records_the_checkpoint_it_saw(registry: Registry) -> None:
    reader = registry.actor("reader").client  # what a serving worker holds
    key = registry.admin.audit_checkpoint()["verifier_key"]
    seen = witness_checkpoint(reader, key)
    assert seen["verified_by"] == parse_verifier_key(key).label
    assert seen["tree_size"] >= 1
    assert seen["checkpoint"].startswith(parse_verifier_key(key).name + "\n")
    unpinned = witness_checkpoint(reader, None)
    assert unpinned["verified_by"] is None
    # the boot path: a pinned key that does not verify refuses the boot before the pull
    from modelward.loader.errors import RefusedError
    from modelward.loader.worker import BootOptions, _witness

    logged: list[str] = []
    other = generate_signer_key(parse_verifier_key(key).name).verifier.key_string
    pinned = _witness(reader, BootOptions(audit_key=key), log=logged.append)
    assert pinned is not None
    assert pinned["verified_by"] == parse_verifier_key(key).label
    with pytest.raises(RefusedError, match="no signature by the pinned key"):
        _witness(reader, BootOptions(audit_key=other), log=logged.append)
    offline = registry.client(None)  # no token: the registry refuses to answer
    assert _witness(offline, BootOptions(), log=logged.append) is None
    assert any("no audit checkpoint recorded" in line for line in logged)
    with pytest.raises(RefusedError):
        _witness(offline, BootOptions(audit_key=key), log=logged.append)


def test_0005_backfills_the_tree_from_the_events(tmp_path: Path) -> None:
    from sqlalchemy import text

    from modelward.attest.audit.tree import CompactRange
    from modelward.registry.db import Database, downgrade, make_engine, upgrade
    from modelward.registry.domains.audit.service import append
    from modelward.registry.domains.audit.tree import root_at, tree_size

    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url, "0004")
    events: list[AuditEvent] = []
    prev = None
    for i in range(11):
        prev = next_event(
            prev,
            at=f"2026-12-16T10:00:{i:02d}.000000Z",
            actor="a",
            action="x",
            subject="s",
            details={"i": i},
        )
        events.append(prev)
    engine = make_engine(url)
    try:
        import rfc8785

        with engine.begin() as conn:
            for e in events:
                conn.execute(
                    text(
                        "INSERT INTO audit_events (seq, at, actor, action, subject, details, "
                        "prev_hash, hash) VALUES (:seq, :at, :actor, :action, :subject, "
                        ":details, :prev_hash, :hash)"
                    ),
                    {**dataclasses.asdict(e), "details": rfc8785.dumps(dict(e.details)).decode()},
                )
        upgrade(url, "0005")
        tree = CompactRange()
        for e in events:
            tree.append(leaf_hash(event_entry(e)))
        db = Database(engine)
        with db.write() as session:
            assert tree_size(session) == 11
            assert root_at(session, 11) == tree.root()
            append(session, actor="a", action="x", subject="s", details={})
        with db.read() as session:
            assert tree_size(session) == 12
        downgrade(url, "0004")
        with engine.connect() as conn:
            names = {r[0] for r in conn.execute(text("SELECT name FROM sqlite_master"))}
        assert "audit_tree_nodes" not in names
    finally:
        engine.dispose()
