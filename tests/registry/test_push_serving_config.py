"""Issue 39 item 7 at push: a bundle whose modelward.yaml asks for more context than its
config.json allows (the tiny Llama: max_position_embeddings 256, asked 512) is refused by
push's preflight before a byte is sent, and by the registry's own scan when the preflight is
off, in the same words naming both fields.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from modelward.attest.spec import render_spec_template
from tests.registry.conftest import Registry, new_publisher
from tests.registry.test_push_preflight import _key_file, upload_requests

pytestmark = pytest.mark.parametrize("registry", ["sqlite"], indirect=True)

REFUSED = (
    "scan: modelward.yaml: scan.serving: modelward.yaml serving.max_model_len 512 exceeds "
    "config.json max_position_embeddings 256"
)


def test_push_of_a_max_model_len_the_model_cannot_serve_is_refused(
    registry: Registry, tiny_model: Path, tmp_path: Path
) -> None:
    (tiny_model / "modelward.yaml").write_text(
        render_spec_template(dtype="float32", max_model_len=512)
    )
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    key = str(_key_file(pub, tmp_path))
    before = upload_requests(registry)
    # (1) the preflight: refused here, nothing sent
    local = registry.cli("push", str(tiny_model), repo, "--sign", "--key", key,
                         token=pub.actor.token)  # fmt: skip
    assert local.returncode == 1, local.stderr
    assert REFUSED in local.stderr
    assert "nothing was sent" in local.stderr
    assert upload_requests(registry) == before
    # (2) the registry's scan, the preflight off: the same words, and no bundle recorded
    sent = registry.cli("push", str(tiny_model), repo, "--sign", "--key", key,
                        "--no-preflight", token=pub.actor.token)  # fmt: skip
    assert sent.returncode == 1, sent.stderr
    assert REFUSED in sent.stderr
    assert registry.admin.list_bundles(repo)["bundles"] == []
