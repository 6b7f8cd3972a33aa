"""modelward.yaml (attest/spec.py): strict loading, errors that name the field."""

from __future__ import annotations

import pytest

from modelward.attest.errors import BundleError
from modelward.attest.spec import (
    SERVING_DTYPES,
    BundleSpec,
    SpecError,
    load_spec,
    render_spec_template,
)

VALID = b"""\
version: 1
engine: {name: vllm, version: "0.32.0"}
runtime_image: "registry.example/vllm@sha256:%s"
drivers: {cuda: "12.4", driver: null}
serving:
  dtype: bfloat16
  max_model_len: 4096
  tensor_parallel_size: 2
  seed: 7
  generation_config: vllm
probes: ["The capital of France is", "2 + 2 ="]
""" % (b"a" * 64)


def test_valid_spec_loads() -> None:
    spec = load_spec(VALID)
    assert isinstance(spec, BundleSpec)
    assert spec.engine.version == "0.32.0"
    assert spec.runtime_image is not None
    assert spec.runtime_image.endswith("a" * 64)
    assert spec.drivers.cuda == "12.4"
    assert spec.serving.dtype == "bfloat16"
    assert spec.serving.tensor_parallel_size == 2
    assert spec.serving.generation_config == "vllm"
    assert spec.probes == ["The capital of France is", "2 + 2 ="]


def test_minimal_spec_gets_defaults() -> None:
    spec = load_spec(b"version: 1\nengine: {version: '0.32.0'}\nserving: {dtype: auto}\n")
    assert spec.engine.name == "vllm"
    assert spec.runtime_image is None
    assert spec.drivers.cuda is None
    assert spec.serving.max_model_len is None
    assert (spec.serving.tensor_parallel_size, spec.serving.seed) == (1, 0)
    assert spec.serving.generation_config == "auto"
    assert spec.probes is None


def _with(old: bytes, new: bytes) -> bytes:
    assert old in VALID
    return VALID.replace(old, new)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_with(b"dtype: bfloat16", b"dtype: fp7"), "modelward.yaml: serving.dtype: must be one of"),
        (_with(b"version: 1", b"version: 2"), "modelward.yaml: version:"),
        (_with(b"version: 1", b"version: true"), "modelward.yaml: version: must be 1"),
        (_with(b'"0.32.0"', b'">=0.30"'), "engine.version: must be one exact version"),
        (_with(b'"0.32.0"', b"0.32"), "engine.version: Input should be a valid string"),
        (_with(b"seed: 7", b"seed: '7'"), "serving.seed: Input should be a valid integer"),
        (_with(b"seed: 7", b"seed: -1"), "serving.seed:"),
        (_with(b"max_model_len: 4096", b"max_model_len: 0"), "serving.max_model_len:"),
        (_with(b"tensor_parallel_size: 2", b"tensor_parallel_size: 0"), "tensor_parallel_size"),
        (_with(b"generation_config: vllm", b"generation_config: hf"), "serving.generation_config:"),
        (_with(b"registry.example/vllm@", b"latest:"), "runtime_image: must be an image digest"),
        (_with(b'"12.4"', b"[12]"), "drivers.cuda:"),
        (_with(b'"2 + 2 ="', b'""'), "probes: probe 1 must hold"),
        (_with(b'"2 + 2 ="', b"3"), "probes[1]:"),
        (VALID + b"extra: 1\n", "modelward.yaml: extra: Extra inputs are not permitted"),
        (_with(b"seed: 7", b"seed: 7\n  sede: 8"), "serving.sede: Extra inputs"),
        (b"version: 1\n", "modelward.yaml: engine: Field required"),
        (VALID + b"version: 1\n", "duplicate key 'version'"),
        (b"a: &x [1]\nb: *x\n", "aliases are not allowed"),
        (b"- 1\n", "must be a mapping"),
        (b"", "must be a mapping"),
        (b"\xff\xfe", "not valid UTF-8"),
        (b"version: [1\n", "invalid YAML"),
        (b"[" * 50_000, "modelward.yaml:"),
        (b"x: !!python/object/apply:os.system ['true']\n", "invalid YAML"),
    ],
)
def test_invalid_spec_is_refused_naming_the_field(data: bytes, message: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(data)
    assert message in str(info.value)


def test_every_error_is_listed() -> None:
    data = _with(b"seed: 7", b"seed: -1").replace(b"dtype: bfloat16", b"dtype: x")
    with pytest.raises(SpecError) as info:
        load_spec(data)
    assert "serving.dtype" in str(info.value)
    assert "serving.seed" in str(info.value)


def test_source_names_the_file() -> None:
    with pytest.raises(SpecError, match=r"^bundle/modelward\.yaml: serving\.dtype"):
        load_spec(VALID.replace(b"bfloat16", b"x"), "bundle/modelward.yaml")


def test_size_limit() -> None:
    with pytest.raises(SpecError, match="exceeds limit"):
        load_spec(VALID + b"#" * 100, max_bytes=len(VALID))


def test_spec_error_is_a_bundle_error() -> None:
    assert issubclass(SpecError, BundleError)


@pytest.mark.parametrize("dtype", SERVING_DTYPES)
def test_template_loads_for_every_dtype(dtype: str) -> None:
    text = render_spec_template(dtype=dtype, max_model_len=256, architecture="LlamaForCausalLM")
    spec = load_spec(text.encode())
    assert spec.serving.dtype == dtype
    assert spec.serving.max_model_len == 256
    assert "# Model architecture (from config.json): LlamaForCausalLM" in text


def test_template_refuses_values_that_would_inject_yaml() -> None:
    with pytest.raises(ValueError, match="dtype"):
        render_spec_template(dtype="auto\nprobes: [x]")
    with pytest.raises(ValueError, match="engine_version"):
        render_spec_template(engine_version='1"\nruntime_image: "x')
    text = render_spec_template(architecture="Llama\nruntime_image: x")
    assert "runtime_image: x" not in text
    assert load_spec(text.encode()).runtime_image is None


def test_public_surface_is_pinned() -> None:
    import modelward.attest.spec

    assert sorted(modelward.attest.spec.__all__) == [
        "BundleSpec", "DriverSpec", "EngineSpec", "MAX_SPEC_BYTES", "SERVING_DTYPES",
        "SPEC_FILENAME", "ServingSpec", "SpecError", "load_spec", "render_spec_template",
    ]  # fmt: skip
