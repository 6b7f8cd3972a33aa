"""Query parameters that name a repository or an alias (``registry/domains/_names.py``).

Found by the API fuzz campaign (docs/reliability.md, F7): ``GET /v1/tuf/proposals`` with a
``repository`` that is not ``ORG/NAME`` reached the target-path builder, whose ValueError was
a 500. Every such parameter is now checked against the one grammar (``attest.names``) at the
edge: 422 naming the parameter, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import httpx
import pytest

from tests.registry.conftest import Registry

NOT_NAMES = ("0" * 300, "no-slash", "a/b/c", "Upper/case", "/x", "a/")


def _get(reg: Registry, token: str, path: str, **params: str) -> httpx.Response:
    return httpx.get(
        f"{reg.url}{path}", params=params, headers={"Authorization": f"Bearer {token}"}
    )


@pytest.mark.parametrize("name", NOT_NAMES)
def test_proposals_filtered_by_what_is_no_repository_is_a_422_not_a_500(
    registry: Registry, name: str
) -> None:
    reader = registry.actor("reader")
    for params in ({"repository": name}, {"repository": name, "alias": "prod"}):
        answer = _get(registry, reader.token, "/v1/tuf/proposals", **params)
        assert answer.status_code == 422, (params, answer.status_code, answer.text)
        body = answer.json()["error"]
        assert body["code"] == "invalid_request"
        assert "repository" in answer.text


def test_proposals_filtered_by_what_is_no_alias_is_a_422(registry: Registry) -> None:
    reader = registry.actor("reader")
    for alias in ("", "-lead", "a" * 101, "p/q"):
        answer = _get(registry, reader.token, "/v1/tuf/proposals", repository="o/n", alias=alias)
        assert answer.status_code == 422, (alias, answer.text)
        assert "alias" in answer.text
    fine = _get(registry, reader.token, "/v1/tuf/proposals", repository="o/n", alias="prod")
    assert fine.status_code == 200, fine.text
    assert fine.json() == {"proposals": []}


def test_a_blob_for_what_is_no_repository_is_a_422(registry: Registry) -> None:
    publisher = registry.actor("publisher")
    digest = "sha256:" + "0" * 64
    answer = httpx.put(
        f"{registry.url}/v1/blobs/{digest}",
        params={"repository": "not a repository"},
        content=b"",
        headers={"Authorization": f"Bearer {publisher.token}"},
    )
    assert answer.status_code == 422, answer.text
    assert "repository" in answer.text


def test_a_resign_body_naming_no_repository_or_alias_is_a_422(registry: Registry) -> None:
    """The body's fields take the same grammar as the query parameters (``_names``), a name
    with a trailing newline included (Python's ``$`` would let it through a ``match``)."""
    holder = registry.actor("publisher")
    for body in (
        {"repository": "no-slash"},
        {"repository": "o/n\n"},
        {"repository": "o/n", "alias": "prod\n"},
        {"repository": "o/n", "alias": "a" * 101},
    ):
        answer = httpx.post(
            f"{registry.url}/v1/tuf/resign",
            json=body,
            headers={"Authorization": f"Bearer {holder.token}"},
        )
        assert answer.status_code == 422, (body, answer.status_code, answer.text)
        assert answer.json()["error"]["code"] == "invalid_request"
    answer = _get(registry, holder.token, "/v1/tuf/proposals", repository="o/n\n")
    assert answer.status_code == 422, answer.text
