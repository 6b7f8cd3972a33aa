"""The bundle verifier's memo seam: a bundle judged again is not re-read (issue 30, item 7).

The attack it serves: a reader asking the registry, again and again, to judge a large
bundle with an OMS signature (every file re-hashed per request). ``verify_bundle_result``
takes an ``EvidenceMemo``: the scan under ``scan_key``, each attestation under
``attestation_key``; the policy's decision is taken afresh every time, and nothing of step
(4) is recalled while an X.509 CA (a clock-dependent check) is trusted.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, TypeVar

from modelward.attest.manifest import Layer, build_bundle
from modelward.attest.policy import load_policy, policy_trust_set
from modelward.attest.trust import TrustedCA, TrustSet
from modelward.attest.verifier import DirectoryReader, attestation_key, verify_bundle_result
from tests.attest.test_attacks_interop import OMS_V1, _oms_copy

T = TypeVar("T")


class DictMemo:
    def __init__(self) -> None:
        self.stored: dict[str, object] = {}

    def recall(self, key: str, compute: Callable[[], T]) -> T:
        if key not in self.stored:
            self.stored[key] = compute()
        return self.stored[key]  # type: ignore[return-value]


class CountingReader(DirectoryReader):
    reads: list[str]

    @contextlib.contextmanager
    def open(self, layer: Layer) -> Iterator[BinaryIO]:
        self.reads.append(layer.path)
        with super().open(layer) as handle:
            yield handle

    @contextlib.contextmanager
    def tree(self) -> Iterator[Path]:
        self.reads.append("<tree>")
        with super().tree() as root:
            yield root


def _policy(fixtures: Path, predicate: str) -> object:
    pem = (fixtures / "oms" / "keys" / "signing-key-pub.pem").read_text()
    document = {
        "version": 1,
        "signers": {"keys": [{"name": "oms", "pem": pem}]},
        "required_predicate_types": [predicate],
    }
    return load_policy(json.dumps(document).encode(), "oms.yaml")


def test_a_bundle_judged_again_with_a_memo_reads_no_file_and_decides_afresh(
    shared_fixtures: Path, tmp_path: Path
) -> None:
    root = _oms_copy(shared_fixtures, "v1.1.0-elliptic-key", tmp_path)
    signature = (root / "model.sig").read_bytes()
    manifest = build_bundle(root).manifest
    memo = DictMemo()
    reader = CountingReader(root)
    reader.reads = []

    def judge(predicate: str) -> bool:
        policy = _policy(shared_fixtures, predicate)
        verdict = verify_bundle_result(
            manifest.raw,
            [signature],
            policy=policy,  # type: ignore[arg-type]
            trust=policy_trust_set(policy),  # type: ignore[arg-type]
            reader=reader,
            memo=memo,
        )
        return verdict.allowed

    assert judge(OMS_V1) is True
    assert "<tree>" in reader.reads  # the OMS signature re-hashed the files once
    reader.reads.clear()
    assert judge(OMS_V1) is True
    assert reader.reads == []  # recalled: nothing read, nothing hashed
    # the policy's decision is not recalled: a policy wanting provenance denies, unread
    assert judge("https://slsa.dev/provenance/v1") is False
    assert reader.reads == []


def test_no_attestation_is_recalled_while_a_clock_dependent_ca_is_trusted(
    shared_fixtures: Path, tmp_path: Path
) -> None:
    root = _oms_copy(shared_fixtures, "v1.1.0-elliptic-key", tmp_path)
    manifest = build_bundle(root).manifest
    with_ca = TrustSet(cas=(TrustedCA("ca", ()),))
    assert attestation_key(manifest, "a", b"x", trust=with_ca) is None
    plain = TrustSet()
    first = attestation_key(manifest, "a", b"x", trust=plain)
    assert first is not None
    assert attestation_key(manifest, "a", b"y", trust=plain) != first


class FlakyReader(CountingReader):
    """Fails every read until ``healed``."""

    healed = False

    @contextlib.contextmanager
    def open(self, layer: Layer) -> Iterator[BinaryIO]:
        if not self.healed:
            raise OSError("store unavailable")
        with super().open(layer) as handle:
            yield handle


def test_a_file_that_could_not_be_read_is_judged_again_not_recalled(
    shared_fixtures: Path, tmp_path: Path
) -> None:
    root = _oms_copy(shared_fixtures, "v1.1.0-elliptic-key", tmp_path)
    manifest = build_bundle(root).manifest
    policy = _policy(shared_fixtures, OMS_V1)
    memo = DictMemo()
    reader = FlakyReader(root)
    reader.reads = []

    def rules() -> set[str]:
        verdict = verify_bundle_result(
            manifest.raw,
            [(root / "model.sig").read_bytes()],
            policy=policy,  # type: ignore[arg-type]
            trust=policy_trust_set(policy),  # type: ignore[arg-type]
            reader=reader,
            memo=memo,
        )
        return {f.rule for f in verdict.findings}

    assert "tree.unreadable" in rules()
    reader.healed = True
    assert rules() == set()
