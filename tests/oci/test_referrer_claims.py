"""A referrer is what it claims (docs/oci.md#referrers).

Before, a referrer was checked for its subject, artifactType and one attestation layer only:
one whose config claimed the OCI empty media type but pointed at the bundle's weights blob was
stored, listed and served (a client fetching "the empty config" got the weights), and one whose
layer was titled ``../../../x`` was stored and served as pushed (a client that writes layers
by title writes outside its directory). Now a referrer's descriptors follow the bundles'
rules (``attest.oci_media.check_referrer``). Real ``modelward serve``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from modelward.attest import oci_media as mt
from tests.oci.conftest import new_bundle
from tests.registry.conftest import Registry, new_publisher

pytestmark = pytest.mark.sqlite_only  # tests/conftest.py: the rules do not touch the database


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _referrer(subject: str, subject_size: int, att: bytes) -> dict[str, Any]:
    return {
        "schemaVersion": 2,
        "mediaType": mt.IMAGE_MANIFEST,
        "artifactType": mt.INTOTO_DSSE,
        "config": {
            "mediaType": mt.EMPTY_CONFIG_MEDIA_TYPE,
            "digest": mt.EMPTY_CONFIG_DIGEST,
            "size": 2,
        },
        "layers": [
            {
                "mediaType": mt.INTOTO_DSSE,
                "digest": "sha256:" + hashlib.sha256(att).hexdigest(),
                "size": len(att),
                "annotations": {mt.TITLE_ANNOTATION: "provenance.dsse.json"},
            }
        ],
        "subject": {"mediaType": mt.IMAGE_MANIFEST, "digest": subject, "size": subject_size},
    }


@pytest.mark.parametrize("attack", ["empty_config_names_the_weights", "layer_title_escapes"])
def test_referrer_that_is_not_what_it_claims_is_refused(
    registry: Registry, tmp_path: Path, attack: str
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    bundle = new_bundle(pub, tmp_path)
    pub.actor.client.push(bundle.root, repo, sign=pub.sign)
    raw = bundle.built.manifest.raw
    weights = next(
        layer for layer in bundle.built.manifest.layers if layer.path.endswith(".safetensors")
    )
    att = pub.sign(bundle.built)[0]  # a valid provenance of the bundle, as a new attestation
    a = _auth(pub.actor.token)
    up = httpx.post(
        f"{registry.url}/v2/{repo}/blobs/uploads/",
        params={"digest": "sha256:" + hashlib.sha256(att).hexdigest()},
        content=att,
        headers=a,
    )
    assert up.status_code == 201, up.text
    doc = _referrer(bundle.digest, len(raw), att)
    # the control: the same referrer, honest, is accepted
    honest = json.dumps(doc).encode()
    if attack == "empty_config_names_the_weights":
        doc["config"] = {
            "mediaType": mt.EMPTY_CONFIG_MEDIA_TYPE,
            "digest": weights.digest,
            "size": weights.size,
        }
        expected = "empty descriptor"
    else:
        doc["layers"][0]["annotations"][mt.TITLE_ANNOTATION] = "../../../x"
        expected = "not a safe file name"
    body = json.dumps(doc).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    put = httpx.put(f"{registry.url}/v2/{repo}/manifests/{digest}", content=body, headers=a)
    assert put.status_code == 400, put.text
    error = put.json()["errors"][0]
    assert error["code"] == "MANIFEST_INVALID", error
    assert expected in error["message"], error
    # nothing stored: not served, not listed
    got = httpx.get(f"{registry.url}/v2/{repo}/manifests/{digest}", headers=a)
    assert got.status_code == 404, got.text
    listed = httpx.get(f"{registry.url}/v2/{repo}/referrers/{bundle.digest}", headers=a).json()
    assert digest not in {m["digest"] for m in listed["manifests"]}
    honest_digest = "sha256:" + hashlib.sha256(honest).hexdigest()
    ok = httpx.put(f"{registry.url}/v2/{repo}/manifests/{honest_digest}", content=honest, headers=a)
    assert ok.status_code == 201, ok.text
