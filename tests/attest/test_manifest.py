"""Bundle manifest (attest/manifest.py): canonical build, strict parse, tree verification."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import struct
import tempfile
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelward.attest.errors import DigestMismatch, ManifestError, TreeRuleError
from modelward.attest.manifest import (
    ARTIFACT_TYPE,
    CONFIG_MEDIA_TYPE,
    DOC_MEDIA_TYPE,
    FILEPATH_ANNOTATION,
    MANIFEST_MEDIA_TYPE,
    TITLE_ANNOTATION,
    WEIGHT_CONFIG_MEDIA_TYPE,
    WEIGHT_MEDIA_TYPE,
    ManifestLimits,
    build_bundle,
    bundle_digest,
    check_config,
    layer_media_type,
    parse_manifest,
    verify_tree,
)


def _write(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o644)
    return root


SMALL = {
    "config.json": b'{"architectures": ["LlamaForCausalLM"], "model_type": "llama",'
    b' "dtype": "bfloat16", "quantization_config": {"quant_method": "awq"}}',
    "model.safetensors": b"weights",
    "README.md": b"# hi\n",
    "tokenizer.json": b"{}",
}


@pytest.fixture
def small_manifest(tmp_path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(build_bundle(_write(tmp_path, SMALL)).manifest.raw)
    return doc


# --- building ----------------------------------------------------------------------------


def test_tiny_model_manifest_follows_modelpack(tiny_model: Path) -> None:
    built = build_bundle(tiny_model)
    doc = json.loads(built.manifest.raw)
    assert built.manifest.raw == rfc8785.dumps(doc)
    assert built.manifest.digest == "sha256:" + hashlib.sha256(built.manifest.raw).hexdigest()
    assert doc["schemaVersion"] == 2
    assert doc["mediaType"] == MANIFEST_MEDIA_TYPE
    assert doc["artifactType"] == ARTIFACT_TYPE
    assert doc["config"] == {
        "mediaType": CONFIG_MEDIA_TYPE,
        "digest": bundle_digest(built.config_bytes),
        "size": len(built.config_bytes),
    }
    kinds = {
        layer["annotations"][FILEPATH_ANNOTATION]: layer["mediaType"] for layer in doc["layers"]
    }
    assert kinds["model.safetensors"] == WEIGHT_MEDIA_TYPE
    assert kinds["config.json"] == WEIGHT_CONFIG_MEDIA_TYPE
    assert kinds["tokenizer.json"] == WEIGHT_CONFIG_MEDIA_TYPE
    for path, layer in zip(sorted(kinds), built.manifest.layers, strict=True):
        data = (tiny_model / path).read_bytes()
        assert layer.path == path
        assert layer.digest == "sha256:" + hashlib.sha256(data).hexdigest()
        assert layer.size == len(data)
    config = json.loads(built.config_bytes)
    assert config["config"] == {
        "architecture": "LlamaForCausalLM",
        "format": "safetensors",
        "precision": "fp32",
    }
    assert config["descriptor"] == {"family": "llama"}
    assert config["modelfs"] == {
        "type": "layers",
        "diffIds": [x.digest for x in built.manifest.layers],
    }
    check_config(built.config_bytes, built.manifest)
    verify_tree(tiny_model, built.manifest)


def test_config_metadata_from_config_json(tmp_path: Path) -> None:
    built = build_bundle(_write(tmp_path, SMALL))
    config = json.loads(built.config_bytes)["config"]
    assert config == {
        "architecture": "LlamaForCausalLM",
        "format": "safetensors",
        "precision": "bf16",
        "quantization": "awq",
    }
    assert built.manifest.layer("README.md").media_type == DOC_MEDIA_TYPE
    with pytest.raises(KeyError):
        built.manifest.layer("missing.json")


def _safetensors(dtypes: list[str]) -> bytes:
    header = {
        f"t{i}": {"dtype": d, "shape": [1], "data_offsets": [i * 4, i * 4 + 4]}
        for i, d in enumerate(dtypes)
    }
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * 4 * len(dtypes)


@pytest.mark.parametrize(
    ("dtypes", "precision"), [(["F16", "F16"], "fp16"), (["BF16", "F32"], "mixed")]
)
def test_precision_from_safetensors_header_when_config_is_silent(
    tmp_path: Path, dtypes: list[str], precision: str
) -> None:
    built = build_bundle(_write(tmp_path, {"model.safetensors": _safetensors(dtypes)}))
    assert json.loads(built.config_bytes)["config"] == {
        "format": "safetensors",
        "precision": precision,
    }


def test_unparseable_config_json_gives_no_metadata_but_builds(tmp_path: Path) -> None:
    built = build_bundle(_write(tmp_path, {"config.json": b"{not json", "x.gguf": b"g"}))
    config = json.loads(built.config_bytes)
    assert config["descriptor"] == {}
    assert config["config"] == {"format": "gguf"}


def test_hostile_config_json_strings_are_left_out(tmp_path: Path) -> None:
    config = b'{"model_type": "\\ud800", "architectures": ["A\\nB"], "dtype": null,'
    config += b' "torch_dtype": "float16", "quantization_config": {"quant_method": 5}}'
    built = build_bundle(_write(tmp_path, {"config.json": config}))
    doc = json.loads(built.config_bytes)
    assert doc["descriptor"] == {}
    assert doc["config"] == {"precision": "fp16"}


def test_empty_bundle_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty-dir").mkdir()
    with pytest.raises(TreeRuleError) as info:
        build_bundle(tmp_path)
    assert info.value.violations[0].rule == "bundle.empty"


def test_tree_violation_stops_the_build(tmp_path: Path) -> None:
    _write(tmp_path, SMALL)
    (tmp_path / "evil.safetensors").symlink_to("/etc/passwd")
    with pytest.raises(TreeRuleError, match=r"evil\.safetensors: tree\.symlink"):
        build_bundle(tmp_path)


@pytest.mark.parametrize(
    ("path", "media_type"),
    [
        ("model-00001-of-00002.safetensors", WEIGHT_MEDIA_TYPE),
        ("pytorch_model.bin", WEIGHT_MEDIA_TYPE),
        ("m.gguf", WEIGHT_MEDIA_TYPE),
        ("sub/model.ONNX", WEIGHT_MEDIA_TYPE),
        ("model.safetensors.index.json", WEIGHT_CONFIG_MEDIA_TYPE),
        ("tokenizer.model", WEIGHT_CONFIG_MEDIA_TYPE),
        ("merges.txt", WEIGHT_CONFIG_MEDIA_TYPE),
        ("vocab.txt", WEIGHT_CONFIG_MEDIA_TYPE),
        ("chat_template.jinja", WEIGHT_CONFIG_MEDIA_TYPE),
        ("modelward.yaml", WEIGHT_CONFIG_MEDIA_TYPE),
        ("README.md", DOC_MEDIA_TYPE),
        ("LICENSE", DOC_MEDIA_TYPE),
        ("docs/usage.txt", DOC_MEDIA_TYPE),
        ("NOTICE", DOC_MEDIA_TYPE),
        ("unknown.xyz", WEIGHT_CONFIG_MEDIA_TYPE),
    ],
)
def test_layer_media_type(path: str, media_type: str) -> None:
    assert layer_media_type(path) == media_type


NAMES = st.text(alphabet="abcxyz019_-.é", min_size=1, max_size=8).filter(
    lambda s: s not in {".", ".."} and s != "model.sig"
)
TREES = st.dictionaries(
    st.lists(NAMES, min_size=1, max_size=3).map("/".join),
    st.binary(max_size=300),
    min_size=1,
    max_size=8,
).filter(lambda tree: not any(b.startswith(a + "/") for a in tree for b in tree))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=TREES, seed=st.integers(0, 2**32 - 1))
def test_manifest_is_deterministic_under_file_order_location_and_mtime(
    tree: dict[str, bytes], seed: int
) -> None:
    rng = random.Random(seed)
    results = []
    for _ in range(2):
        with tempfile.TemporaryDirectory(prefix=f"mw-{rng.randrange(10**6)}-") as tmp:
            root = Path(tmp) / rng.choice(["a", "bundle", "deep/er/dir"])
            root.mkdir(parents=True)
            names = list(tree)
            rng.shuffle(names)
            for name in names:
                _write(root, {name: tree[name]})
                os.utime(root / name, (rng.randrange(10**9), rng.randrange(10**9)))
            built = build_bundle(root)
            results.append((built.manifest.raw, built.manifest.digest, built.config_bytes))
    assert results[0] == results[1]
    paths = [layer.path for layer in parse_manifest(results[0][0]).layers]
    assert paths == sorted(tree, key=str.encode)


# --- parsing: every bad form is refused ---------------------------------------------------


def _bad(doc: dict[str, Any], mutate: Callable[[dict[str, Any]], Any]) -> bytes:
    changed = copy.deepcopy(doc)
    mutate(changed)
    return rfc8785.dumps(changed)


def _layer(path: str, media_type: str = WEIGHT_CONFIG_MEDIA_TYPE) -> dict[str, Any]:
    return {
        "mediaType": media_type,
        "digest": "sha256:" + "a" * 64,
        "size": 1,
        "annotations": {FILEPATH_ANNOTATION: path},
    }


def _paths(*paths: str) -> Callable[[dict[str, Any]], Any]:
    return lambda d: d.__setitem__("layers", [_layer(p) for p in paths])


def _set(*keys: str | int, value: Any) -> Callable[[dict[str, Any]], Any]:
    def mutate(doc: dict[str, Any]) -> None:
        target: Any = doc
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return mutate


INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
TAR_TYPE = "application/vnd.cncf.model.weight.v1.tar"
PATH = ("layers", 0, "annotations", FILEPATH_ANNOTATION)
MUTATIONS: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "schema_version_1": (_set("schemaVersion", value=1), "schemaVersion"),
    "schema_version_str": (_set("schemaVersion", value="2"), "schemaVersion"),
    "schema_version_bool": (_set("schemaVersion", value=True), "schemaVersion"),
    "manifest_media_type": (
        _set("mediaType", value=INDEX_TYPE),
        f"unknown media type {INDEX_TYPE!r}",
    ),
    "artifact_type": (_set("artifactType", value="application/x-evil"), "application/x-evil"),
    "config_media_type": (
        _set("config", "mediaType", value="application/json"),
        "config.mediaType: unknown media type 'application/json'",
    ),
    "layer_media_type": (
        _set("layers", 0, "mediaType", value=TAR_TYPE),
        f"layers[0].mediaType: unknown media type {TAR_TYPE!r}",
    ),
    "digest_uppercase": (_set("layers", 0, "digest", value="sha256:" + "A" * 64), "digest"),
    "digest_sha512": (_set("config", "digest", value="sha512:" + "a" * 128), "config.digest"),
    "size_negative": (_set("layers", 1, "size", value=-1), "layers[1].size"),
    "size_string": (_set("layers", 1, "size", value="1"), "size"),
    "size_bool": (_set("config", "size", value=True), "size"),
    "size_max_ok": (_set("layers", 0, "size", value=2**53 - 1), "__ok__"),
    "missing_layers": (lambda d: d.pop("layers"), "missing layers"),
    "unknown_top": (_set("annotations", value={}), "unknown field 'annotations'"),
    "unknown_layer_field": (_set("layers", 0, "urls", value=[]), "unknown field 'urls'"),
    "layers_empty": (_set("layers", value=[]), "non-empty"),
    "layers_object": (_set("layers", value={}), "non-empty"),
    "annotation_missing": (_set("layers", 0, "annotations", value={}), FILEPATH_ANNOTATION),
    "annotation_extra": (_set("layers", 0, "annotations", "x", value="y"), FILEPATH_ANNOTATION),
    "title_differs_from_filepath": (
        _set("layers", 0, "annotations", TITLE_ANNOTATION, value="model.safetensors"),
        f"{TITLE_ANNOTATION} 'model.safetensors' differs from {FILEPATH_ANNOTATION}",
    ),
    "title_only": (
        lambda d: d["layers"][0].__setitem__("annotations", {TITLE_ANNOTATION: "README.md"}),
        FILEPATH_ANNOTATION,
    ),
    "path_not_string": (_set(*PATH, value=1), "string"),
    "path_dotdot": (_paths("../etc/passwd"), "tree.name"),
    "path_inner_dotdot": (_paths("a/../../b"), "tree.name"),
    "path_absolute": (_paths("/etc/passwd"), "relative"),
    "path_backslash": (_paths("a\\b"), "tree.name"),
    "path_control": (_paths("a\x1bb"), "tree.name"),
    "path_empty": (_paths(""), "relative"),
    "path_double_slash": (_paths("a//b"), "tree.name"),
    "path_nfd": (_paths(unicodedata.normalize("NFD", "é")), "tree.nfc"),
    "path_git": (_paths("sub/.git/hooks/pre-commit"), "reserved"),
    "path_modelward": (_paths(".modelward/x"), "reserved"),
    "path_signature": (_paths("model.sig"), "reserved"),
    "path_duplicate": (_paths("a.json", "a.json"), "duplicate path 'a.json'"),
    "path_unsorted": (_paths("b.json", "a.json"), "not sorted"),
    "path_case_collision": (_paths("A.json", "a.json"), "collides"),
    "path_fold_collision": (_paths("STRASSE", "Straße"), "collides"),
    "path_dir_collision": (_paths("A/x", "a/y"), "'a' collides with 'A'"),
    "path_file_and_dir": (_paths("a", "a/b"), "both a file and a directory"),
    "path_too_long": (_paths("a/" * 2100 + "b"), "longer than"),
}


@pytest.mark.parametrize("case", sorted(MUTATIONS))
def test_parse_manifest_rejects(small_manifest: dict[str, Any], case: str) -> None:
    mutate, message = MUTATIONS[case]
    data = _bad(small_manifest, mutate)
    if message == "__ok__":
        assert parse_manifest(data).layers[0].size == 2**53 - 1
        return
    with pytest.raises(ManifestError) as info:
        parse_manifest(data)
    assert message in str(info.value)
    assert str(info.value).startswith("manifest:")


def test_parse_manifest_accepts_what_build_produces(small_manifest: dict[str, Any]) -> None:
    data = rfc8785.dumps(small_manifest)
    manifest = parse_manifest(data)
    assert manifest.raw == data
    assert manifest.digest == bundle_digest(data)
    assert [layer.path for layer in manifest.layers] == sorted(SMALL)


def test_built_layers_carry_the_title_oci_clients_name_files_by(
    small_manifest: dict[str, Any],
) -> None:
    for layer in small_manifest["layers"]:
        path = layer["annotations"][FILEPATH_ANNOTATION]
        assert layer["annotations"] == {FILEPATH_ANNOTATION: path, TITLE_ANNOTATION: path}


def test_manifests_built_before_the_title_annotation_still_parse(
    small_manifest: dict[str, Any],
) -> None:
    for layer in small_manifest["layers"]:
        del layer["annotations"][TITLE_ANNOTATION]
    data = rfc8785.dumps(small_manifest)
    assert [layer.path for layer in parse_manifest(data).layers] == sorted(SMALL, key=str.encode)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff{}", "not valid UTF-8"),
        (b"\xef\xbb\xbf{}", "not valid JSON"),
        (b"[]", "must be an object"),
        (b'{"a":1,"a":1}', "duplicate key 'a'"),
        (b'{"a":1.5}', "non-integer number"),
        (b'{"a":NaN}', "non-finite"),
        (b'{"a":Infinity}', "non-finite"),
        (b"{", "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"a": 1}', "canonical"),
        (b'{"a":1}\n', "canonical"),
        (b'{"a":9007199254740992}', "cannot be canonicalized"),
        (b'{"a":"\\ud800"}', "cannot be canonicalized"),
        (b'{"a":-0}', "canonical"),
        (b"", "not valid JSON"),
    ],
)
def test_parse_manifest_rejects_malformed_json(data: bytes, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        parse_manifest(data)


def test_parse_manifest_limits(small_manifest: dict[str, Any]) -> None:
    data = rfc8785.dumps(small_manifest)
    with pytest.raises(ManifestError, match="exceeds limit"):
        parse_manifest(data, ManifestLimits(max_bytes=len(data) - 1))
    with pytest.raises(ManifestError, match="4 layers exceeds limit of 3"):
        parse_manifest(data, ManifestLimits(max_layers=3))
    with pytest.raises(ManifestError, match="longer than 5 bytes"):
        parse_manifest(data, ManifestLimits(max_path_bytes=5))


def test_check_config_refuses_other_bytes_and_wrong_diff_ids(tmp_path: Path) -> None:
    built = build_bundle(_write(tmp_path, SMALL))
    with pytest.raises(DigestMismatch) as info:
        check_config(built.config_bytes + b" ", built.manifest)
    assert info.value.expected == built.manifest.config.digest
    forged = json.loads(built.config_bytes)
    forged["modelfs"]["diffIds"].reverse()
    forged_bytes = rfc8785.dumps(forged)
    doc = json.loads(built.manifest.raw)
    doc["config"].update(digest=bundle_digest(forged_bytes), size=len(forged_bytes))
    with pytest.raises(ManifestError, match="diffIds"):
        check_config(forged_bytes, parse_manifest(rfc8785.dumps(doc)))


# --- verify_tree ------------------------------------------------------------------------------


def test_verify_tree_catches_a_flipped_byte(tiny_model: Path) -> None:
    manifest = build_bundle(tiny_model).manifest
    weights = tiny_model / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(DigestMismatch) as info:
        verify_tree(tiny_model, manifest)
    assert info.value.path == "model.safetensors"
    assert info.value.expected == manifest.layer("model.safetensors").digest
    assert info.value.actual == "sha256:" + hashlib.sha256(data).hexdigest()


def test_verify_tree_catches_a_missing_file(tiny_model: Path) -> None:
    manifest = build_bundle(tiny_model).manifest
    (tiny_model / "tokenizer.json").unlink()
    with pytest.raises(TreeRuleError) as info:
        verify_tree(tiny_model, manifest)
    assert [(v.path, v.rule) for v in info.value.violations] == [
        ("tokenizer.json", "bundle.missing")
    ]


def test_verify_tree_catches_an_extra_file(tiny_model: Path) -> None:
    manifest = build_bundle(tiny_model).manifest
    _write(tiny_model, {"sub/extra.py": b"import os\n", "model.sig": b"ignored", ".git/HEAD": b"x"})
    with pytest.raises(TreeRuleError) as info:
        verify_tree(tiny_model, manifest)
    assert [(v.path, v.rule) for v in info.value.violations] == [("sub/extra.py", "bundle.extra")]


def test_verify_tree_catches_a_truncated_file(tmp_path: Path) -> None:
    manifest = build_bundle(_write(tmp_path, SMALL)).manifest
    (tmp_path / "model.safetensors").write_bytes(b"weight")
    with pytest.raises(DigestMismatch, match=r"model\.safetensors"):
        verify_tree(tmp_path, manifest)


def test_verify_tree_refuses_tree_rule_violations(tmp_path: Path) -> None:
    manifest = build_bundle(_write(tmp_path, SMALL)).manifest
    (tmp_path / "README.md").chmod(0o755)
    with pytest.raises(TreeRuleError, match=r"tree\.executable"):
        verify_tree(tmp_path, manifest)


def test_verify_tree_passes_an_identical_copy_elsewhere(tmp_path: Path) -> None:
    manifest = build_bundle(_write(tmp_path / "one", SMALL)).manifest
    verify_tree(_write(tmp_path / "two", dict(reversed(SMALL.items()))), manifest)


def test_public_surface_is_pinned() -> None:
    import modelward.attest.manifest

    assert sorted(modelward.attest.manifest.__all__) == [
        "ARTIFACT_TYPE", "BuiltBundle", "CONFIG_MEDIA_TYPE", "DOC_MEDIA_TYPE", "Descriptor",
        "FILEPATH_ANNOTATION", "LAYER_MEDIA_TYPES", "Layer", "MANIFEST_MEDIA_TYPE", "Manifest",
        "ManifestLimits", "TITLE_ANNOTATION", "WEIGHT_CONFIG_MEDIA_TYPE", "WEIGHT_MEDIA_TYPE",
        "build_bundle", "bundle_digest", "check_config", "layer_media_type", "parse_manifest",
        "verify_tree",
    ]  # fmt: skip
