"""Issue 38 item 7, the same class in the audit log: a stored integer the next one is
computed from. A database writer's ``audit_events`` row at seq 2**63 - 1 made every audited
write answer 500 (the next seq, 2**63, fits no column): creating a repository, a dry run,
any move. Against a real ``modelward serve`` (SQLite and PostgreSQL): the row is passed over
when the last event is read, the next event follows the newest real one, and the writes go
on; the row itself stays where ``audit verify`` finds it.
"""

from __future__ import annotations

from sqlalchemy import create_engine, delete, insert, select

from modelward.registry.domains.audit.service import MAX_SEQ
from modelward.registry.models import AuditRow
from tests.registry.conftest import Registry, unique

LARGEST_BIGINT = 2**63 - 1


def test_an_audit_row_at_the_largest_seq_does_not_stop_audited_writes(
    registry: Registry,
) -> None:
    assert LARGEST_BIGINT > MAX_SEQ
    engine = create_engine(registry.database_url)
    try:
        with engine.begin() as conn:
            last = conn.execute(select(AuditRow).order_by(AuditRow.seq.desc()).limit(1)).one()
            row = dict(last._mapping)
            conn.execute(insert(AuditRow).values({**row, "seq": LARGEST_BIGINT}))
        name = f"{unique('o')}/{unique('m')}"
        created = registry.cli("repo", "create", name)
        assert created.returncode == 0, created.stdout + created.stderr
        with engine.connect() as conn:
            newest = conn.execute(
                select(AuditRow.seq, AuditRow.action, AuditRow.subject, AuditRow.prev_hash)
                .where(AuditRow.seq < LARGEST_BIGINT)
                .order_by(AuditRow.seq.desc())
                .limit(1)
            ).one()
        assert newest.seq > row["seq"]
        assert newest.subject == name
    finally:
        with engine.begin() as conn:
            conn.execute(delete(AuditRow).where(AuditRow.seq == LARGEST_BIGINT))
        engine.dispose()
