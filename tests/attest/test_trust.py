"""attest.trust: one signer name never stands for two signers."""

from __future__ import annotations

import pytest

from modelward.attest.keys import generate_private_key, trusted_key
from modelward.attest.trust import TrustedIdentity, TrustSet


def test_merging_trust_sets_refuses_a_name_trusted_twice() -> None:
    pinned = TrustSet(keys=(trusted_key("alice", generate_private_key().public_key()),))
    impostor = TrustSet(keys=(trusted_key("alice", generate_private_key().public_key()),))
    with pytest.raises(ValueError, match="'alice' is trusted twice"):
        pinned.merged(impostor)


def test_merging_refuses_a_name_reused_across_signer_kinds() -> None:
    key = TrustSet(keys=(trusted_key("release", generate_private_key().public_key()),))
    identity = TrustSet(identities=(TrustedIdentity("release", "ci@example.com", "https://i"),))
    with pytest.raises(ValueError, match="'release'"):
        key.merged(identity)


def test_merging_distinct_names_keeps_every_signer() -> None:
    a = TrustSet(keys=(trusted_key("a", generate_private_key().public_key()),))
    b = TrustSet(identities=(TrustedIdentity("b", "ci@example.com", "https://i"),))
    merged = a.merged(b)
    assert merged.names() == ["a", "b"]
    assert not merged.is_empty()
