"""Hardening: pinned engine arguments, hardened environment, refused extra arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelward.loader.errors import UnsafeArgument
from modelward.loader.hardening import (
    HARDENED_ENV,
    ServingConfig,
    check_extra_args,
    engine_kwargs,
    hardened_env,
    serve_argv,
)

CONFIG = ServingConfig(model_dir=Path("/bundles/x"), dtype="float32", max_model_len=256, seed=3)


def test_engine_kwargs_are_pinned_and_win_over_extra() -> None:
    kwargs = engine_kwargs(
        CONFIG,
        {
            "trust_remote_code": True,
            "model": "evil/model",
            "load_format": "pt",
            "enforce_eager": True,
        },
    )
    assert kwargs["trust_remote_code"] is False
    assert kwargs["model"] == kwargs["tokenizer"] == "/bundles/x"
    assert kwargs["load_format"] == "safetensors"
    assert kwargs["dtype"] == "float32"
    assert kwargs["max_model_len"] == 256
    assert kwargs["seed"] == 3
    assert kwargs["generation_config"] == "auto"
    assert kwargs["revision"] is None
    assert kwargs["enforce_eager"] is True


def test_hardened_env_sets_offline_and_removes_secrets() -> None:
    env = hardened_env(
        {
            "HF_TOKEN": "t",
            "HF_HUB_OFFLINE": "0",
            "VLLM_PLUGINS": "evil",
            "PATH": "/bin",
            "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
        }
    )
    assert "HF_TOKEN" not in env
    assert env["PATH"] == "/bin"
    for name, value in HARDENED_ENV.items():
        assert env[name] == value
    assert env["VLLM_PLUGINS"] == ""
    assert env["VLLM_ALLOW_INSECURE_SERIALIZATION"] == "0"
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "0"


@pytest.mark.parametrize(
    "args",
    [
        ["--trust-remote-code"],
        ["--trust_remote_code"],
        ["--model", "/tmp/other"],
        ["--model=/tmp/other"],
        ["--tokenizer", "/tmp/tok"],
        ["--load-format", "pt"],
        ["--load-format=dummy"],
        ["--revision", "main"],
        ["--download-dir", "/tmp/d"],
        ["--dtype", "float16"],
        ["--enable-lora"],
        ["--hf-overrides", "{}"],
        ["--some-unknown-flag"],
        ["/tmp/other-model"],
    ],
)
def test_weakening_extra_argument_is_refused(args: list[str]) -> None:
    with pytest.raises(UnsafeArgument) as info:
        check_extra_args(args, serve=True)
    assert args[0] in str(info.value)


def test_every_refused_argument_is_listed() -> None:
    with pytest.raises(UnsafeArgument) as info:
        check_extra_args(
            ["--trust-remote-code", "--enforce-eager", "--tokenizer", "x"], serve=False
        )
    assert [p[0] for p in info.value.problems] == ["--trust-remote-code", "--tokenizer"]


def test_allowed_extra_arguments_map_to_engine_keywords() -> None:
    assert check_extra_args(
        ["--enforce-eager", "--max-num-seqs", "4", "--load-format", "safetensors"], serve=False
    ) == {"enforce_eager": True, "max_num_seqs": 4}


def test_flag_cannot_hide_behind_a_value() -> None:
    with pytest.raises(UnsafeArgument) as info:
        check_extra_args(["--served-model-name", "--trust-remote-code"], serve=True)
    assert [p[0] for p in info.value.problems] == ["--served-model-name", "--trust-remote-code"]


def test_abbreviated_flag_is_refused() -> None:
    with pytest.raises(UnsafeArgument, match="not on the allowlist"):
        check_extra_args(["--trust-remote"], serve=False)


def test_server_only_argument_needs_serve() -> None:
    with pytest.raises(UnsafeArgument):
        check_extra_args(["--served-model-name", "m"], serve=False)
    assert check_extra_args(["--served-model-name", "m"], serve=True) == {}


def test_serve_argv_is_pinned() -> None:
    argv = serve_argv(CONFIG, "python", "127.0.0.1", 8001, ["--enforce-eager"])
    assert "--trust-remote-code" not in argv
    assert argv[argv.index("--load-format") + 1] == "safetensors"
    assert argv[argv.index("--model") + 1] == "/bundles/x"
    assert argv[argv.index("--tokenizer") + 1] == "/bundles/x"
    assert argv[-1] == "--enforce-eager"


def test_serving_config_rejects_unknown_generation_config() -> None:
    with pytest.raises(ValueError, match="generation_config"):
        ServingConfig(model_dir=Path("/x"), dtype="float32", generation_config="/tmp/gen")
