"""Issue 38 item 4 (the referrer door): a ``/v2`` referrer push whose layer names a blob only
a private repository holds answered ``MANIFEST_INVALID … is not dsse`` (the registry read the
blob), and one naming a blob never stored ``MANIFEST_BLOB_UNKNOWN``: any principal who may
push a referrer anywhere learnt whether a blob is stored. Both now get the same answer.
Real ``modelward serve`` (SQLite and PostgreSQL).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx

from modelward.attest import oci_media as mt
from tests.oci.conftest import new_bundle
from tests.registry.conftest import Registry, new_publisher, unique


def _referrer(subject: str, subject_size: int, layer: str, size: int) -> bytes:
    doc: dict[str, Any] = {
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
                "digest": layer,
                "size": size,
                "annotations": {mt.TITLE_ANNOTATION: "provenance.dsse.json"},
            }
        ],
        "subject": {"mediaType": mt.IMAGE_MANIFEST, "digest": subject, "size": subject_size},
    }
    return json.dumps(doc).encode()


def test_a_referrer_naming_a_private_blob_is_answered_as_one_naming_a_blob_never_stored(
    registry: Registry, tmp_path: Path
) -> None:
    owner, stranger = new_publisher(registry), new_publisher(registry)
    org = unique("pr")
    registry.admin.put_org(org, owners=[owner.name])
    secret = f"{org}/secret"
    owner.actor.client.create_repo(secret, private=True)
    private = new_bundle(owner, tmp_path / "private")
    owner.actor.client.push(private.root, secret, sign=owner.sign)
    weights = next(x for x in private.built.manifest.layers if x.path.endswith(".safetensors"))
    own = registry.repo(stranger)
    mine = new_bundle(stranger, tmp_path / "mine")
    stranger.actor.client.push(mine.root, own, sign=stranger.sign)
    subject_size = len(mine.built.manifest.raw)
    never = "sha256:" + hashlib.sha256(unique("never").encode()).hexdigest()

    def push(layer: str) -> tuple[int, str, str]:
        body = _referrer(mine.digest, subject_size, layer, weights.size)
        answer = httpx.put(
            f"{registry.url}/v2/{own}/manifests/sha256:{hashlib.sha256(body).hexdigest()}",
            content=body,
            headers={
                "Authorization": f"Bearer {stranger.actor.token}",
                "Content-Type": mt.IMAGE_MANIFEST,
            },
            timeout=60,
        )
        error = answer.json()["errors"][0]
        return answer.status_code, error["code"], error["message"].replace(layer, "LAYER")

    stored, missing = push(weights.digest), push(never)
    assert stored == missing, (stored, missing)
    assert stored[1] == "MANIFEST_BLOB_UNKNOWN", stored
