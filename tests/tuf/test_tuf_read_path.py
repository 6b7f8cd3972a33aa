"""``/tuf/{file}`` from memory (issue 29, item 3; docs/tuf.md#serving), against a real serve:
strong ETags and ``304 Not Modified``; the fast path (registry/domains/signing/fast_path.py)
answering exactly as the route does, and leaving what it must refuse to the app; a publish
through one ``serve`` worker served by every worker at once, and one by a program writing
the database within the freshness bound; a revoked token stops reading within the token
cache's TTL; anonymous reads only with ``tuf_public``."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from pathlib import Path

import httpx
import pytest
from tuf.api.metadata import Metadata

from modelward.attest.tuf import tuf_signer
from modelward.registry.db import Database, make_engine
from modelward.registry.domains.signing.tuf.bootstrap import open_repository
from modelward.registry.domains.signing.tuf.generation import GENERATION_FILE, SharedGeneration
from modelward.registry.domains.signing.tuf.keys import OnlineKeys
from modelward.registry.domains.signing.tuf.served import MetadataFiles
from modelward.registry.settings import Settings
from tests.registry.conftest import (
    Registry,
    make_bundle_dir,
    new_publisher,
    run_py,
    start_registry,
)

DEFAULTS = Settings()
FRESHNESS = DEFAULTS.tuf_freshness_seconds  # documented default: 1 s
CACHED = 1.0  # the bound measured in docs/performance.md (docs/tuf.md#serving)
# what every answer of the route and of the fast path has alike (not the date or request id)
SAME = ("cache-control", "etag", "content-length", "content-type")
TOKEN_TTL = DEFAULTS.tuf_token_cache_seconds  # documented default: 5 s


def _get(reg: Registry, name: str, token: str | None, **headers: str) -> httpx.Response:
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return httpx.get(f"{reg.url}/tuf/{name}", headers=headers, timeout=30)


def _etag(body: bytes) -> str:
    return f'"{hashlib.sha256(body).hexdigest()}"'


def _resign_timestamp_elsewhere(reg: Registry) -> None:
    """Another process on the same database re-signs the timestamp (as a second ``serve``
    replica, or ``trust`` tooling, would)."""
    engine = make_engine(reg.database_url)
    try:
        with Database(engine).write() as session:
            keys = OnlineKeys(reg.server.data_dir / "tuf-keys")
            open_repository(session, keys).do_timestamp(force=True)
    finally:
        engine.dispose()


def test_timestamp_has_strong_etag_and_304_without_body(registry: Registry) -> None:
    reader = registry.actor("reader")
    first = _get(registry, "timestamp.json", reader.token)
    assert first.status_code == 200
    assert first.headers["etag"] == _etag(first.content)
    assert first.headers["cache-control"] == "no-cache"
    again = _get(
        registry, "timestamp.json", reader.token, **{"if-none-match": first.headers["etag"]}
    )
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["etag"] == first.headers["etag"]
    other = _get(registry, "timestamp.json", reader.token, **{"if-none-match": '"00", W/"11"'})
    assert other.status_code == 200
    assert other.content == first.content


def test_versioned_file_is_immutable_with_etag_and_304(registry: Registry) -> None:
    reader = registry.actor("reader")
    root = _get(registry, "1.root.json", reader.token)
    assert root.status_code == 200
    assert root.headers["etag"] == _etag(root.content)
    assert "immutable" in root.headers["cache-control"]
    cached = _get(registry, "1.root.json", reader.token, **{"if-none-match": root.headers["etag"]})
    assert cached.status_code == 304
    assert cached.content == b""
    assert _get(registry, "999999.root.json", reader.token).status_code == 404


def test_304_needs_a_token_like_the_file(registry: Registry) -> None:
    """A conditional request reveals whether a digest is current: it is authorized first."""
    reader = registry.actor("reader")
    etag = _get(registry, "timestamp.json", reader.token).headers["etag"]
    assert _get(registry, "timestamp.json", None, **{"if-none-match": etag}).status_code == 401


def test_fast_path_answers_exactly_as_the_route(registry: Registry) -> None:
    """The first read of a new token goes through the route (the token is checked and
    remembered); the next ones are answered in front of the app: same status, headers and
    bytes, and the same request log line (route template, principal)."""
    reader = registry.actor("reader")
    for name in ("timestamp.json", "1.root.json"):
        routed = _get(registry, name, reader.token)
        fast = _get(registry, name, reader.token)
        assert routed.status_code == fast.status_code == 200
        assert routed.content == fast.content
        assert {h: routed.headers.get(h) for h in SAME} == {h: fast.headers.get(h) for h in SAME}
        assert fast.headers["x-request-id"] != routed.headers["x-request-id"]
        etag = {"if-none-match": fast.headers["etag"]}
        not_modified = _get(registry, name, reader.token, **etag)
        assert not_modified.status_code == 304
        assert not_modified.content == b""
        assert {h: not_modified.headers.get(h) for h in SAME} == {
            "cache-control": fast.headers["cache-control"],
            "etag": fast.headers["etag"],
            "content-length": None,
            "content-type": None,
        }
        given = {"x-request-id": f"fast-{reader.name}-{name}"}
        assert (
            _get(registry, name, reader.token, **given).headers["x-request-id"]
            == (given["x-request-id"])
        )
        logged = [
            json.loads(line)
            for line in registry.server.log().splitlines()
            if given["x-request-id"] in line and line.startswith("{")
        ]
        assert [(e["route"], e["status"], e["principal"]) for e in logged] == [
            ("/tuf/{file_name}", 200, reader.name)
        ]


def test_what_the_fast_path_cannot_answer_is_refused_by_the_app(registry: Registry) -> None:
    """A remembered token does not let a request past the checks every route makes."""
    reader = registry.actor("reader")
    assert _get(registry, "timestamp.json", reader.token).status_code == 200  # remembered
    nul = httpx.get(
        f"{registry.url}/tuf/timestamp.json?x=%00",
        headers={"authorization": f"Bearer {reader.token}"},
        timeout=30,
    )
    assert nul.status_code == 400
    assert nul.json()["error"]["code"] == "invalid_value"
    assert _get(registry, "timestamp.jsonx", reader.token).status_code == 404
    assert _get(registry, "0.root.json", reader.token).status_code == 404
    assert _get(registry, "timestamp.json", reader.token + "x").status_code == 401
    head = httpx.head(
        f"{registry.url}/tuf/timestamp.json",
        headers={"authorization": f"Bearer {reader.token}"},
        timeout=30,
    )
    assert head.status_code == 405


def test_publish_through_one_worker_is_served_by_every_worker_at_once(
    registry: Registry, tmp_path: Path
) -> None:
    """On PostgreSQL ``serve`` runs two worker processes: the one that did not answer the
    publish serves the new timestamp on the next request, not up to a second later (the
    shared generation in the keys directory, registry/domains/signing/tuf/generation.py)."""
    reader = registry.actor("reader")
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    client = pub.actor.client
    digest = client.push(make_bundle_dir(tmp_path / "b"), repo, sign=pub.sign).digest
    proposal = client.tuf_proposal(int(client.set_alias(repo, "dev", digest)["proposal"]))
    signature = Metadata.from_bytes(base64.b64decode(proposal["payload"])).sign(tuf_signer(pub.key))
    # every worker holds the current timestamp a moment before the publish
    before = {_get(registry, "timestamp.json", reader.token).content for _ in range(10)}
    signed = client.tuf_sign(proposal["id"], signature.keyid, signature.signature)
    assert signed["state"] == "published", signed
    after = [_get(registry, "timestamp.json", reader.token).content for _ in range(20)]
    assert len(set(after)) == 1, "the workers served different timestamps after the publish"
    assert after[0] not in before


def test_publish_by_another_process_served_within_freshness_bound(registry: Registry) -> None:
    reader = registry.actor("reader")
    before = _get(registry, "timestamp.json", reader.token)
    assert before.status_code == 200
    old = before.headers["etag"]
    _resign_timestamp_elsewhere(registry)
    published = time.monotonic()
    time.sleep(FRESHNESS + 0.3)  # the bound, plus a request's slack
    after = _get(registry, "timestamp.json", reader.token, **{"if-none-match": old})
    assert after.status_code == 200, f"old timestamp served {time.monotonic() - published:.1f}s"
    assert after.headers["etag"] == _etag(after.content) != old


def test_revoked_token_stops_reading_within_token_ttl(registry: Registry) -> None:
    reader = registry.actor("reader")
    issued = registry.admin.create_token(reader.name)
    token = str(issued["token"])
    assert _get(registry, "timestamp.json", token).status_code == 200
    registry.admin.revoke_token(str(issued["id"]))
    # read on throughout: past three quarters of its time the entry is checked again in the
    # background (each process keeps its own entry: one may refuse while another still reads)
    revoked = time.monotonic()
    answers = []
    while time.monotonic() - revoked < TOKEN_TTL + 0.3:
        answers.append(_get(registry, "timestamp.json", token).status_code)
        time.sleep(0.25)
    assert set(answers) <= {200, 401}
    refused = _get(registry, "timestamp.json", token)
    assert refused.status_code == 401
    assert "revoked" in refused.text
    # other endpoints never cached it
    assert (
        httpx.get(
            f"{registry.url}/v1/tuf/status", headers={"authorization": f"Bearer {token}"}
        ).status_code
        == 401
    )


@pytest.mark.sqlite_only
def test_anonymous_read_refused_unless_tuf_public(registry: Registry, tmp_path: Path) -> None:
    assert _get(registry, "timestamp.json", None).status_code == 401
    assert _get(registry, "1.root.json", None).status_code == 401
    env = {"MODELWARD_TUF_PUBLIC": "true", "MODELWARD_TUF_FRESHNESS_SECONDS": str(CACHED)}
    public = start_registry("sqlite", tmp_path, None, extra_env=env)
    try:
        deadline = time.monotonic() + 30  # the first root and timestamp, signed at start
        while (answer := _get(public, "timestamp.json", None)).status_code == 404:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert answer.status_code == 200
        assert answer.headers["etag"] == _etag(answer.content)
        etag = answer.headers["etag"]
        assert _get(public, "timestamp.json", None, **{"if-none-match": etag}).status_code == 304
        # served from memory: another process's publish is served within the bound
        _resign_timestamp_elsewhere(public)
        time.sleep(CACHED + 0.3)
        after = _get(public, "timestamp.json", None, **{"if-none-match": etag})
        assert after.status_code == 200
        assert after.headers["etag"] == _etag(after.content) != etag
    finally:
        public.close()
        public.server.stop()


def _resign_in_another_process(reg: Registry, announce_to: Path | None) -> None:
    """A separate process re-signs the timestamp and, with ``announce_to``, bumps the
    generation there as a ``serve`` worker does before answering a publish."""
    code = f"""
from pathlib import Path
from modelward.registry.db import Database, make_engine
from modelward.registry.domains.signing.tuf.generation import SharedGeneration
from modelward.registry.domains.signing.tuf.keys import OnlineKeys
from modelward.registry.domains.signing.tuf.bootstrap import open_repository
engine = make_engine({reg.database_url!r})
with Database(engine).write() as session:
    keys = OnlineKeys(Path({str(reg.server.data_dir / "tuf-keys")!r}))
    open_repository(session, keys).do_timestamp(force=True)
engine.dispose()
announce_to = {str(announce_to) if announce_to else None!r}
if announce_to:
    SharedGeneration(Path(announce_to)).bump()
"""
    done = run_py(code)
    assert done.returncode == 0, done.stderr


@pytest.mark.sqlite_only
def test_a_publish_announced_by_another_process_is_served_at_once(
    registry: Registry, tmp_path: Path
) -> None:
    """What a ``serve`` worker keeps for ``tuf_freshness_seconds`` is dropped the moment a
    process sharing its generation announces a commit; without the announcement (a program
    writing the database directly) the copy is served until the bound."""
    engine = make_engine(registry.database_url)
    shared = tmp_path / GENERATION_FILE
    files = MetadataFiles(Database(engine), freshness=60, generation=SharedGeneration(shared))
    try:
        first = files.load("timestamp", None)
        assert first is not None
        assert files.peek("timestamp", None) == first
        _resign_in_another_process(registry, None)
        assert files.peek("timestamp", None) == first  # unannounced: within the bound
        _resign_in_another_process(registry, shared)
        assert files.peek("timestamp", None) is None  # announced: read again
        second = files.load("timestamp", None)
        assert second is not None
        assert second.etag != first.etag
        assert files.peek("timestamp", None) == second
    finally:
        engine.dispose()
