"""``HashedBytes``: the digest travels with the bytes, and no one can hand a digest in."""

from __future__ import annotations

import copy
import hashlib
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from modelward.attest.digest import HashedBytes
from modelward.attest.errors import ManifestError
from modelward.attest.manifest import build_bundle, bundle_digest, parse_manifest


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The bytes of every one-shot ``hashlib.sha256(data)`` from here on."""
    seen: list[bytes] = []
    real: Callable[..., Any] = hashlib.sha256

    def counted(data: bytes = b"", **kw: Any) -> Any:
        if data:
            seen.append(bytes(data))
        return real(data, **kw)

    monkeypatch.setattr(hashlib, "sha256", counted)
    return seen


def _manifest_bytes(tmp_path: Path) -> bytes:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.json").write_text('{"model_type": "llama"}')
    return bytes(build_bundle(tmp_path / "b").manifest.raw)


def test_the_digest_is_of_the_bytes_and_taken_once(hashes: list[bytes]) -> None:
    expected = _sha(b"some manifest")
    hashes.clear()
    data = HashedBytes(b"some manifest")
    assert data == b"some manifest"
    assert data.digest == expected
    assert HashedBytes(data) is data
    assert bundle_digest(data) == data.digest
    assert hashes == [b"some manifest"]


def test_no_digest_can_be_handed_in_or_changed() -> None:
    data = HashedBytes(b"x")
    with pytest.raises(TypeError):
        HashedBytes(b"x", _sha(b"y"))  # type: ignore[call-arg]
    with pytest.raises(AttributeError):
        data._digest = _sha(b"y")  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del data._digest
    with pytest.raises(TypeError):
        HashedBytes("text")  # type: ignore[arg-type]


def test_derived_bytes_carry_nothing_and_copies_hash_again() -> None:
    data = HashedBytes(b"abcdef")
    assert type(data[:3]) is bytes
    assert type(data + b"g") is bytes
    assert type(bytes(data)) is bytes
    for other in (copy.copy(data), pickle.loads(pickle.dumps(data))):
        assert isinstance(other, HashedBytes)
        assert other.digest == data.digest


def test_parse_manifest_hashes_plain_bytes_once_and_keeps_the_digest(
    tmp_path: Path, hashes: list[bytes]
) -> None:
    raw = _manifest_bytes(tmp_path)
    expected = _sha(raw)
    hashes.clear()
    manifest = parse_manifest(raw)
    assert hashes.count(raw) == 1
    assert isinstance(manifest.raw, HashedBytes)
    assert manifest.digest == manifest.raw.digest == expected
    parse_manifest(manifest.raw)  # what a verifier handed manifest.raw does
    assert hashes.count(raw) == 1


def test_parse_manifest_still_refuses_bad_bytes_that_carry_a_digest() -> None:
    with pytest.raises(ManifestError):
        parse_manifest(HashedBytes(b'{"schemaVersion": 2}'))
