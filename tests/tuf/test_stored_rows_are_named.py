"""Issue 28 item 12: no 500 from stored state, through the real CLI against a real
``modelward serve`` (SQLite and PostgreSQL), the attacker writing unparsable
``tuf_metadata`` rows directly:

- a garbage root version 1: ``trust status`` names the row; ``trust sync`` reports every
  step it could not do, naming the row (role, version, why), and exits 1; the endpoint
  answers with the list, never a bare 500;
- a garbage row of a role nothing delegates: every publish (a signed ``alias set --key``)
  passes over it instead of failing on it, and ``trust sync`` has nothing to report.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from sqlalchemy import create_engine, delete

from modelward.attest.keys import save_private_key
from modelward.registry.domains.signing.tuf.tables import TufMetadata
from tests.registry.conftest import Registry, new_publisher, push_new, unique
from tests.tuf.test_registry_attacks_tuf import Attacker

GARBAGE = b"\x00not json{"


def test_unparsable_rows_are_named_by_trust_status_and_sync(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    key = tmp_path / "pub.key"
    save_private_key(pub.key, key)
    first = push_new(pub, repo, tmp_path / unique("w"))
    moved = registry.cli(
        "alias", "set", f"{repo}@dev", first, "--key", str(key), token=pub.actor.token
    )
    assert moved.returncode == 0, moved.stderr

    engine = create_engine(registry.database_url)
    db = Attacker(engine)
    root = db.metadata("root", 1)
    gone = f"{unique('o')}:{unique('m')}@gone"
    try:
        # the attacker's rows are put back (or taken out) one by one afterwards: no
        # version the registry publishes meanwhile is ever stored twice with other bytes
        db.write("root", 1, GARBAGE)
        status = registry.cli("trust", "status")
        assert status.returncode == 0, status.stderr
        assert "REFUSED: TUF metadata root v1 refused: not TUF metadata" in status.stdout
        synced = registry.cli("trust", "sync")
        assert synced.returncode == 1, synced.stdout + synced.stderr
        assert "not refreshed: snapshot and timestamp (stored row root v1)" in synced.stderr
        assert "tuf_metadata_refused" in synced.stderr
        assert "Traceback" not in synced.stdout + synced.stderr
        answer = httpx.post(
            f"{registry.url}/v1/tuf/sync",
            headers={"authorization": f"Bearer {registry.server.admin_token}"},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        failed = answer.json()["failed"]
        assert {(f["step"], f["role"], f["version"]) for f in failed} >= {
            ("snapshot and timestamp", "root", 1)
        }
        as_json = registry.cli("trust", "sync", "--json")
        assert as_json.returncode == 1
        assert json.loads(as_json.stdout)["failed"], as_json.stdout
        db.write("root", 1, root)

        # a garbage row of a role nothing delegates: passed over by every publish
        db.write(gone, 1, GARBAGE)
        second = push_new(pub, repo, tmp_path / unique("w"))
        again = registry.cli(
            "alias", "set", f"{repo}@dev", second, "--key", str(key), token=pub.actor.token
        )
        assert again.returncode == 0, again.stdout + again.stderr
        assert pub.actor.client.get_alias(repo, "dev")["signed"] is True
        synced = registry.cli("trust", "sync")
        assert synced.returncode == 0, synced.stdout + synced.stderr
    finally:
        db.write("root", 1, root)
        with engine.begin() as conn:
            conn.execute(delete(TufMetadata).where(TufMetadata.role == gone))
        engine.dispose()
    assert registry.cli("trust", "sync").returncode == 0
