"""References, one grammar everywhere (docs/cli.md#references): ``REPO:TAG`` names the alias
``TAG`` as ``REPO@TAG`` does, a malformed reference is a usage error (exit 2) in every
command that takes one, and a mistyped repository is named as such, with the close names the
caller may read, before an alias is blamed on TUF. Pure CLI behaviour: SQLite only.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from modelward.attest.keys import public_key_pem, save_private_key
from tests.registry.conftest import Registry, free_port, new_publisher, push_new, unique

DIGEST = "sha256:" + "ab" * 32
pytestmark = pytest.mark.parametrize("registry", ["sqlite"], indirect=True)


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _signed_dev(registry: Registry, tmp_path: Path, name: str | None = None) -> dict[str, str]:
    pub = new_publisher(registry)
    reader = registry.actor("reader")
    repo = name or f"{unique('o')}/{unique('m')}"
    registry.admin.create_repo(repo)
    registry.admin.add_publisher(repo, pub.name)
    digest = push_new(pub, repo, tmp_path)
    key = tmp_path / "pub.key"
    save_private_key(pub.key, key)
    _ok(
        registry.cli(
            "alias", "set", f"{repo}@dev", digest, "--key", str(key), token=pub.actor.token
        )
    )
    root = tmp_path / "root.json"
    _ok(registry.cli("trust", "root", "--out", str(root), token=reader.token))
    pem = tmp_path / "pub.pem"
    pem.write_bytes(public_key_pem(pub.key.public_key()))
    return {
        "repo": repo,
        "digest": digest,
        "root": str(root),
        "pem": str(pem),
        "token": reader.token,
    }


def test_repo_colon_tag_names_the_alias_as_repo_at_alias_does(
    registry: Registry, tmp_path: Path
) -> None:
    world = _signed_dev(registry, tmp_path)
    repo, digest = world["repo"], world["digest"]
    got = json.loads(_ok(registry.cli("alias", "get", f"{repo}:dev", "--json")).stdout)
    assert got["digest"] == digest
    shown = json.loads(_ok(registry.cli("bundle", "show", f"{repo}:dev", "--json")).stdout)
    assert shown["digest"] == digest
    pulled = registry.cli(
        "pull", f"{repo}:dev", "--trust-root", world["root"], "--public-key", world["pem"],
        "--cache-dir", str(tmp_path / "cache"),
        token=world["token"],
    )  # fmt: skip
    assert digest in _ok(pulled).stdout
    # a digest is written with '@': REPO:sha256:... is refused, naming the form
    refused = registry.cli("alias", "get", f"{repo}:{digest}")
    assert refused.returncode == 2
    assert "REPO@sha256:<64 hex>, with '@'" in refused.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["pull", "acme/tiny-llama@", "--trust-root", "root.json"],
        ["pull", "acme", "--unsigned-aliases"],
        ["verify", "acme/tiny-llama@not a tag"],
        ["boot", "acme/tiny-llama@"],
        ["baseline", "show", "Acme/X@prod"],
        ["replay", "requests.jsonl", "--bundle", "acme/tiny-llama:"],
        ["replay", "requests.jsonl", "--bundle", "acme/x@prod", "--against", "acme"],
        ["bundle", "export", "acme/x@", "--oci-layout", "out"],
        ["alias", "get", "acme/x:sha256:" + "ab" * 32],
    ],
    ids=[
        "pull-empty-alias",
        "pull-no-at",
        "verify-bad-alias",
        "boot-empty-alias",
        "baseline-uppercase-repo",
        "replay-empty-tag",
        "replay-against-no-at",
        "export-empty-alias",
        "tag-holding-a-digest",
    ],
)
def test_a_malformed_reference_is_a_usage_error_in_every_command(
    registry: Registry, tmp_path: Path, args: list[str]
) -> None:
    # no registry listens there: the reference is refused before any request
    nowhere = {"MODELWARD_URL": f"http://127.0.0.1:{free_port()}"}
    result = registry.cli(*args, env={**nowhere, "HOME": str(tmp_path)})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "invalid reference" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_a_mistyped_repository_says_no_such_repository_with_suggestions(
    registry: Registry, tmp_path: Path
) -> None:
    org = unique("acme")
    world = _signed_dev(registry, tmp_path, name=f"{org}/tiny-llama")
    typo = f"{org}/tiny-lama"
    refused = registry.cli(
        "pull", f"{typo}@dev", "--trust-root", world["root"], "--public-key", world["pem"],
        "--cache-dir", str(tmp_path / "cache"),
        token=world["token"],
    )  # fmt: skip
    assert refused.returncode == 1
    assert f"no such repository {typo}; did you mean {org}/tiny-llama?" in refused.stderr
    assert "TUF" not in refused.stderr
    # an unrelated name gets no suggestion, just the fact
    far = registry.cli(
        "pull", f"{unique('zz')}/{unique('q')}:dev", "--trust-root", world["root"],
        "--public-key", world["pem"], "--cache-dir", str(tmp_path / "cache"),
        token=world["token"],
    )  # fmt: skip
    assert far.returncode == 1
    assert "no such repository" in far.stderr
    assert "did you mean" not in far.stderr
