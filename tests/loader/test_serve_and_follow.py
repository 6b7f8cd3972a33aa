"""``loader.follow.serve_and_follow``: the loop ``boot --serve --follow`` hands its server
to is made before the boot, so a worker that cannot follow is refused before vLLM loads
(docs/loader.md#following-a-rollout). The switching itself runs in tests/fleet (the stand-in
engine) and tests/loader/test_boot_vllm.py (vLLM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelward.attest.keys import generate_private_key, trusted_key
from modelward.attest.policy import TrustFlags
from modelward.attest.trust import TrustSet
from modelward.client.api import RegistryClient
from modelward.loader.cache import Cache
from modelward.loader.follow import FollowOptions, FollowRefused, serve_and_follow
from modelward.loader.statements import WorkerKey
from modelward.loader.worker import BootOptions

DIGEST = "sha256:" + "ab" * 32


def _worker_key() -> WorkerKey:
    key = generate_private_key()
    return WorkerKey(key, TrustSet(keys=(trusted_key("worker:k", key.public_key()),)))


def test_a_digest_reference_is_refused_before_the_boot(tmp_path: Path) -> None:
    # nothing listens on port 9: a refusal that needed the registry would fail otherwise
    with (
        RegistryClient("http://127.0.0.1:9", "t", timeout=1) as client,
        pytest.raises(FollowRefused, match="REPO@ALIAS"),
    ):
        serve_and_follow(
            client,
            f"acme/tiny@{DIGEST}",
            cache=Cache(tmp_path / "cache"),
            flags=TrustFlags(public_keys=()),
            worker_key=_worker_key(),
            boot=BootOptions(serve=True),
            options=FollowOptions(),
            log=print,
        )
