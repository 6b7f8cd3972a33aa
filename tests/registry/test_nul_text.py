"""Text the database cannot hold is bad input, never a 500 (PostgreSQL refuses NUL in text).

Found by the API fuzzing campaign on PostgreSQL (docs/reliability.md, F6); the class is "a
value the database cannot store", answered by one handler, so every endpoint is covered.
"""

from __future__ import annotations

import httpx
import pytest

from tests.registry.conftest import Registry, new_publisher


def _client(registry: Registry, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=registry.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


def test_nul_in_a_path_parameter_is_a_400_and_audited(registry: Registry) -> None:
    from modelward.client.audit import events_from_api

    repo = registry.repo(new_publisher(registry))
    reader = registry.actor("reader")
    with _client(registry, reader.token) as http:
        for path in ("/v1/repos/o%00x/name", f"/v1/repos/{repo}/aliases/a%00b"):
            r = http.get(path)
            assert r.status_code < 500, (path, r.text)
            if registry.kind == "postgres":
                assert r.status_code == 400, (path, r.text)
                assert r.json()["error"]["code"] == "invalid_value"
    if registry.kind == "postgres":
        denied = [
            e
            for e in events_from_api(registry.admin)
            if e.action == "denied" and e.details.get("code") == "invalid_value"
        ]
        assert any("%00" in e.subject for e in denied)


@pytest.mark.parametrize("field", ["principal"])
def test_nul_in_a_json_string_is_a_400(registry: Registry, field: str) -> None:
    from modelward.attest.keys import generate_private_key, public_key_pem

    pem = public_key_pem(generate_private_key().public_key()).decode()
    with _client(registry, registry.server.admin_token) as http:
        r = http.post("/v1/keys", json={"public_key_pem": pem, field: "a\u0000b"})
    assert r.status_code in (400, 404), r.text
    assert r.status_code < 500


def test_nul_in_a_boot_record_is_a_400(registry: Registry, tmp_path) -> None:
    from tests.registry.conftest import push_new

    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    reader = registry.actor("reader")
    with _client(registry, reader.token) as http:
        r = http.post(
            f"/v1/repos/{repo}/bundles/{digest}/boots",
            json={"fingerprint_id": "a\u0000b", "outcome": "ok"},
        )
    assert r.status_code < 500, r.text
    if registry.kind == "postgres":
        assert r.status_code == 400
        assert r.json()["error"]["code"] == "invalid_value"


def test_method_not_allowed_says_which_are(registry: Registry) -> None:
    """A 405 carries ``Allow`` (RFC 9110 15.5.6), in the one JSON error shape."""
    with _client(registry, registry.server.admin_token) as http:
        r = http.request("TRACE", "/healthz")
    assert r.status_code == 405
    assert "GET" in r.headers["allow"]
    assert r.json()["error"]["code"] == "method_not_allowed"
