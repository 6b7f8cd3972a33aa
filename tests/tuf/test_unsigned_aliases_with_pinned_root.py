"""Issue 30 item 5, against a real ``modelward serve`` (SQLite and PostgreSQL), the attacker
writing the registry's database:

- ``--unsigned-aliases`` is for a worker *without* a root: once its cache pinned one, the
  flag does not make it take the registry's word (an alias row a database writer moved);
- a forged root row (the next root version, not signed by the current root) is passed
  over: signed alias moves still publish (never a 500), and workers are not served it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from tuf.api.metadata import Metadata, Root

from modelward.attest.keys import generate_private_key
from modelward.attest.tuf import tuf_signer
from modelward.client.config import parse_reference
from modelward.loader.tuf_resolve import AliasTrust, resolve_reference
from tests.registry.conftest import (
    Publisher,
    Registry,
    new_publisher,
    pg_cluster,  # noqa: F401 - the fixture the postgres runs start from
    push_new,
    unique,
)
from tests.tuf.test_registry_attacks_tuf import KINDS, attacker, resolve, sign, uncached_registry


@pytest.fixture(scope="module", params=KINDS)
def registry(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Registry]:
    """This module's own registry (``tuf_freshness_seconds`` 0): ``attacker`` rewrites its
    stored rows behind its back (docs/tuf.md#serving)."""
    yield from uncached_registry(request, tmp_path_factory)


def _signed_dev(registry: Registry, tmp: Path) -> tuple[Publisher, str, str]:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp / unique("w"))
    answer = pub.actor.client.set_alias(repo, "dev", digest)
    assert sign(pub, int(answer["proposal"]))["state"] == "published"
    return pub, repo, digest


def test_unsigned_aliases_does_not_take_the_registrys_word_once_the_cache_pinned_a_root(
    registry: Registry, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pub, repo, signed = _signed_dev(registry, tmp_path)
    root_file = tmp_path / "root.json"
    root_file.write_bytes(registry.admin.tuf_file("1.root.json"))
    cache = tmp_path / "cache"
    ref = parse_reference(f"{repo}@dev")
    client = registry.admin
    # the worker pins the root (its first resolution with --trust-root)
    assert resolve_reference(client, ref, cache, AliasTrust(root=root_file)) == signed
    with attacker(registry) as db:
        evil = push_new(pub, repo, tmp_path / unique("w"))
        db.move_alias(repo, "dev", evil)
        assert client.resolve(ref) == evil  # the registry's word is now the attacker's
        with caplog.at_level(logging.WARNING):
            got = resolve_reference(client, ref, cache, AliasTrust(unsigned=True))
        assert got == signed
        assert "--unsigned-aliases ignored: a TUF root is pinned" in caplog.text
        # without any root (an empty cache) the flag still means what it says
        fresh = resolve_reference(client, ref, tmp_path / "bare", AliasTrust(unsigned=True))
        assert fresh == evil


def test_a_forged_root_row_does_not_make_signed_alias_moves_answer_500(
    registry: Registry, tmp_path: Path
) -> None:
    pub, repo, _first = _signed_dev(registry, tmp_path)
    pinned = registry.admin.tuf_file("1.root.json")
    versions = {r["role"]: r["version"] for r in registry.admin.tuf_status()["roles"]}
    with attacker(registry) as db:
        # the next root version, signed by the attacker's key only
        forged = Metadata[Root].from_bytes(db.metadata("root", versions["root"]))
        forged.signed.version = versions["root"] + 1
        forged.signatures.clear()
        forged.sign(tuf_signer(generate_private_key()))
        db.write("root", versions["root"] + 1, forged.to_bytes())
        digest = push_new(pub, repo, tmp_path / unique("w"))
        answer = pub.actor.client.set_alias(repo, "dev", digest)
        assert sign(pub, int(answer["proposal"]))["state"] == "published"
        # workers are never served the forgery as the next root
        with pytest.raises(Exception, match=r"404|no TUF metadata file"):
            registry.admin.tuf_file(f"{versions['root'] + 1}.root.json")
        assert resolve(registry.admin, pinned, repo, "dev", tmp_path / "worker") == digest
        shown = [r for r in registry.admin.tuf_status()["roles"] if r["role"] == "root"]
        # the root the registry builds on and serves, then the row it refuses
        assert [r["version"] for r in shown] == [versions["root"], versions["root"] + 1]
        assert "not signed as a rotation of the root" in shown[1]["refused"]
