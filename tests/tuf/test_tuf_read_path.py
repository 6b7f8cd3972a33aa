"""``/tuf/{file}`` from memory (issue 29, item 3; docs/tuf.md#serving), against a real serve:
strong ETags and ``304 Not Modified``; a publish by another process served within the
freshness bound; a revoked token stops reading within the token cache's TTL; anonymous
reads only with ``tuf_public``."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import httpx
import pytest

from modelward.registry.db import Database, make_engine
from modelward.registry.settings import Settings
from modelward.registry.tuf.keys import OnlineKeys
from modelward.registry.tuf.service import open_repository
from tests.registry.conftest import Registry, start_registry

DEFAULTS = Settings()
FRESHNESS = DEFAULTS.tuf_freshness_seconds  # documented default: 0 (no cache)
CACHED = 1.0  # the bound the operator sets to serve from memory (docs/tuf.md#serving)
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
    time.sleep(TOKEN_TTL + 0.3)
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
