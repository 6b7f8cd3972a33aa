"""Check (5) of ``verify_record``: every digest a release record states matches the bytes
it names (docs/release.md#modelward-release-verify)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import rfc8785

from modelward.attest.release._model import (
    ATTESTATION_SECTIONS,
    ReleaseRecordInvalid,
    embedded,
    get,
    sha256,
)

__all__ = ["check_digests"]


def _check_blob(obj: Any, where: str) -> bytes:
    data = embedded(obj, where, 5)
    stated = get(obj, "sha256", str, 5)
    if stated != sha256(data):
        raise ReleaseRecordInvalid(
            5, f"{where}.sha256", f"states {stated}; the embedded bytes hash to {sha256(data)}"
        )
    if get(obj, "size", int, 5) != len(data):
        raise ReleaseRecordInvalid(5, f"{where}.size", f"is not {len(data)}")
    return data


def check_digests(
    predicate: Mapping[str, Any], digest: str, version: int, notes: list[str]
) -> None:
    """Check (5): the bundle's bytes against the subject and its manifest, the policy text,
    each embedded envelope and TUF file and each audit event's hash (the moves ``history``
    claims were checked against the signed role versions in (2)). ``notes`` gains what could
    not be checked; the registry's own alias-history rows are noted as unsigned."""
    _check_bundle(get(predicate, "bundle", dict, 5), digest)
    policy = get(predicate, "policy", dict, 5)
    text = get(policy, "text", str, 5)
    if get(policy, "sha256", str, 5) != sha256(text.encode("utf-8")):
        raise ReleaseRecordInvalid(
            5, "policy.sha256", f"is not the sha256 of policy.text ({sha256(text.encode('utf-8'))})"
        )
    for section in ATTESTATION_SECTIONS:
        for i, item in enumerate(predicate[section]):
            _check_blob(item, f"{section}[{i}]")
    tuf = predicate["tuf"]
    for i, item in enumerate(tuf["roots"]):
        _check_blob(item, f"tuf.roots[{i}]")
    for i, item in enumerate(tuf["targets"]):
        _check_blob(item, f"tuf.targets[{i}]")
    for i, item in enumerate(tuf["role_versions"]):
        _check_blob(item, f"tuf.role_versions[{i}]")
    rows = get(get(predicate, "registry_history", dict, 5), "entries", list, 5)
    if rows:
        notes.append(
            f"registry_history: {len(rows)} alias-history row(s) of the registry shown as "
            f"context (unsigned; version {version} is the alias's signed move {version})"
        )
    events = get(get(predicate, "audit", dict, 5), "events", list, 5)
    for i, event in enumerate(events):
        _check_event(event, f"audit.events[{i}]")
    if not events:
        notes.append("audit: no events recorded")


def _check_bundle(bundle: Mapping[str, Any], digest: str) -> None:
    """The manifest is the subject; the files, the config and ``modelward.yaml`` are as the
    manifest lists them."""
    from modelward.attest.errors import ManifestError
    from modelward.attest.manifest import parse_manifest

    manifest = _check_blob(get(bundle, "manifest", dict, 5), "bundle.manifest")
    if sha256(manifest) != digest or bundle["manifest"].get("digest") != digest:
        raise ReleaseRecordInvalid(
            5, "bundle.manifest", f"hashes to {sha256(manifest)}, not the subject {digest}"
        )
    try:
        parsed = parse_manifest(manifest)
    except ManifestError as exc:
        raise ReleaseRecordInvalid(5, "bundle.manifest", str(exc)) from None
    layers = {x.path: x for x in parsed.layers}
    listed = set()
    for i, f in enumerate(get(bundle, "files", list, 5)):
        path = get(f, "path", str, 5)
        layer = layers.get(path)
        if layer is None or (f.get("digest"), f.get("size"), f.get("media_type")) != (
            layer.digest,
            layer.size,
            layer.media_type,
        ):
            raise ReleaseRecordInvalid(
                5, f"bundle.files[{i}]", f"{path} is not as the manifest lists it"
            )
        listed.add(path)
    if listed != set(layers):
        raise ReleaseRecordInvalid(5, "bundle.files", "does not list every file of the manifest")
    config = bundle.get("config")
    if config is not None:
        data = _check_blob(config, "bundle.config")
        if sha256(data) != parsed.config.digest or config.get("digest") != parsed.config.digest:
            raise ReleaseRecordInvalid(
                5, "bundle.config", f"is not the manifest's config {parsed.config.digest}"
            )
    spec = bundle.get("spec")
    if spec is not None:
        data = _check_blob(spec, "bundle.spec")
        layer = layers.get("modelward.yaml")
        if layer is None or layer.digest != sha256(data):
            raise ReleaseRecordInvalid(5, "bundle.spec", "is not the manifest's modelward.yaml")
        if spec.get("text") != data.decode("utf-8", "replace"):
            raise ReleaseRecordInvalid(5, "bundle.spec.text", "is not the embedded bytes")


def _check_event(event: Any, where: str) -> None:
    if not isinstance(event, dict):
        raise ReleaseRecordInvalid(5, where, "must be an object")
    body = {
        k: event.get(k) for k in ("seq", "at", "actor", "action", "subject", "details", "prev_hash")
    }
    actual = sha256(rfc8785.dumps(body))  # attest/audit/chain.py event_hash
    if event.get("hash") != actual:
        raise ReleaseRecordInvalid(
            5, f"{where}.hash", f"states {event.get('hash')}; the event hashes to {actual}"
        )
