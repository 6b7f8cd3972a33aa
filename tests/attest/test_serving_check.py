"""Issue 39 item 7: a serving configuration the engine refuses is a finding, named field by
field, wherever a bundle is scanned (``attest.scanner.check_serving``: ``bundle scan``,
``bundle init``, the one verifier the registry's push, push's preflight and a worker's pull
run).

Each bundle is the suite's tiny Llama (tests/tinymodel.py: max_position_embeddings 256, 2
attention and 2 key/value heads, a tokenizer.json) with one field made wrong; vLLM refuses
each (tests/loader/test_serving_config.py boots the first against real vLLM).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from modelward.attest.manifest import build_bundle
from modelward.attest.policy import load_policy
from modelward.attest.scanner import scan_tree
from modelward.attest.spec import render_spec_template
from modelward.attest.trust import TrustSet
from modelward.attest.verifier import DirectoryReader, verify_bundle_result
from tests.registry.conftest import MODELWARD


def spec(model: Path, **serving: object) -> Path:
    """Write a modelward.yaml pinning float32 and ``serving``'s fields over the template's."""
    text = render_spec_template(dtype="float32")
    for field, value in serving.items():
        line = next(x for x in text.splitlines() if x.strip().startswith(f"{field}:"))
        text = text.replace(line, f"  {field}: {value}")
    (model / "modelward.yaml").write_text(text)
    return model


def edit_json(path: Path, **fields: object) -> None:
    document = json.loads(path.read_text())
    document.update(fields)
    path.write_text(json.dumps(document))


def serving_reasons(model: Path) -> list[str]:
    report = scan_tree(model)
    others = [f for f in report.findings if f.rule != "scan.serving"]
    assert others == [], others
    return [f.reason for f in report.findings]


def test_max_model_len_over_max_position_embeddings_is_refused(tiny_model: Path) -> None:
    assert serving_reasons(spec(tiny_model, max_model_len=512)) == [
        "modelward.yaml serving.max_model_len 512 exceeds config.json max_position_embeddings 256"
    ]
    assert serving_reasons(spec(tiny_model, max_model_len=256)) == []


def test_rope_scaling_factor_lengthens_the_context_yarn_does_not(tiny_model: Path) -> None:
    spec(tiny_model, max_model_len=512)
    linear = {"rope_theta": 10000.0, "rope_type": "linear", "factor": 2.0}
    edit_json(tiny_model / "config.json", rope_parameters=linear)
    assert serving_reasons(tiny_model) == []
    # YaRN's stated length is already the scaled one: its factor lengthens nothing
    yarn = {**linear, "rope_type": "yarn", "original_max_position_embeddings": 128}
    edit_json(tiny_model / "config.json", rope_parameters=yarn)
    assert serving_reasons(tiny_model) == [
        "modelward.yaml serving.max_model_len 512 exceeds config.json max_position_embeddings 256"
    ]
    # a config.json written before transformers named it rope_parameters
    edit_json(tiny_model / "config.json", rope_parameters=None, rope_scaling=linear)
    assert serving_reasons(tiny_model) == []


def test_tokenizer_config_model_max_length_below_it_is_refused(tiny_model: Path) -> None:
    spec(tiny_model, max_model_len=200)
    edit_json(tiny_model / "tokenizer_config.json", model_max_length=128)
    assert serving_reasons(tiny_model) == [
        "modelward.yaml serving.max_model_len 200 exceeds tokenizer_config.json "
        "model_max_length 128"
    ]


def test_tensor_parallel_size_that_does_not_divide_the_heads_is_refused(tiny_model: Path) -> None:
    assert serving_reasons(spec(tiny_model, tensor_parallel_size=3)) == [
        "modelward.yaml serving.tensor_parallel_size 3 does not divide config.json "
        "num_attention_heads 2",
        "modelward.yaml serving.tensor_parallel_size 3 neither divides nor is a multiple of "
        "config.json num_key_value_heads 2 (key/value heads are split or replicated across "
        "the shards)",
    ]
    assert serving_reasons(spec(tiny_model, tensor_parallel_size=2)) == []


def test_float16_for_a_model_type_vllm_runs_only_in_bf16_or_fp32_is_refused(
    tiny_model: Path,
) -> None:
    edit_json(tiny_model / "config.json", model_type="gemma2")
    [reason] = serving_reasons(spec(tiny_model, dtype="float16"))
    assert reason.startswith("modelward.yaml serving.dtype float16: config.json model_type gemma2")
    assert serving_reasons(spec(tiny_model, dtype="bfloat16")) == []


def test_a_model_without_a_tokenizer_is_refused(tiny_model: Path) -> None:
    (tiny_model / "tokenizer.json").unlink()
    [reason] = serving_reasons(spec(tiny_model))
    assert reason.startswith("modelward.yaml: the model has no tokenizer file (")


def test_generation_config_sampling_keys_vllm_refuses(tiny_model: Path) -> None:
    spec(tiny_model)
    edit_json(tiny_model / "generation_config.json", top_p=0, top_k="40", temperature=0.7)
    assert serving_reasons(tiny_model) == [
        "modelward.yaml serving.generation_config auto: generation_config.json top_p 0 must be "
        "a number in (0, 1]",
        "modelward.yaml serving.generation_config auto: generation_config.json top_k '40' must "
        "be an integer >= -1",
    ]
    # with the engine's defaults (generation_config: vllm) the file is not read
    assert serving_reasons(spec(tiny_model, generation_config="vllm")) == []


def test_a_spec_that_does_not_parse_is_refused(tiny_model: Path) -> None:
    (tiny_model / "modelward.yaml").write_text("version: 1\nengine: {name: vllm}\n")
    reasons = serving_reasons(tiny_model)
    assert "modelward.yaml: engine.version: Field required" in reasons
    assert "modelward.yaml: serving: Field required" in reasons


def test_the_one_verifier_refuses_it_naming_the_field(tiny_model: Path) -> None:
    """Push (the registry's verdict and push's preflight) and a worker's pull call this."""
    built = build_bundle(spec(tiny_model, max_model_len=512))
    policy = load_policy(Path(__file__).parents[2] / "policies" / "default.yaml")
    verdict = verify_bundle_result(
        built.manifest.raw, [], policy=policy, trust=TrustSet(), reader=DirectoryReader(tiny_model)
    )
    assert not verdict.allowed
    scan = [c.message for c in verdict.decision.checks if c.name == "scan"]
    assert scan == [
        "modelward.yaml: scan.serving: modelward.yaml serving.max_model_len 512 exceeds "
        "config.json max_position_embeddings 256"
    ]


def _init(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MODELWARD, "bundle", "init", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=os.environ,
    )


def test_bundle_init_refuses_a_model_it_cannot_serve_and_writes_nothing(tiny_model: Path) -> None:
    (tiny_model / "tokenizer.json").unlink()
    edit_json(tiny_model / "tokenizer_config.json", model_max_length=128)
    done = _init(tiny_model)
    assert done.returncode == 1, done.stderr
    assert "error: modelward.yaml: the model has no tokenizer file" in done.stderr
    assert (
        "error: modelward.yaml serving.max_model_len 256 exceeds tokenizer_config.json "
        "model_max_length 128" in done.stderr
    )
    assert "modelward.yaml not written" in done.stderr
    assert not (tiny_model / "modelward.yaml").exists()


@pytest.mark.parametrize("dtype", ["float32"])
def test_bundle_init_of_a_servable_model_writes_a_spec_the_scan_admits(
    tiny_model: Path, dtype: str
) -> None:
    done = _init(tiny_model)
    assert done.returncode == 0, done.stderr
    assert serving_reasons(tiny_model) == []


def test_a_config_json_that_is_not_an_object_cannot_be_checked_and_is_refused(
    tiny_model: Path,
) -> None:
    spec(tiny_model)
    (tiny_model / "config.json").write_text("[1]")
    assert serving_reasons(tiny_model) == [
        "config.json is not a JSON object: the serving configuration cannot be checked against it"
    ]
