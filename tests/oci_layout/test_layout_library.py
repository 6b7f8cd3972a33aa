"""``attest.oci_layout`` on its own: the writer is all or nothing, the reader finds exactly
the bundle's referrers, of every kind, and nothing else. Real bundles (``build_bundle``), a
real Sigstore bundle (../shared/fixtures), no server."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from modelward.attest.manifest import BuiltBundle, build_bundle
from modelward.attest.oci_layout import (
    LayoutError,
    LayoutWriter,
    open_layout,
    referrer_manifest,
)
from tests.registry.conftest import make_bundle_dir

PREDICATE = "https://slsa.dev/provenance/v1"


def _built(tmp_path: Path, name: str = "b") -> tuple[Path, BuiltBundle]:
    root = make_bundle_dir(tmp_path / name)
    return root, build_bundle(root)


def _fill_from(root: Path, built: BuiltBundle) -> dict[str, Any]:
    """digest -> fill(dest) copying that blob from the bundle directory."""
    fills: dict[str, Any] = {
        built.manifest.config.digest: lambda dest: dest.write_bytes(built.config_bytes)
    }
    for layer in built.manifest.layers:
        fills[layer.digest] = lambda dest, p=layer.path: shutil.copyfile(root / p, dest)
    return fills


def _write(
    layout: Path, root: Path, built: BuiltBundle, tag: str, *atts: tuple[bytes, str]
) -> None:
    sizes = {built.manifest.config.digest: built.manifest.config.size}
    sizes.update((layer.digest, layer.size) for layer in built.manifest.layers)
    with LayoutWriter(layout) as writer:
        for digest, fill in _fill_from(root, built).items():
            writer.put_file(digest, sizes[digest], fill, fill_verifies=False)
        writer.add_bundle(built.manifest.raw, tag)
        for data, kind in atts:
            writer.add_attestation(built.manifest.raw, data, kind, PREDICATE)
        writer.commit()


def _dsse(digest: str) -> bytes:
    from modelward.attest.dsse import sign_envelope
    from modelward.attest.keys import generate_private_key
    from modelward.attest.statement import PredicateType, make_statement
    from tests.registry.conftest import provenance_predicate

    payload = make_statement("b", digest, PredicateType.PROVENANCE, provenance_predicate())
    return sign_envelope(payload, [generate_private_key()])


def test_every_kind_round_trips_as_a_referrer(tmp_path: Path, shared_fixtures: Path) -> None:
    root, built = _built(tmp_path)
    dsse = _dsse(built.manifest.digest)
    sigstore = (
        shared_fixtures / "sigstore" / "happy-path-intoto-in-dsse-v3" / "bundle.sigstore.json"
    )
    oms = shared_fixtures / "oms" / "v1.1.0-elliptic-key" / "model.sig"
    atts = [(dsse, "dsse"), (sigstore.read_bytes(), "sigstore"), (oms.read_bytes(), "oms")]
    _write(tmp_path / "l", root, built, "v1", *atts)
    bundle = open_layout(tmp_path / "l").bundle()
    assert bundle.tag == "v1"
    assert bundle.manifest.raw == built.manifest.raw
    assert sorted((a.data, a.kind) for a in bundle.attestations) == sorted(atts)
    bundle.verify_blobs()


def test_a_failed_export_into_a_new_directory_leaves_nothing(tmp_path: Path) -> None:
    _, built = _built(tmp_path)
    layout = tmp_path / "made" / "for" / "it" / "new"

    def broken(dest: Path) -> None:
        dest.write_bytes(b"not the blob")

    with pytest.raises(LayoutError, match="digest mismatch"), LayoutWriter(layout) as writer:
        writer.put_file(built.manifest.config.digest, 12, broken, fill_verifies=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]


def test_a_failed_export_into_an_existing_layout_removes_what_it_added(tmp_path: Path) -> None:
    root, built = _built(tmp_path)
    layout = tmp_path / "l"
    _write(layout, root, built, "v1")
    before = {p: p.read_bytes() for p in layout.rglob("*") if p.is_file()}
    other_root, other = _built(tmp_path, "other")

    def export_that_fails() -> None:
        with LayoutWriter(layout) as writer:
            for digest, fill in _fill_from(other_root, other).items():
                writer.put_file(digest, sizes[digest], fill, fill_verifies=False)
            writer.add_bundle(other.manifest.raw, "v2")
            raise RuntimeError("the registry went away")

    sizes = {other.manifest.config.digest: other.manifest.config.size}
    sizes.update((x.digest, x.size) for x in other.manifest.layers)
    with pytest.raises(RuntimeError):
        export_that_fails()
    assert {p: p.read_bytes() for p in layout.rglob("*") if p.is_file()} == before


def test_referrers_of_other_manifests_are_not_the_bundles(tmp_path: Path) -> None:
    root, built = _built(tmp_path)
    layout = tmp_path / "l"
    dsse = _dsse(built.manifest.digest)
    _write(layout, root, built, "v1", (dsse, "dsse"))
    # a signature on the attestation (a referrer of the referrer), as cosign could add
    index = json.loads((layout / "index.json").read_bytes())
    referrer = next(
        e
        for e in index["manifests"]
        if "artifactType" in e and e["artifactType"] == "application/vnd.in-toto+json"
    )
    raw = (layout / "blobs" / "sha256" / referrer["digest"][7:]).read_bytes()
    signature = _dsse(referrer["digest"])
    nested = referrer_manifest(referrer["digest"], len(raw), signature, "dsse", PREDICATE)
    with LayoutWriter(layout) as writer:
        writer.put_bytes(signature)
        digest = writer.put_bytes(nested)
        writer.commit()
    index = json.loads((layout / "index.json").read_bytes())
    index["manifests"].append(
        {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest,
            "size": len(nested),
        }
    )
    (layout / "index.json").write_text(json.dumps(index))
    bundle = open_layout(layout).bundle("v1")
    assert [a.data for a in bundle.attestations] == [dsse]


def test_an_unknown_attestation_kind_is_refused_on_writing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown attestation kind"):
        referrer_manifest("sha256:" + "0" * 64, 2, b"{}", "pgp", PREDICATE)


@pytest.mark.parametrize("kind", ["dsse", "sigstore", "oms"])
def test_a_referrer_is_byte_for_byte_the_one_v2_serves(kind: str) -> None:
    """One attestation, one referrer digest: in a layout and on /v2 (both made by
    attest.oci_media)."""
    from modelward.attest import oci_layout
    from modelward.attest import oci_media as media_types

    data = b'{"an": "attestation"}'
    subject = "sha256:" + "ab" * 32
    ours = referrer_manifest(subject, 735, data, kind, PREDICATE)
    theirs = media_types.referrer_manifest(
        kind=kind,
        predicate_type=PREDICATE,
        attestation_digest="sha256:" + hashlib.sha256(data).hexdigest(),
        attestation_size=len(data),
        subject_digest=subject,
        subject_size=735,
    )
    assert ours == theirs
    assert oci_layout.ARTIFACT_TYPE_BY_KIND == media_types.ARTIFACT_TYPE_BY_KIND
    assert oci_layout.KINDS_BY_ARTIFACT_TYPE == media_types.KINDS_BY_ARTIFACT_TYPE
