"""A NUL character is refused at the edge, naming where it is (issue 30, item 10).

The attack: any string with U+0000 that reaches a PostgreSQL query was a 500 (docs/
reliability.md F6), and on SQLite it was stored. ``registry/domains/_nul.py`` refuses it
before any route reads the database, in every kind of place (path parameter, query
parameter, header, body string), with 400 ``invalid_value`` and ``detail.field`` naming it,
audited under the caller who sent it; the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from modelward.client.errors import NotFoundError
from tests.registry.conftest import Actor, Registry, new_publisher, push_new


def _http(registry: Registry, actor: Actor) -> httpx.Client:
    return httpx.Client(
        base_url=registry.url, headers={"Authorization": f"Bearer {actor.token}"}, timeout=30
    )


def _refused(response: httpx.Response, field: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_value", error
    assert error["detail"]["field"] == field, error
    assert field in error["message"]


def _denials(registry: Registry, actor: Actor) -> list[dict[str, object]]:
    return [
        e
        for e in registry.admin.iter_audit()
        if e["action"] == "denied" and e["actor"] == actor.name
    ]


def test_nul_in_a_path_parameter_is_refused_naming_it(registry: Registry) -> None:
    repo = registry.repo(new_publisher(registry))
    reader = registry.actor("reader")
    with _http(registry, reader) as http:
        _refused(http.get(f"/v1/repos/{repo}/aliases/a%00b"), "path parameter 'alias'")
        _refused(http.get("/v1/repos/o%00x/name"), "path parameter 'org'")
    [first, second] = _denials(registry, reader)
    assert "%00" in str(first["subject"])
    assert "\x00" not in str(first["subject"])
    assert first["details"]["code"] == "invalid_value"  # type: ignore[index]
    assert "path parameter 'org'" in str(second["details"])


def test_nul_in_a_query_parameter_is_refused_naming_it(registry: Registry) -> None:
    reader = registry.actor("reader")
    with _http(registry, reader) as http:
        _refused(http.get("/v1/repos", params={"org": "a\x00b"}), "query parameter 'org'")
        _refused(http.get("/v1/repos", params={"a\x00": "x"}), "query parameter 'a%00'")


def test_nul_in_a_json_body_string_is_refused_naming_the_field(
    registry: Registry, tmp_path: Path
) -> None:
    from modelward.attest.keys import generate_private_key, public_key_pem

    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    pem = public_key_pem(generate_private_key().public_key()).decode()
    with _http(registry, pub.actor) as http:
        _refused(
            http.post("/v1/keys", json={"public_key_pem": pem, "principal": "a\x00b"}),
            "body field 'principal'",
        )
        _refused(
            http.post(
                f"/v1/repos/{repo}/bundles/{digest}/boots",
                json={"fingerprint_id": "a\x00b", "outcome": "ok"},
            ),
            "body field 'fingerprint_id'",
        )
        _refused(
            http.put(f"/v1/repos/{repo}/aliases/dev", json={"digest": digest, "reason": "\x00"}),
            "body field 'reason'",
        )
        _refused(
            http.post(f"/v1/repos/{repo}/aliases/dev/dry-run", json={"digest": digest, "x\x00": 1}),
            "body field 'x%00'",
        )
        # a raw NUL byte makes the body no JSON at all: refused as such (422), never stored
        raw = http.post(
            "/v1/keys",
            content=b'{"public_key_pem": "\x00"}',
            headers={"Content-Type": "application/json"},
        )
        assert raw.status_code == 422, raw.text
    with pytest.raises(NotFoundError):  # nothing moved
        pub.actor.client.get_alias(repo, "dev")


def _raw_request(registry: Registry, request: bytes) -> bytes:
    parts = urlsplit(registry.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_nul_in_a_header_is_a_400(registry: Registry) -> None:
    """HTTP forbids a NUL in a header; whether the HTTP layer refuses it or the edge does,
    the answer is a 400, never a 500 or a stored NUL."""
    reader = registry.actor("reader")
    for header in (b"X-Request-ID: a\x00b", b"X-Note: \x00"):
        answer = _raw_request(
            registry,
            b"GET /v1/whoami HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            + f"Authorization: Bearer {reader.token}\r\n".encode()
            + header
            + b"\r\n\r\n",
        )
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
        if b"application/json" in answer:
            assert b"invalid_value" in answer
            assert b"header" in answer


@pytest.mark.sqlite_only
def test_nul_in_a_header_that_reaches_the_app_is_named() -> None:
    """Behind an HTTP layer that lets a NUL through, the edge names the header."""
    import asyncio

    from starlette.requests import Request

    from modelward.registry.domains._nul import _where

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/v1/whoami",
        "query_string": b"",
        "headers": [(b"x-note", b"a\x00b")],
        "path_params": {},
    }
    assert asyncio.run(_where(Request(scope))) == "header 'x-note'"


@pytest.mark.sqlite_only
def test_a_control_character_request_id_is_never_echoed(registry: Registry) -> None:
    reader = registry.actor("reader")
    with _http(registry, reader) as http:
        answer = http.get("/v1/whoami", headers={"X-Request-ID": "a\tb"})
    assert answer.status_code == 200
    assert answer.headers["x-request-id"] != "a\tb"


def test_nul_under_v2_is_a_400_in_the_oci_shape(registry: Registry) -> None:
    reader = registry.actor("reader")
    with _http(registry, reader) as http:
        answer = http.get("/v2/o%00x/name/tags/list")
    assert answer.status_code == 400, answer.text
    assert "errors" in answer.json()
