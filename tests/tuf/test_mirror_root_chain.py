"""Issue 38 item 3: a mirror's 404 cannot hide a new root (docs/tuf.md#mirrors).

The attack: a copy of the metadata from before ``trust init`` (a backup's, or a mirror's:
every file signed with the v1 root's keys, which ``trust init`` retired), served from a
mirror the attacker controls, which answers 404 for ``2.root.json``. A worker pinned to v1
asked the mirror for the next root, was told there was none, and verified the v1-era files
from v1: it resolved ``dev`` to the bundle the alias named before the ceremony, not to the
one the registry names now. The root chain now comes from the registry only, so the worker
learns root v2 and refuses what the retired keys signed.

Against a real ``modelward serve`` (SQLite: the database is irrelevant) and a loopback HTTP
server started here as the hostile mirror.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from modelward.attest.keys import generate_private_key, save_private_key
from modelward.client.config import parse_reference
from modelward.loader.tuf_resolve import AliasTrust, TrustMetadataRefused, resolve_reference
from tests.registry.conftest import Registry, new_publisher, push_new, unique
from tests.tuf.test_metadata_mirror import mirror_dir, signed_move

pytestmark = pytest.mark.sqlite_only


@contextmanager
def hostile_mirror(files: Path) -> Iterator[tuple[str, list[str]]]:
    """A loopback server answering ``/tuf/NAME`` with ``files/NAME``, 404 when it holds no
    such file (``2.root.json``); its URL, and the names asked of it."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            name = self.path.rsplit("/", 1)[-1]
            asked.append(name)
            path = files / name
            body = path.read_bytes() if path.is_file() else b""
            self.send_response(200 if path.is_file() else 404)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/tuf/", asked
    finally:
        server.shutdown()
        server.server_close()


def resolve(registry: Registry, ref: str, root: Path, cache: Path, url: str | None) -> str:
    trust = AliasTrust(root=root, metadata_url=url)
    return resolve_reference(registry.admin, parse_reference(ref), cache, trust)


def test_a_mirror_answering_404_for_the_new_root_cannot_serve_what_the_retired_keys_signed(
    fresh_registry: Registry, tmp_path: Path
) -> None:
    registry = fresh_registry
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    before = push_new(pub, repo, tmp_path / unique("w"))
    signed_move(pub, repo, "dev", before)
    root_v1 = tmp_path / "root-v1.json"
    root_v1.write_bytes(registry.admin.tuf_file("1.root.json"))
    # the attacker's copy: every file of before the ceremony, signed with v1's keys
    stolen = tmp_path / "stolen"
    shutil.copytree(mirror_dir(registry), stolen)
    root_key, targets_key = tmp_path / "root.key", tmp_path / "targets.key"
    for path in (root_key, targets_key):
        save_private_key(generate_private_key(), path)
    init = registry.cli(
        "trust", "init", "--root-key", str(root_key), "--targets-key", str(targets_key)
    )
    assert init.returncode == 0, init.stdout + init.stderr
    now = push_new(pub, repo, tmp_path / unique("w"))
    signed_move(pub, repo, "dev", now)
    assert resolve(registry, f"{repo}@dev", root_v1, tmp_path / "honest", None) == now

    with hostile_mirror(stolen) as (url, asked):
        # a fresh worker pinned to v1, and one that resolved from the registry since
        for cache in ("fresh", "honest"):
            with pytest.raises(TrustMetadataRefused) as refused:
                resolve(registry, f"{repo}@dev", root_v1, tmp_path / cache, url)
            assert "was refused" in str(refused.value), str(refused.value)
    # no root version was asked of the mirror: the worker learnt root v2 from the registry
    assert asked, "the mirror served nothing"
    assert not [name for name in asked if name.endswith(".root.json")], asked
    assert before != now
