"""Issue 38 item 2: restores that keep their promises, through the CLI on SQLite and
PostgreSQL. A backup is authenticated (HMAC under a key it does not carry), so one whose
manifest was recomputed after tampering is refused; a restored older backup never publishes
a version number the registry published before (the high-water mark from its metadata
mirror); and a restore that would lift a quarantine made after the backup, or bring back
one lifted after it, lists them and needs --accept-quarantine-changes. Every refusal leaves
the target as it was."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tuf.api.metadata import Metadata

from modelward.attest.keys import generate_private_key, public_key_pem
from modelward.attest.tuf import tuf_signer
from modelward.registry.db import make_engine, schema_state
from tests.registry.conftest import (
    PgCluster,
    Publisher,
    Registry,
    push_new,
    start_registry,
    unique,
)
from tests.registry.pinned_worker import PinnedWorker
from tests.registry.test_backup_restore import ONE_PROCESS, _admin, _serve_restored, _target


@dataclass
class Scene:
    """A registry backed up (``older``) before: ``second`` moved ``dev``, ``quarantined``
    was quarantined and ``lifted``'s quarantine (made before the backup) was lifted."""

    reg: Registry
    pg: PgCluster | None
    worker: PinnedWorker
    key: Path
    older: Path
    mirror: Path
    quarantined: str
    lifted: str
    tmp: Path

    def restore(
        self, src: Path, name: str, *flags: str, key: Path | None = None
    ) -> tuple[list[str], subprocess.CompletedProcess[str]]:
        into = _target(self.tmp / unique(name), self.pg)
        done = _admin("restore", str(src), *into, "--backup-key", str(key or self.key), *flags)
        return into, done


def _key(path: Path) -> Path:
    path.write_bytes(os.urandom(32))
    path.chmod(0o600)
    return path


def _reviewer(reg: Registry) -> Publisher:
    actor = reg.actor("reviewer")
    key = generate_private_key()
    pem = public_key_pem(key.public_key()).decode()
    return Publisher(actor, key, str(reg.admin.register_key(pem, principal=actor.name)["keyid"]))


def _signed(reviewer: Publisher, answer: dict[str, object]) -> None:
    """A second reviewer signs the quarantine role's proposal (threshold 1): published."""
    client = reviewer.actor.client
    proposal_id = int(str(answer["proposal"]))
    payload = Metadata.from_bytes(base64.b64decode(client.tuf_proposal(proposal_id)["payload"]))
    signature = payload.sign(tuf_signer(reviewer.key))
    signed = client.tuf_sign(proposal_id, signature.keyid, signature.signature)
    assert signed["state"] == "published", signed


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def scene(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scene]:
    tmp = tmp_path_factory.mktemp(f"restore-{request.param}")
    pg = request.getfixturevalue("pg_cluster") if request.param == "postgres" else None
    reg = start_registry(request.param, tmp / "reg", pg, extra_env=ONE_PROCESS)
    try:
        worker = PinnedWorker.start(reg, tmp / "w")
        worker.resolves(worker.publish())
        proposer, reviewer = _reviewer(reg), _reviewer(reg)
        client = proposer.actor.client
        lifted = push_new(worker.pub, worker.repo, tmp / unique("l"))
        _signed(reviewer, client.quarantine(worker.repo, lifted, "suspect"))
        key = _key(tmp / "backup.key")
        source = ["--data-dir", str(reg.server.data_dir), "--backup-key", str(key)]
        if pg is not None:
            source += ["--database-url", reg.database_url]
        older = tmp / "older"
        taken = _admin("backup", str(older), *source)
        assert taken.returncode == 0, taken.stderr
        # after the backup: a move, a quarantine, a lifted quarantine
        worker.resolves(worker.publish())
        quarantined = push_new(worker.pub, worker.repo, tmp / unique("q"))
        _signed(reviewer, client.quarantine(worker.repo, quarantined, "backdoor"))
        _signed(reviewer, client.lift_quarantine(worker.repo, lifted, "cleared"))
        reg.server.stop()
        mirror = reg.server.data_dir / "mirror" / "tuf"
        yield Scene(reg, pg, worker, key, older, mirror, quarantined, lifted, tmp)
    finally:
        reg.close()
        reg.server.stop()


def _nothing_written(scene: Scene, into: list[str]) -> None:
    assert not Path(into[1]).exists(), sorted(Path(into[1]).rglob("*"))
    if scene.pg is not None:
        engine = make_engine(into[into.index("--database-url") + 1])
        try:
            assert schema_state(engine) == "empty"
        finally:
            engine.dispose()


def test_a_backup_whose_manifest_was_recomputed_after_tampering_is_refused(scene: Scene) -> None:
    forged = scene.tmp / unique("forged")
    shutil.copytree(scene.older, forged)
    manifest = json.loads((forged / "manifest.json").read_text())
    name = "registry.db" if scene.pg is None else "database.pgdump"
    with (forged / name).open("ab") as db:
        db.write(b"\0" * 512)  # the attacker's rows
    data = (forged / name).read_bytes()
    manifest["files"][name] = {
        "size": len(data),
        "sha256": f"sha256:{hashlib.sha256(data).hexdigest()}",
    }
    (forged / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    into, done = scene.restore(forged, "t", "--published-metadata", str(scene.mirror))
    assert done.returncode == 1, done.stderr
    assert f"{forged / 'manifest.json'}: its HMAC in {forged / 'manifest.hmac'}" in done.stderr
    assert "does not verify" in done.stderr
    _nothing_written(scene, into)
    (forged / "manifest.hmac").unlink()
    into, done = scene.restore(forged, "t", "--published-metadata", str(scene.mirror))
    assert done.returncode == 1
    assert f"{forged / 'manifest.hmac'} does not exist" in done.stderr
    _nothing_written(scene, into)


def test_a_backup_restored_with_another_key_is_refused(scene: Scene) -> None:
    other = _key(scene.tmp / unique("other.key"))
    into, done = scene.restore(
        scene.older, "k", "--published-metadata", str(scene.mirror), key=other
    )
    assert done.returncode == 1
    assert "was made with another backup key" in done.stderr
    _nothing_written(scene, into)


def test_a_restore_that_cannot_tell_the_published_versions_is_refused_unless_unsafe(
    scene: Scene,
) -> None:
    into, done = scene.restore(scene.older, "u")
    assert done.returncode == 1
    assert "cannot tell which TUF versions the registry published" in done.stderr
    assert "--published-metadata DIR" in done.stderr
    _nothing_written(scene, into)
    into, done = scene.restore(scene.older, "u", "--unsafe-without-published-metadata")
    assert done.returncode == 0, done.stderr
    assert "warning: restored without the published metadata" in done.stderr


def test_a_restore_that_would_lift_a_later_quarantine_lists_it_and_needs_a_flag(
    scene: Scene,
) -> None:
    into, done = scene.restore(scene.older, "q", "--published-metadata", str(scene.mirror))
    assert done.returncode == 1
    assert f"lifts {scene.quarantined} (quarantined after the backup)" in done.stderr
    assert f"quarantines {scene.lifted} again (lifted after the backup)" in done.stderr
    assert "--accept-quarantine-changes" in done.stderr
    _nothing_written(scene, into)


def test_a_restored_older_backup_never_publishes_a_version_number_again(scene: Scene) -> None:
    into, done = scene.restore(
        scene.older,
        "r",
        "--published-metadata",
        str(scene.mirror),
        "--accept-quarantine-changes",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["quarantines_lifted"] == [scene.quarantined]
    assert summary["quarantines_reimposed"] == [scene.lifted]
    published = {p.name: p.read_bytes() for p in scene.mirror.iterdir() if p.is_file()}
    timestamp = json.loads(published["timestamp.json"])["signed"]["version"]
    assert summary["reserved_versions"]["timestamp"] == timestamp
    restored = _serve_restored(scene.reg, into)
    try:
        # the moves made again: a fresh worker follows them
        again = dataclasses.replace(scene.worker, reg=restored, cache=scene.tmp / unique("c"))
        third = again.publish()
        again.resolves(third, restored)
    finally:
        restored.close()
        restored.server.stop()
    # every version the restored registry published that the registry had published
    # before holds the same bytes: no number was used again for other content
    mirror = Path(into[1]) / "mirror" / "tuf"
    reused = [
        name
        for name in sorted(p.name for p in mirror.iterdir())
        if name in published
        and name != "timestamp.json"
        and (mirror / name).read_bytes() != published[name]
    ]
    assert reused == []
    now = json.loads((mirror / "timestamp.json").read_bytes())["signed"]["version"]
    assert now > timestamp
