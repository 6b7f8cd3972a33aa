"""``modelward push`` judges the bundle locally before uploading (docs/cli.md#push).

Through the real CLI against a real ``modelward serve``: what the registry would refuse is
refused before a byte is sent, with the registry's own words, and the server's request
counters (``/metrics``) prove that no upload request reached it. One backend: the preflight
runs in the client, and /metrics counts one server process (SQLite runs one).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from modelward.client.api import NotFoundError
from tests.attest.corpus import canary_pickle
from tests.registry.conftest import Publisher, Registry, make_bundle_dir, new_publisher, unique

pytestmark = pytest.mark.parametrize("registry", ["sqlite"], indirect=True)

REVISION = "0123456789abcdef0123456789abcdef01234567"
# Everything that carries bundle bytes or records a bundle.
_UPLOAD_ROUTES = ("/v1/blobs/", "/v1/uploads", "/bundles/{digest}")
_LINE = re.compile(
    r'^modelward_http_requests_total\{method="(?P<method>[A-Z]+)",'
    r'route="(?P<route>[^"]*)",status="\d+"\} (?P<n>[0-9.e+]+)$'
)


def upload_requests(registry: Registry) -> int:
    """Requests the server counted that upload bytes or record a bundle (HEAD too)."""
    total = 0.0
    for line in registry.admin.metrics().splitlines():
        match = _LINE.match(line)
        if match is None or match["method"] == "GET":
            continue
        if any(part in match["route"] for part in _UPLOAD_ROUTES):
            total += float(match["n"])
    return int(total)


def _key_file(pub: Publisher, tmp_path: Path) -> Path:
    from modelward.attest.keys import save_private_key

    path = tmp_path / unique("key") / "publisher.key"
    path.parent.mkdir()
    save_private_key(pub.key, path)
    return path


def _evil_bundle(tmp_path: Path) -> Path:
    root = make_bundle_dir(tmp_path / unique("evil"))
    (root / "evil.pkl").write_bytes(canary_pickle(tmp_path / "canary", 2))
    return root


def _refusal(stderr: str) -> str:
    """The ``policy denied the bundle: ...`` sentence of an error, up to its detail."""
    match = re.search(r"policy denied the bundle: (.*?)(?: \(\{|$)", stderr, re.MULTILINE)
    assert match is not None, stderr
    return match.group(1)


def test_malicious_pickle_is_refused_before_any_upload(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    root = _evil_bundle(tmp_path)
    key = _key_file(pub, tmp_path)
    before = upload_requests(registry)

    out = registry.cli("push", str(root), repo, "--sign", "--key", str(key), token=pub.actor.token)

    assert out.returncode == 1, out.stderr
    assert "scan: evil.pkl: scan.pickle" in out.stderr
    assert "nothing was sent" in out.stderr
    assert out.stdout == ""
    assert upload_requests(registry) == before
    from modelward.attest.manifest import build_bundle

    with pytest.raises(NotFoundError):
        pub.actor.client.get_bundle(repo, build_bundle(root).manifest.digest)


def test_preflight_refusal_words_it_as_the_registry_does(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    root = _evil_bundle(tmp_path)
    key = _key_file(pub, tmp_path)

    local = registry.cli(
        "push", str(root), repo, "--sign", "--key", str(key), token=pub.actor.token
    )
    remote = registry.cli(
        "push",
        str(root),
        repo,
        "--sign",
        "--key",
        str(key),
        "--no-preflight",
        token=pub.actor.token,
    )

    assert local.returncode == remote.returncode == 1
    assert "policy_denied" in remote.stderr  # the registry's own refusal
    assert _refusal(local.stderr) == _refusal(remote.stderr)


def test_unsigned_push_is_refused_before_upload_and_says_to_sign(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    root = make_bundle_dir(tmp_path / unique("b"))
    before = upload_requests(registry)

    out = registry.cli("push", str(root), repo, token=pub.actor.token)

    assert out.returncode == 1
    assert "subject: 0 verified statement(s)" in out.stderr
    assert "--sign --key" in out.stderr
    assert upload_requests(registry) == before
    # the registry, asked anyway, refuses for the same reasons and the hint still says how
    remote = registry.cli("push", str(root), repo, "--no-preflight", token=pub.actor.token)
    assert remote.returncode == 1
    assert _refusal(out.stderr) == _refusal(remote.stderr)
    assert "--sign --key" in remote.stderr


def _sources_policy(pub: Publisher) -> str:
    from modelward.attest.keys import public_key_pem

    pem = public_key_pem(pub.key.public_key()).decode()
    indented = "\n".join(f"        {line}" for line in pem.strip().splitlines())
    return (
        "version: 1\n"
        "threshold: 1\n"
        "required_predicate_types: [https://slsa.dev/provenance/v1]\n"
        "sources: ['hf://acme/*']\n"
        "signers:\n"
        "  keys:\n"
        "    - name: release\n"
        "      pem: |\n"
        f"{indented}\n"
        "aliases:\n"
        "  - pattern: '*'\n"
        "    roles: [publisher, admin]\n"
    )


def test_push_sign_with_source_passes_a_policy_with_sources(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub, policy_yaml=_sources_policy(pub))
    root = make_bundle_dir(tmp_path / unique("b"))
    key = _key_file(pub, tmp_path)
    before = upload_requests(registry)

    # without --source the provenance names none: refused here, unsent
    bare = registry.cli("push", str(root), repo, "--sign", "--key", str(key), token=pub.actor.token)
    assert bare.returncode == 1
    assert "source: a provenance statement names no source" in bare.stderr
    assert upload_requests(registry) == before

    out = registry.cli(
        "push",
        str(root),
        repo,
        "--sign",
        "--key",
        str(key),
        "--source",
        "hf://acme/tiny-llama",
        "--source-revision",
        REVISION,
        "--alias",
        "dev",
        token=pub.actor.token,
    )
    assert out.returncode == 0, out.stderr
    assert upload_requests(registry) > before  # the counter does count uploads
    digest = out.stdout.split(f"pushed {repo}@")[1].split()[0]
    record = pub.actor.client.get_bundle(repo, digest)
    checks = {c["name"]: c for c in record["decision"]["checks"]}
    assert checks["source"]["passed"], record["decision"]
    assert "hf://acme/tiny-llama" in checks["source"]["message"]


def test_source_outside_the_policy_is_refused_before_upload(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub, policy_yaml=_sources_policy(pub))
    root = make_bundle_dir(tmp_path / unique("b"))
    key = _key_file(pub, tmp_path)
    before = upload_requests(registry)
    out = registry.cli(
        "push",
        str(root),
        repo,
        "--sign",
        "--key",
        str(key),
        "--source",
        "hf://mallory/tiny-llama",
        "--source-revision",
        REVISION,
        token=pub.actor.token,
    )
    assert out.returncode == 1
    assert "source 'hf://mallory/tiny-llama' is not allowed" in out.stderr
    assert upload_requests(registry) == before
    with pytest.raises(NotFoundError):
        pub.actor.client.get_alias(repo, "dev")


@pytest.mark.parametrize(
    "args",
    [
        ["--source", "hf://acme/x"],  # without its revision
        ["--source", "hf://acme/x", "--source-revision", "main"],  # not pinned
    ],
    ids=["source-without-revision", "unpinned-revision"],
)
def test_source_flags_are_checked_as_bundle_sign_checks_them(
    registry: Registry, tmp_path: Path, args: list[str]
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    root = make_bundle_dir(tmp_path / unique("b"))
    key = _key_file(pub, tmp_path)
    out = registry.cli(
        "push", str(root), repo, "--sign", "--key", str(key), *args, token=pub.actor.token
    )
    assert out.returncode == 2, out.stderr
    assert "source" in out.stderr


def test_source_without_sign_is_a_usage_error(registry: Registry, tmp_path: Path) -> None:
    root = make_bundle_dir(tmp_path / unique("b"))
    out = registry.cli(
        "push", str(root), "acme/x", "--source", "hf://acme/x", "--source-revision", REVISION
    )
    assert out.returncode == 2
    assert "--sign" in out.stderr
