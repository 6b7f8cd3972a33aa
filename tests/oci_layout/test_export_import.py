"""``modelward bundle export|import`` against real registries, skopeo and oras.

Every command runs through the real ``modelward`` CLI; skopeo is Debian's (``make test``
installs it) and oras is the Python package from the test extra.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from modelward.client.api import NotFoundError
from tests.oci_layout.conftest import World
from tests.registry.conftest import unique

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"


def index(layout: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((layout / "index.json").read_bytes())
    return doc


def blob(layout: Path, digest: str) -> bytes:
    return (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()


def referrers(layout: Path, subject: str) -> list[dict[str, Any]]:
    found = []
    for entry in index(layout)["manifests"]:
        if REF_NAME in (entry.get("annotations") or {}):
            continue
        doc = json.loads(blob(layout, entry["digest"]))
        if (doc.get("subject") or {}).get("digest") == subject:
            # the index lists each referrer with its artifactType, as oras does
            assert entry["artifactType"] == doc["artifactType"]
            assert entry["size"] == len(blob(layout, entry["digest"]))
            found.append(doc)
    return found


def skopeo(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("skopeo") is None:
        pytest.fail("skopeo is missing: `apt-get install -y skopeo` (make test installs it)")
    return subprocess.run(
        ["skopeo", *args], capture_output=True, text=True, timeout=120, check=False
    )


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# -- export ------------------------------------------------------------------------------
def test_export_writes_an_oci_layout_whose_manifest_is_the_bundle_bytes(world: World) -> None:
    layout = world.layout
    assert json.loads((layout / "oci-layout").read_bytes()) == {"imageLayoutVersion": "1.0.0"}
    doc = index(layout)
    assert doc["schemaVersion"] == 2
    assert doc["mediaType"] == "application/vnd.oci.image.index.v1+json"
    tagged = [e for e in doc["manifests"] if (e.get("annotations") or {}).get(REF_NAME)]
    assert len(tagged) == 1
    assert tagged[0]["annotations"][REF_NAME] == "staging"
    assert tagged[0]["digest"] == world.bundle
    assert tagged[0]["mediaType"] == MANIFEST
    raw = world.pub.actor.client.get_manifest(world.repo, world.bundle)
    assert blob(layout, world.bundle) == raw  # verbatim: the bundle digest is the OCI digest
    assert tagged[0]["size"] == len(raw)
    manifest = json.loads(raw)
    for descriptor in [manifest["config"], *manifest["layers"]]:
        assert sha(blob(layout, descriptor["digest"])) == descriptor["digest"]
        assert len(blob(layout, descriptor["digest"])) == descriptor["size"]
    assert not [p for p in layout.parent.iterdir() if p.name.startswith(".layout.partial")]


def test_attestations_are_referrers_of_the_bundle_manifest(world: World) -> None:
    held = world.pub.actor.client.list_attestations(world.repo, world.bundle)
    by_data = {base64.b64decode(a["data"]): a["kind"] for a in held}
    found = referrers(world.layout, world.bundle)
    raw = blob(world.layout, world.bundle)
    artifact_types = {
        "dsse": "application/vnd.in-toto+json",
        "oms": "application/vnd.dev.modelward.oms.model-sig.v1+json",
    }
    assert sorted(by_data.values()) == ["dsse", "oms"]
    assert len(found) == len(held)
    for doc in found:
        assert doc["mediaType"] == MANIFEST
        assert doc["subject"] == {"mediaType": MANIFEST, "digest": world.bundle, "size": len(raw)}
        assert doc["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
        assert blob(world.layout, doc["config"]["digest"]) == b"{}"
        [layer] = doc["layers"]
        data = blob(world.layout, layer["digest"])
        assert doc["artifactType"] == artifact_types[by_data[data]]


def test_export_is_deterministic(world: World, tmp_path: Path) -> None:
    again = tmp_path / "again"
    done = world.export(f"{world.repo}@staging", again)
    assert done.returncode == 0, done.stderr
    assert (again / "index.json").read_bytes() == (world.layout / "index.json").read_bytes()
    assert sorted(p.name for p in (again / "blobs" / "sha256").iterdir()) == sorted(
        p.name for p in (world.layout / "blobs" / "sha256").iterdir()
    )


def test_export_of_a_bundle_without_attestations(world: World, tmp_path: Path) -> None:
    layout = tmp_path / "bare"
    done = world.export(f"{world.repo}@{world.bare}", layout, "--tag", "bare")
    assert done.returncode == 0, done.stderr
    assert "attestations: 0" in done.stdout
    [entry] = index(layout)["manifests"]
    assert entry["digest"] == world.bare
    assert entry["annotations"] == {REF_NAME: "bare"}
    assert referrers(layout, world.bare) == []
    raw = skopeo("inspect", "--raw", f"oci:{layout}:bare")
    assert raw.returncode == 0, raw.stderr
    assert sha(raw.stdout.encode()) == world.bare


def test_export_by_digest_defaults_to_tag_latest(world: World, tmp_path: Path) -> None:
    layout = tmp_path / "by-digest"
    done = world.export(f"{world.repo}@{world.bundle}", layout)
    assert done.returncode == 0, done.stderr
    tags = [e["annotations"].get(REF_NAME) for e in index(layout)["manifests"]]
    assert "latest" in tags


def test_export_refuses_a_tag_naming_another_bundle_and_leaves_the_layout_unchanged(
    world: World,
) -> None:
    layout = world.copy_layout()
    before = {p.relative_to(layout): p.read_bytes() for p in layout.rglob("*") if p.is_file()}
    done = world.export(f"{world.repo}@{world.bare}", layout, "--tag", "staging")
    assert done.returncode == 1
    assert "index.json" in done.stderr
    assert "tag 'staging' already names" in done.stderr
    after = {p.relative_to(layout): p.read_bytes() for p in layout.rglob("*") if p.is_file()}
    assert after == before  # the bare bundle's blobs were removed again


def test_export_refuses_a_directory_that_is_not_a_layout(world: World, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    done = world.export(f"{world.repo}@staging", tmp_path)
    assert done.returncode == 1
    assert f"{tmp_path}/oci-layout" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_export_refuses_a_tag_skopeo_could_not_name(world: World, tmp_path: Path) -> None:
    done = world.export(f"{world.repo}@staging", tmp_path / "x", "--tag", "a:b")
    assert done.returncode == 2
    assert "--tag" in done.stderr
    assert not (tmp_path / "x").exists()


# -- skopeo and oras read it -------------------------------------------------------------
def test_skopeo_copies_the_layout_keeping_the_bundle_digest(world: World, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    done = skopeo("copy", f"oci:{world.layout}:staging", f"oci:{copy}:staging")
    assert done.returncode == 0, done.stderr
    [entry] = index(copy)["manifests"]
    assert entry["digest"] == world.bundle
    assert blob(copy, world.bundle) == blob(world.layout, world.bundle)
    raw = skopeo("inspect", "--raw", f"oci:{copy}:staging")
    assert raw.returncode == 0, raw.stderr
    assert raw.stdout.encode() == blob(world.layout, world.bundle)
    config = skopeo("inspect", "--config", "--raw", f"oci:{world.layout}:staging")
    assert config.returncode == 0, config.stderr
    assert sha(config.stdout.encode()) == json.loads(blob(copy, world.bundle))["config"]["digest"]


def test_oras_reads_the_layout(world: World) -> None:
    from oras.layout import Layout

    layout = Layout(str(world.layout))  # validates oci-layout, index.json and blobs/
    manifest = json.loads(blob(world.layout, world.bundle))
    ordered = layout.get_ordered_blobs("staging")
    layers = list(dict.fromkeys(layer["digest"] for layer in manifest["layers"]))
    assert ordered == [*layers, manifest["config"]["digest"], world.bundle]
    assert all(layout.blob_exists(d) for d in ordered)


# -- import ------------------------------------------------------------------------------
def test_export_import_round_trip_preserves_digest_attestations_and_verifies(
    world: World, tmp_path: Path
) -> None:
    repo = world.target_repo()
    done = world.import_(world.layout, repo, "--alias", "staging")
    assert done.returncode == 0, done.stderr
    assert world.bundle in done.stdout
    client = world.target_pub.client
    assert client.get_alias(repo, "staging")["digest"] == world.bundle
    assert client.get_manifest(repo, world.bundle) == blob(world.layout, world.bundle)
    source = world.pub.actor.client.list_attestations(world.repo, world.bundle)
    target = client.list_attestations(repo, world.bundle)
    assert sorted(a["data"] for a in target) == sorted(a["data"] for a in source)
    assert sorted(a["kind"] for a in target) == ["dsse", "oms"]
    # A serving worker of the target registry pulls it, verified, and it re-hashes clean.
    worker = world.target.actor("reader")
    cache = tmp_path / "cache"
    pulled = world.target.cli(
        "pull",
        f"{repo}@staging",
        "--unsigned-aliases",
        "--public-key",
        str(world.pem),
        "--cache-dir",
        str(cache),
        token=worker.token,
    )
    assert pulled.returncode == 0, pulled.stderr
    assert world.bundle in pulled.stdout
    verified = world.target.cli(
        "verify",
        f"{repo}@staging",
        "--unsigned-aliases",
        "--cache-dir",
        str(cache),
        token=worker.token,
    )
    assert verified.returncode == 0, verified.stderr
    # Importing again changes nothing and says so.
    again = world.import_(world.layout, repo)
    assert again.returncode == 0, again.stderr
    assert "0 uploaded" in again.stdout
    assert len(client.list_attestations(repo, world.bundle)) == 2


def test_import_into_a_registry_that_holds_the_bundle_attaches_the_missing_attestations(
    world: World,
) -> None:
    repo = world.target_repo()
    layout = world.copy_layout()
    oms = [
        e
        for e in index(layout)["manifests"]
        if e.get("artifactType", "").endswith("oms.model-sig.v1+json")
    ]
    doc = index(layout)
    doc["manifests"] = [e for e in doc["manifests"] if e not in oms]
    (layout / "index.json").write_text(json.dumps(doc))
    first = world.import_(layout, repo)
    assert first.returncode == 0, first.stderr
    assert [a["kind"] for a in world.target_pub.client.list_attestations(repo, world.bundle)] == [
        "dsse"
    ]
    second = world.import_(world.layout, repo)
    assert second.returncode == 0, second.stderr
    kinds = sorted(a["kind"] for a in world.target_pub.client.list_attestations(repo, world.bundle))
    assert kinds == ["dsse", "oms"]


def test_import_of_a_layout_written_by_skopeo(world: World, tmp_path: Path) -> None:
    copy = tmp_path / "skopeo"
    done = skopeo("copy", f"oci:{world.layout}:staging", f"oci:{copy}:prod-candidate")
    assert done.returncode == 0, done.stderr
    # skopeo copies the image only, not its referrers: without its provenance the
    # target's default policy denies it, and nothing is recorded.
    repo = world.target_repo()
    denied = world.import_(copy, repo)
    assert denied.returncode == 1
    assert "provenance" in denied.stderr
    with pytest.raises(NotFoundError):
        world.target_pub.client.get_bundle(repo, world.bundle)
    # Where the bundle is held (with its attestations), skopeo's layout imports cleanly.
    held = world.target_repo()
    assert world.import_(world.layout, held).returncode == 0
    again = world.import_(copy, held, "--alias", "candidate")
    assert again.returncode == 0, again.stderr
    assert world.target_pub.client.get_alias(held, "candidate")["digest"] == world.bundle


def test_layout_with_several_tags_import_chooses_one_with_tag(world: World, tmp_path: Path) -> None:
    layout = tmp_path / "two"
    assert world.export(f"{world.repo}@staging", layout, "--tag", "a").returncode == 0
    done = world.export(f"{world.repo}@{world.bare}", layout, "--tag", "b")
    assert done.returncode == 0, done.stderr
    tags = {
        e["annotations"][REF_NAME]: e["digest"]
        for e in index(layout)["manifests"]
        if REF_NAME in (e.get("annotations") or {})
    }
    assert tags == {"a": world.bundle, "b": world.bare}
    for tag, digest in tags.items():  # skopeo sees both
        raw = skopeo("inspect", "--raw", f"oci:{layout}:{tag}")
        assert sha(raw.stdout.encode()) == digest
    repo = world.target_repo()
    ambiguous = world.import_(layout, repo)
    assert ambiguous.returncode == 1
    assert "index.json: 2 tags, choose one with --tag: a, b" in ambiguous.stderr
    missing = world.import_(layout, repo, "--tag", "c")
    assert missing.returncode == 1
    assert "no tag 'c'" in missing.stderr
    chosen = world.import_(layout, repo, "--tag", "a", "--alias", unique("a"))
    assert chosen.returncode == 0, chosen.stderr
    assert len(world.target_pub.client.list_attestations(repo, world.bundle)) == 2
