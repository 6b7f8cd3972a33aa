"""``modelward bundle import`` refuses hostile layouts, naming the file at fault, before
anything reaches the registry: no bundle recorded, not one blob uploaded.

Each test damages a private copy of a layout exported from the source registry (a bundle
with its DSSE provenance as a referrer) in one way.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from modelward.client.api import NotFoundError
from tests.oci_layout.conftest import World

REF_NAME = "org.opencontainers.image.ref.name"


def blob_path(layout: Path, digest: str) -> Path:
    return layout / "blobs" / "sha256" / digest.removeprefix("sha256:")


def read_index(layout: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((layout / "index.json").read_bytes())
    return doc


def write_index(layout: Path, doc: dict[str, Any]) -> None:
    (layout / "index.json").write_text(json.dumps(doc))


def manifest_of(layout: Path, digest: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(blob_path(layout, digest).read_bytes())
    return doc


def put_blob(layout: Path, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blob_path(layout, digest).write_bytes(data)
    return digest


def referrer_entry(layout: Path) -> dict[str, Any]:
    entries: list[dict[str, Any]] = read_index(layout)["manifests"]
    [entry] = [e for e in entries if REF_NAME not in e["annotations"]]
    return entry


def replace_referrer(layout: Path, doc: dict[str, Any], **entry_fields: Any) -> str:
    """Store a new referrer manifest ``doc`` and point the index's referrer entry at it."""
    data = json.dumps(doc).encode()
    digest = put_blob(layout, data)
    index = read_index(layout)
    for entry in index["manifests"]:
        if REF_NAME not in entry["annotations"]:
            entry.update(digest=digest, size=len(data), **entry_fields)
    write_index(layout, index)
    return digest


def refused(world: World, layout: Path, *expected: str) -> str:
    """Import ``layout``: exit 1, every ``expected`` text in the message, nothing stored."""
    repo = world.target_repo()
    done = world.import_(layout, repo, "--alias", "staging")
    assert done.returncode == 1, done.stdout
    assert done.stderr.startswith("error: "), done.stderr
    for text in expected:
        assert text in done.stderr, done.stderr
    admin = world.target.admin
    with pytest.raises(NotFoundError):
        admin.get_bundle(repo, world.hostile)
    manifest = json.loads(blob_path(world.hostile_layout, world.hostile).read_bytes())
    for descriptor in [manifest["config"], *manifest["layers"]]:
        assert admin.blob_size(descriptor["digest"]) is None, descriptor
    return done.stderr


def test_import_refuses_path_traversal_in_a_digest(world: World) -> None:
    layout = world.hostile_copy()
    index = read_index(layout)
    index["manifests"][0]["digest"] = "sha256:../../../../etc/passwd"
    write_index(layout, index)
    refused(world, layout, f"{layout}/index.json", "manifests[0].digest: not a sha256 digest")


def test_import_refuses_a_symlinked_blob(world: World, tmp_path: Path) -> None:
    layout = world.hostile_copy()
    config = manifest_of(layout, world.hostile)["config"]["digest"]
    target = blob_path(layout, config)
    elsewhere = tmp_path / "outside"
    elsewhere.write_bytes(target.read_bytes())  # the right bytes, but not inside the layout
    target.unlink()
    target.symlink_to(elsewhere)
    refused(world, layout, f"blobs/sha256/{config.removeprefix('sha256:')}", "a symlink: refused")


def test_import_refuses_a_symlinked_blobs_directory(world: World, tmp_path: Path) -> None:
    layout = world.hostile_copy()
    (layout / "blobs").rename(tmp_path / "blobs")
    (layout / "blobs").symlink_to(tmp_path / "blobs")
    refused(world, layout, f"{layout}/blobs", "symlink")


def test_import_refuses_a_flipped_byte_in_a_layer(world: World) -> None:
    layout = world.hostile_copy()
    layer = manifest_of(layout, world.hostile)["layers"][-1]["digest"]
    path = blob_path(layout, layer)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    refused(world, layout, f"blobs/sha256/{layer.removeprefix('sha256:')}", "digest mismatch")


def test_import_refuses_a_truncated_layer(world: World) -> None:
    layout = world.hostile_copy()
    layer = manifest_of(layout, world.hostile)["layers"][0]["digest"]
    path = blob_path(layout, layer)
    path.write_bytes(path.read_bytes()[:-1])
    refused(world, layout, f"blobs/sha256/{layer.removeprefix('sha256:')}", "the manifest says")


def test_import_refuses_a_missing_blob(world: World) -> None:
    layout = world.hostile_copy()
    config = manifest_of(layout, world.hostile)["config"]["digest"]
    blob_path(layout, config).unlink()
    refused(world, layout, f"blobs/sha256/{config.removeprefix('sha256:')}", "missing")


def test_import_refuses_a_manifest_not_matching_its_descriptor(world: World) -> None:
    layout = world.hostile_copy()
    index = read_index(layout)
    tagged = next(e for e in index["manifests"] if REF_NAME in e["annotations"])
    tagged["size"] += 1
    write_index(layout, index)
    refused(
        world,
        layout,
        f"blobs/sha256/{world.hostile.removeprefix('sha256:')}",
        "manifest does not match its descriptor",
    )


def test_import_refuses_a_manifest_swapped_under_its_digest(world: World) -> None:
    layout = world.hostile_copy()
    path = blob_path(layout, world.hostile)
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"schemaVersion":2', b'"schemaVersion":3'))
    refused(
        world, layout, f"blobs/sha256/{world.hostile.removeprefix('sha256:')}", "hashes to sha256:"
    )


def test_import_refuses_an_oversized_index(world: World) -> None:
    layout = world.hostile_copy()
    index = read_index(layout)
    index["padding"] = "x" * (4 * 2**20)
    write_index(layout, index)
    refused(world, layout, f"{layout}/index.json", "exceeds the limit of 4194304")


def test_import_refuses_an_index_with_too_many_entries(world: World) -> None:
    layout = world.hostile_copy()
    index = read_index(layout)
    index["manifests"] += [referrer_entry(layout)] * 10_001
    write_index(layout, index)
    refused(world, layout, f"{layout}/index.json", "exceeds the limit of 10000")


def test_import_refuses_an_unknown_media_type_in_the_index(world: World) -> None:
    layout = world.hostile_copy()
    index = read_index(layout)
    index["manifests"][0]["mediaType"] = "application/vnd.docker.distribution.manifest.v1+json"
    write_index(layout, index)
    refused(world, layout, f"{layout}/index.json", "manifests[0].mediaType: unknown media type")


def test_import_refuses_a_tag_naming_two_manifests(world: World) -> None:
    layout = world.hostile_copy()
    index = read_index(layout)
    twin = dict(referrer_entry(layout), annotations={REF_NAME: "h"})
    index["manifests"].append(twin)
    write_index(layout, index)
    refused(world, layout, f"{layout}/index.json", "tag 'h' names two manifests")


def test_import_refuses_an_unknown_referrer_artifact_type(world: World) -> None:
    layout = world.hostile_copy()
    doc = manifest_of(layout, referrer_entry(layout)["digest"])
    doc["artifactType"] = "application/vnd.example.sbom+json"
    digest = replace_referrer(layout, doc, artifactType=doc["artifactType"])
    refused(
        world,
        layout,
        f"blobs/sha256/{digest.removeprefix('sha256:')}",
        "artifactType: unknown media type 'application/vnd.example.sbom+json'",
    )


def test_import_refuses_a_referrer_holding_another_kind_than_it_says(world: World) -> None:
    layout = world.hostile_copy()
    doc = manifest_of(layout, referrer_entry(layout)["digest"])
    doc["artifactType"] = "application/vnd.dev.sigstore.bundle.v0.3+json"
    doc["layers"][0]["mediaType"] = "application/vnd.dev.sigstore.bundle.v0.3+json"
    replace_referrer(layout, doc, artifactType=doc["artifactType"])
    layer = doc["layers"][0]["digest"].removeprefix("sha256:")
    refused(world, layout, f"blobs/sha256/{layer}", "a dsse attestation under artifactType")


def test_import_refuses_a_referrer_whose_subject_size_lies(world: World) -> None:
    layout = world.hostile_copy()
    doc = manifest_of(layout, referrer_entry(layout)["digest"])
    doc["subject"]["size"] += 1
    digest = replace_referrer(layout, doc)
    refused(
        world,
        layout,
        f"blobs/sha256/{digest.removeprefix('sha256:')}",
        "subject: does not match the bundle manifest's descriptor",
    )


def test_import_refuses_a_tampered_attestation_blob(world: World) -> None:
    layout = world.hostile_copy()
    doc = manifest_of(layout, referrer_entry(layout)["digest"])
    layer = doc["layers"][0]["digest"]
    path = blob_path(layout, layer)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    refused(
        world,
        layout,
        f"blobs/sha256/{layer.removeprefix('sha256:')}",
        "attestation does not match its descriptor",
    )


def test_import_refuses_a_layout_version_it_does_not_know(world: World) -> None:
    layout = world.hostile_copy()
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"2.0.0"}')
    refused(world, layout, f"{layout}/oci-layout", "imageLayoutVersion must be '1.0.0'")


def test_import_refuses_a_directory_that_is_no_layout(world: World, tmp_path: Path) -> None:
    refused(world, tmp_path, f"{tmp_path}/oci-layout", "missing")
