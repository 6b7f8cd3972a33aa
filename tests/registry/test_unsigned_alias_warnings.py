"""No silent unsigned aliases (docs/cli.md#unsigned-aliases): a move the registry makes that no
TUF role signs leaves the alias invisible to workers resolving through TUF, and is said at
the moment it happens, with the command that signs it: ``push --alias`` without ``--key``
and a keyless ``approve`` (stderr, and ``signed``/``sign_with`` in ``--json``), a ``/v2``
push by tag (an RFC 7234 ``Warning`` header, which OCI clients print, and an audit event).
Real registries on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from modelward.attest.keys import save_private_key
from modelward.attest.manifest import build_bundle
from tests.registry.conftest import (
    Publisher,
    Registry,
    make_bundle_dir,
    new_publisher,
    unique,
)

PROTECTED_POLICY = (
    "version: 1\ntrust_registered_signers: true\naliases:\n"
    "  - {pattern: prod, roles: [publisher, admin], protected: true, approvals: 1}\n"
    "  - {pattern: '*', roles: [publisher, admin]}\n"
)


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _key(pub: Publisher, tmp: Path) -> Path:
    path = tmp / unique("k") / "key.pem"
    path.parent.mkdir()
    save_private_key(pub.key, path)
    return path


def _signed(registry: Registry, repo: str, alias: str, token: str) -> bool:
    got = json.loads(
        _ok(registry.cli("alias", "get", f"{repo}@{alias}", "--json", token=token)).stdout
    )
    return bool(got["signed"])


def test_push_alias_without_key_warns_that_the_alias_is_left_unsigned(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    root = make_bundle_dir(tmp_path / "b")
    attestation = tmp_path / "provenance.dsse.json"  # vouches for the bundle; signs no move
    attestation.write_bytes(pub.sign(build_bundle(root))[0])
    pushed = registry.cli(
        "push", str(root), repo, "--attestation", str(attestation), "--alias", "dev", "--json",
        token=pub.actor.token,
    )  # fmt: skip
    answer = json.loads(_ok(pushed).stdout)
    assert answer["alias"]["signed"] is False
    sign_with = answer["alias"]["sign_with"]
    assert sign_with == f"modelward trust sign {answer['alias']['proposal']} --key KEY"
    assert f"warning: {repo}@dev now names {answer['digest']}" in pushed.stderr
    assert "UNSIGNED" in pushed.stderr
    assert sign_with in pushed.stderr
    assert not _signed(registry, repo, "dev", pub.actor.token)
    # the command it names signs the move
    key = _key(pub, tmp_path)
    _ok(registry.cli(*sign_with.replace("KEY", str(key)).split()[1:], token=pub.actor.token))
    assert _signed(registry, repo, "dev", pub.actor.token)
    # with --key the move is signed as it is made: nothing to warn about
    again = registry.cli(
        "push", str(make_bundle_dir(tmp_path / "c")), repo, "--sign", "--key", str(key),
        "--alias", "dev", "--json",
        token=pub.actor.token,
    )  # fmt: skip
    signed = json.loads(_ok(again).stdout)
    assert signed["alias"]["signed"] is True
    assert signed["alias"]["sign_with"] is None
    assert "UNSIGNED" not in again.stderr


@pytest.mark.sqlite_only
def test_keyless_approve_warns_that_the_approval_signs_nothing(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    reviewer = new_publisher(registry, "reviewer")
    repo = registry.repo(pub, policy_yaml=PROTECTED_POLICY)
    root = make_bundle_dir(tmp_path / "b")
    digest = pub.actor.client.push(root, repo, sign=pub.sign).digest
    _ok(registry.cli("alias", "set", f"{repo}@prod", digest, token=pub.actor.token))  # proposed
    approved = registry.cli(
        "approve", f"{repo}@{digest}", "--alias", "prod", "--json", token=reviewer.actor.token
    )
    answer = json.loads(_ok(approved).stdout)
    assert answer["signed"] is False
    sign_with = f"modelward approve {repo}@{digest} --alias prod --key KEY"
    assert answer["sign_with"] == sign_with
    assert "UNSIGNED" in approved.stderr
    assert sign_with in approved.stderr
    # the command it names is the approval workers verify
    key = _key(reviewer, tmp_path)
    signed = registry.cli(
        *sign_with.replace("KEY", str(key)).split()[1:], "--json", token=reviewer.actor.token
    )
    assert json.loads(_ok(signed).stdout)["state"] == "published"
    assert _signed(registry, repo, "prod", pub.actor.token)


@pytest.mark.sqlite_only
def test_oci_tag_push_of_an_unsigned_alias_answers_a_warning_header_and_audits_it(
    registry: Registry, tmp_path: Path
) -> None:
    from tests.oci.conftest import bearer_for

    pub = new_publisher(registry)
    repo = registry.repo(pub)
    root = make_bundle_dir(tmp_path / "b")
    built = build_bundle(root)
    pub.actor.client.push(root, repo, sign=pub.sign)  # stored, blobs and signature in place
    bearer = bearer_for(registry, pub.name, pub.actor.token, f"repository:{repo}:pull,push")
    put = httpx.put(
        f"{registry.url}/v2/{repo}/manifests/staging",
        content=built.manifest.raw,
        headers={
            "Authorization": f"Bearer {bearer}",
            "Content-Type": "application/vnd.oci.image.manifest.v1+json",
        },
        timeout=60,
    )
    assert put.status_code == 201, put.text
    warning = put.headers.get("Warning", "")
    assert warning.startswith('299 - "modelward: '), put.headers
    assert warning.endswith('"')
    assert f"{repo}@staging now names {built.manifest.digest} UNSIGNED" in warning
    assert "modelward trust sign" in warning
    events = [
        e
        for e in registry.admin.iter_audit()
        if e["action"] == "alias.unsigned" and e["subject"] == f"{repo}@staging"
    ]
    assert [e["details"] for e in events] == [{"digest": built.manifest.digest, "via": "oci"}]
    assert not _signed(registry, repo, "staging", pub.actor.token)
