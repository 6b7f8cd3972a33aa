"""attest.statement and attest.provenance: exact statement JSON, strict parsing, binding."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from modelward.attest import provenance, statement
from modelward.attest.errors import SubjectMismatch, VerificationError
from modelward.attest.provenance import BUILD_TYPE, BaseBundle, make_provenance
from modelward.attest.statement import (
    STATEMENT_TYPE,
    PredicateType,
    make_statement,
    parse_statement,
    require_subject,
)
from modelward.attest.trust import VerifiedStatement

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
COMMIT = "0123456789abcdef0123456789abcdef01234567"
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _statement(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": "model", "digest": {"sha256": "ab" * 32}}],
        "predicateType": PredicateType.PROVENANCE,
        "predicate": {"k": "v"},
    }
    doc.update(overrides)
    return {k: v for k, v in doc.items() if v is not None}


def _verified(payload: bytes) -> VerifiedStatement:
    statement, predicate_type, subjects = parse_statement(payload)
    return VerifiedStatement("dsse", payload, statement, predicate_type, subjects, ())


def test_make_statement_is_exact_canonical_json() -> None:
    payload = make_statement("model", DIGEST, PredicateType.APPROVAL, {"b": 1, "a": "x"})
    assert payload == (
        b'{"_type":"https://in-toto.io/Statement/v1","predicate":{"a":"x","b":1},'
        b'"predicateType":"https://modelward.dev/approval/v1",'
        b'"subject":[{"digest":{"sha256":"' + b"ab" * 32 + b'"},"name":"model"}]}'
    )
    statement, predicate_type, subjects = parse_statement(payload)
    assert predicate_type == PredicateType.APPROVAL
    assert statement["predicate"] == {"a": "x", "b": 1}
    assert [(s.name, dict(s.digest)) for s in subjects] == [("model", {"sha256": "ab" * 32})]


@pytest.mark.parametrize("digest", ["ab" * 32, "sha256:" + "AB" * 32, "sha512:" + "ab" * 64, ""])
def test_make_statement_refuses_malformed_bundle_digest(digest: str) -> None:
    with pytest.raises(ValueError, match="sha256:<64 lowercase hex>"):
        make_statement("model", digest, PredicateType.PROVENANCE, {})


def test_predicate_types_are_distinct_uris() -> None:
    assert len(set(PredicateType.ALL)) == len(PredicateType.ALL) == 6
    assert PredicateType.PROVENANCE == "https://slsa.dev/provenance/v1"
    assert all(t.startswith("https://") for t in PredicateType.ALL)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (_statement(_type="https://in-toto.io/Statement/v0.1"), "_type must be"),
        (_statement(_type=None), "_type must be"),
        (_statement(subject=[]), "subject must be a non-empty list"),
        (_statement(subject={"name": "x"}), "subject must be a non-empty list"),
        (_statement(subject=["x"]), r"subject\[0\] is not an object"),
        (_statement(subject=[{"name": "m", "digest": {}}]), "digest must be a non-empty"),
        (_statement(subject=[{"digest": {"sha256": "ab" * 32}}]), "name must be a string"),
        (
            _statement(subject=[{"name": "m", "digest": {"sha256": "AB" * 32}}]),
            "sha256 must be lowercase hex",
        ),
        (
            _statement(subject=[{"name": "m", "digest": {"sha256": "ab" * 31}}]),
            "62 hex digits, expected 64",
        ),
        (
            _statement(subject=[{"name": "m", "digest": {"sha256": "ab" * 32}, "evil": 1}]),
            "unknown field",
        ),
        (_statement(predicateType=None), "predicateType must be"),
        (_statement(predicateType=7), "predicateType must be"),
        (_statement(predicate=None), "predicate must be an object"),
        (_statement(predicate=[1]), "predicate must be an object"),
        ({**_statement(), "extra": True}, "unknown field.*extra"),
        ([1, 2], "not a JSON object"),
    ],
)
def test_parse_statement_is_strict(doc: Any, message: str) -> None:
    with pytest.raises(VerificationError, match=message):
        parse_statement(json.dumps(doc).encode())


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"{", "not valid JSON"),
        (b'{"_type": 1, "_type": 2}', "duplicate key"),
        (b'{"predicate": {"x": NaN}}', "non-finite"),
    ],
)
def test_parse_statement_rejects_bad_json(raw: bytes, message: str) -> None:
    with pytest.raises(VerificationError, match=message):
        parse_statement(raw)


def test_require_subject_accepts_the_bundle_digest() -> None:
    require_subject(_verified(make_statement("m", DIGEST, PredicateType.PROVENANCE, {})), DIGEST)


def test_statement_about_another_bundle_is_subject_mismatch() -> None:
    stmt = _verified(make_statement("m", OTHER, PredicateType.PROVENANCE, {}))
    with pytest.raises(SubjectMismatch) as info:
        require_subject(stmt, DIGEST)
    assert info.value.expected == DIGEST
    assert "cd" * 32 in info.value.subjects[0]


def test_subject_matching_only_by_other_algorithm_is_mismatch() -> None:
    payload = json.dumps(
        _statement(subject=[{"name": "m", "digest": {"sha512": "ab" * 64}}])
    ).encode()
    with pytest.raises(SubjectMismatch):
        require_subject(_verified(payload), DIGEST)


# --- provenance --------------------------------------------------------------------------


def test_provenance_predicate_shape() -> None:
    serving = {"engine": {"name": "vllm", "version": "0.32.0"}, "serving": {"dtype": "float32"}}
    predicate = make_provenance(
        builder_id="https://ci.example/builder",
        started_on=T0,
        finished_on=T0 + timedelta(seconds=3),
        source_uri="hf://org/model",
        source_revision=COMMIT.upper(),
        serving=serving,
        base_bundles=[BaseBundle("https://registry.example/v1/repos/org/base", OTHER)],
        internal_parameters={"workers": 2},
    )
    build = predicate["buildDefinition"]
    assert build["buildType"] == BUILD_TYPE
    assert build["externalParameters"] == {
        "source": {"uri": "hf://org/model", "revision": COMMIT},
        "serving": serving,
    }
    assert build["internalParameters"] == {"workers": 2}
    assert build["resolvedDependencies"] == [
        {"uri": "hf://org/model", "digest": {"gitCommit": COMMIT}},
        {"uri": "https://registry.example/v1/repos/org/base", "digest": {"sha256": "cd" * 32}},
    ]
    run = predicate["runDetails"]
    assert run["builder"] == {"id": "https://ci.example/builder"}
    assert run["metadata"]["startedOn"] == "2026-01-02T03:04:05.000000Z"
    assert run["metadata"]["finishedOn"] == "2026-01-02T03:04:08.000000Z"
    assert uuid.UUID(run["metadata"]["invocationId"]).version == 4
    # it goes into a statement unchanged
    make_statement("m", DIGEST, PredicateType.PROVENANCE, predicate)


def test_provenance_times_are_converted_to_utc() -> None:
    plus2 = timezone(timedelta(hours=2))
    predicate = make_provenance(
        started_on=datetime(2026, 1, 2, 5, 0, tzinfo=plus2),
        finished_on=datetime(2026, 1, 2, 5, 1, tzinfo=plus2),
    )
    assert predicate["runDetails"]["metadata"]["startedOn"] == "2026-01-02T03:00:00.000000Z"
    assert "source" not in predicate["buildDefinition"]["externalParameters"]
    assert "resolvedDependencies" not in predicate["buildDefinition"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"source_uri": "hf://org/model", "source_revision": "main"}, "40-hex commit"),
        ({"source_uri": "hf://org/model", "source_revision": COMMIT[:39]}, "40-hex commit"),
        ({"source_uri": "git+https://github.com/o/r", "source_revision": "v1.0"}, "40-hex"),
        ({"source_uri": "https://github.com/o/r.git", "source_revision": "HEAD"}, "40-hex"),
        ({"source_uri": "https://example.com/m.tar", "source_revision": "v1"}, "sha256:<64 hex>"),
        ({"source_uri": "hf://a/b/c", "source_revision": COMMIT}, "hf://org/model"),
        ({"source_uri": "org/model", "source_revision": COMMIT}, "absolute URI"),
        ({"source_uri": "hf://org/model"}, "give both or neither"),
        ({"builder_id": "not a uri"}, "builder id must be an absolute URI"),
        (
            {"base_bundles": [BaseBundle("https://r/b", "sha256:abc")]},
            "base bundle https://r/b digest",
        ),
    ],
)
def test_provenance_refuses_unpinned_or_malformed_inputs(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        make_provenance(started_on=T0, finished_on=T0, **kwargs)


def test_provenance_refuses_naive_or_reversed_times() -> None:
    with pytest.raises(ValueError, match="no timezone"):
        make_provenance(started_on=datetime(2026, 1, 1), finished_on=T0)
    with pytest.raises(ValueError, match="before startedOn"):
        make_provenance(started_on=T0, finished_on=T0 - timedelta(seconds=1))


def test_provenance_sha256_pinned_archive_source() -> None:
    predicate = make_provenance(
        started_on=T0,
        finished_on=T0,
        source_uri="https://example.com/m.tar",
        source_revision=OTHER,
    )
    assert predicate["buildDefinition"]["resolvedDependencies"] == [
        {"uri": "https://example.com/m.tar", "digest": {"sha256": "cd" * 32}}
    ]


def test_public_surface() -> None:
    assert sorted(statement.__all__) == [
        "PredicateType",
        "STATEMENT_TYPE",
        "make_statement",
        "parse_statement",
        "require_subject",
        "strict_json_loads",
    ]
    assert sorted(provenance.__all__) == [
        "BUILD_TYPE",
        "BaseBundle",
        "DEFAULT_BUILDER_ID",
        "make_provenance",
        "rfc3339",
    ]
