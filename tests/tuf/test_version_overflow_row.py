"""Issue 38 item 7: a stored version that no next signature can follow, against a real
``modelward serve`` (SQLite and PostgreSQL) and the real CLI, the attacker writing a
``tuf_metadata`` row directly:

- a garbage row of the publishers' role at version 2**63 - 1 (the largest the 64-bit columns
  hold): the next signed ``alias set --key`` answered 500 (``OverflowError``: the next
  version, 2**63, fits no column). The row is refused when it is read, like every other
  malformed row: the publish goes on past it, and ``trust status`` names it;
- a garbage row at ``MAX_VERSION`` itself (the largest version a file name carries): no
  version can follow it, so the publish is refused naming the row (503), never a 500.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, delete

from modelward.attest.keys import save_private_key
from modelward.attest.tuf import open_role
from modelward.registry.domains.signing.tuf.store import MAX_VERSION
from modelward.registry.domains.signing.tuf.tables import TufMetadata
from tests.registry.conftest import Registry, new_publisher, push_new, unique
from tests.tuf.test_registry_attacks_tuf import Attacker

GARBAGE = b"\x00not json{"
LARGEST_BIGINT = 2**63 - 1


def test_a_garbage_row_at_the_largest_version_is_passed_over_and_named(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    key = tmp_path / "pub.key"
    save_private_key(pub.key, key)
    role = open_role(repo)
    engine = create_engine(registry.database_url)
    db = Attacker(engine)
    try:
        first = push_new(pub, repo, tmp_path / unique("w"))
        moved = registry.cli(
            "alias", "set", f"{repo}@dev", first, "--key", str(key), token=pub.actor.token
        )
        assert moved.returncode == 0, moved.stdout + moved.stderr

        # (1) past every version: passed over, the publish goes on, status names the row
        db.write(role, LARGEST_BIGINT, GARBAGE)
        second = push_new(pub, repo, tmp_path / unique("w"))
        again = registry.cli(
            "alias", "set", f"{repo}@dev", second, "--key", str(key), token=pub.actor.token
        )
        assert again.returncode == 0, again.stdout + again.stderr
        assert "Traceback" not in again.stdout + again.stderr
        alias = pub.actor.client.get_alias(repo, "dev")
        assert (alias["digest"], alias["signed"]) == (second, True)
        status = registry.cli("trust", "status")
        assert status.returncode == 0, status.stderr
        assert f"TUF metadata {role} v{LARGEST_BIGINT} refused: no version can follow it" in (
            status.stdout
        ), status.stdout
        shown = [r for r in registry.admin.tuf_status()["roles"] if r["role"] == role]
        assert [r["version"] for r in shown if "refused" not in r] == [2]
        assert [r["version"] for r in shown if "refused" in r] == [LARGEST_BIGINT]

        # (2) the last version there is: refused naming the row, never a 500
        db.write(role, MAX_VERSION, GARBAGE)
        third = push_new(pub, repo, tmp_path / unique("w"))
        refused = registry.cli(
            "alias", "set", f"{repo}@dev", third, "--key", str(key), token=pub.actor.token
        )
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert f"TUF metadata {role} v{MAX_VERSION} refused: no version can follow it" in (
            refused.stderr
        ), refused.stderr
        assert "Traceback" not in refused.stdout + refused.stderr
    finally:
        with engine.begin() as conn:
            conn.execute(
                delete(TufMetadata).where(
                    TufMetadata.role == role, TufMetadata.version >= MAX_VERSION
                )
            )
        engine.dispose()
