"""attest.tuf ``tuf_key`` and its inverse ``public_key_of`` (docs/tuf.md#keys)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from securesystemslib.signer import SSlibKey
from tuf.api.metadata import Metadata, Root

from modelward.attest.keys import KeyKind, generate_private_key, keyid
from modelward.attest.tuf import public_key_of, tuf_key


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa-p256"])
def test_a_modelward_key_comes_back_from_root_metadata_with_its_keyid(kind: KeyKind) -> None:
    public = generate_private_key(kind).public_key()
    root = Root(expires=datetime.now(UTC) + timedelta(days=1))
    root.add_key(tuf_key(public), Root.type)
    read = Metadata[Root].from_bytes(Metadata(root).to_bytes()).signed
    (key,) = read.keys.values()
    found = public_key_of(key)
    assert found is not None
    assert keyid(found) == keyid(public) == key.keyid


def test_a_key_under_another_keyid_verifies_nothing() -> None:
    public = generate_private_key().public_key()
    default_id = SSlibKey.from_crypto(public)  # securesystemslib's keyid, not modelward's
    assert default_id.keyid != keyid(public)
    assert public_key_of(default_id) is None
    borrowed = tuf_key(generate_private_key().public_key())
    lying = SSlibKey(keyid(public), borrowed.keytype, borrowed.scheme, dict(borrowed.keyval))
    assert public_key_of(lying) is None


@pytest.mark.parametrize(
    "make",
    [
        lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key(),
        lambda: ec.generate_private_key(ec.SECP384R1()).public_key(),
    ],
    ids=["rsa", "ecdsa-p384"],
)
def test_a_key_type_modelward_does_not_use_verifies_nothing(make: object) -> None:
    public = make()  # type: ignore[operator]
    key = SSlibKey.from_crypto(public, keyid=keyid(public))
    assert public_key_of(key) is None


def test_a_key_under_the_wrong_scheme_verifies_nothing() -> None:
    good = tuf_key(generate_private_key("ecdsa-p256").public_key())
    other = SSlibKey(good.keyid, good.keytype, "ecdsa-sha2-nistp384", dict(good.keyval))
    assert public_key_of(other) is None


@pytest.mark.parametrize("public", ["not hex", "00" * 31, "Ω"])
def test_a_malformed_ed25519_key_verifies_nothing(public: str) -> None:
    key = SSlibKey("ab" * 32, "ed25519", "ed25519", {"public": public})
    assert public_key_of(key) is None


@pytest.mark.parametrize("public", ["-----BEGIN nothing", "Ω"])
def test_a_malformed_ecdsa_key_verifies_nothing(public: str) -> None:
    key = SSlibKey("ab" * 32, "ecdsa", "ecdsa-sha2-nistp256", {"public": public})
    assert public_key_of(key) is None
