"""``modelward bundle init | digest | manifest`` run as real subprocesses."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from modelward.attest.manifest import WEIGHT_CONFIG_MEDIA_TYPE, build_bundle, parse_manifest
from modelward.attest.spec import SPEC_FILENAME, load_spec

MODELWARD = str(Path(sys.executable).parent / "modelward")


def run(*args: str, stderr: int = subprocess.PIPE) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "COLUMNS": "200", "TERM": "xterm-256color"}
    return subprocess.run(
        [MODELWARD, *args], check=False, stdout=subprocess.PIPE, stderr=stderr, env=env, timeout=120
    )


def test_digest_prints_only_the_digest(tiny_model: Path) -> None:
    result = run("bundle", "digest", str(tiny_model))
    assert result.returncode == 0, result.stderr
    assert result.stdout == build_bundle(tiny_model).manifest.digest.encode() + b"\n"
    assert result.stderr == b""  # no progress bar when stderr is not a terminal


def test_digest_is_the_same_anywhere(tiny_model: Path, tmp_path: Path) -> None:
    elsewhere = shutil.copytree(tiny_model, tmp_path / "some" / "other" / "place")
    first = run("bundle", "digest", str(tiny_model))
    second = run("bundle", "digest", str(elsewhere))
    assert first.stdout == second.stdout
    assert first.stdout.startswith(b"sha256:")


def test_manifest_prints_the_exact_bytes_the_digest_names(tiny_model: Path) -> None:
    result = run("bundle", "manifest", str(tiny_model))
    assert result.returncode == 0, result.stderr
    manifest = parse_manifest(result.stdout)
    digest = run("bundle", "digest", str(tiny_model)).stdout.decode().strip()
    assert "sha256:" + hashlib.sha256(result.stdout).hexdigest() == digest
    assert [layer.path for layer in manifest.layers] == sorted(p.name for p in tiny_model.iterdir())


def test_manifest_config_option_prints_the_config_blob(tiny_model: Path) -> None:
    manifest = parse_manifest(run("bundle", "manifest", str(tiny_model)).stdout)
    config = run("bundle", "manifest", "--config", str(tiny_model)).stdout
    assert "sha256:" + hashlib.sha256(config).hexdigest() == manifest.config.digest
    assert json.loads(config)["config"]["architecture"] == "LlamaForCausalLM"


def test_progress_bar_only_on_a_terminal(tiny_model: Path) -> None:
    controller, terminal = pty.openpty()
    try:
        result = run("bundle", "digest", str(tiny_model), stderr=terminal)
        os.close(terminal)
        drawn = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(controller)
    assert result.returncode == 0
    assert result.stdout == build_bundle(tiny_model).manifest.digest.encode() + b"\n"
    assert b"hashing" in drawn


def test_tree_violations_are_all_printed(tiny_model: Path) -> None:
    (tiny_model / "passwd").symlink_to("/etc/passwd")
    (tiny_model / "run.sh").write_bytes(b"#!/bin/sh\n")
    (tiny_model / "run.sh").chmod(0o755)
    for command in ("digest", "manifest"):
        result = run("bundle", command, str(tiny_model))
        assert result.returncode == 1
        assert result.stdout == b""
        err = result.stderr.decode()
        assert str(tiny_model) in err
        assert "passwd: tree.symlink" in err
        assert "run.sh: tree.executable" in err


def test_not_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    result = run("bundle", "digest", str(tmp_path / "nope"))
    assert result.returncode == 2
    assert f"{tmp_path / 'nope'}: not a directory" in result.stderr.decode()


def test_empty_bundle_is_refused(tmp_path: Path) -> None:
    result = run("bundle", "digest", str(tmp_path))
    assert result.returncode == 1
    assert "bundle.empty" in result.stderr.decode()


def test_init_writes_a_spec_from_config_json(tiny_model: Path) -> None:
    before = run("bundle", "digest", str(tiny_model)).stdout
    result = run("bundle", "init", str(tiny_model))
    assert result.returncode == 0, result.stderr
    target = tiny_model / SPEC_FILENAME
    assert str(target) in result.stdout.decode()
    assert target.stat().st_mode & 0o777 == 0o644
    text = target.read_text()
    assert "LlamaForCausalLM" in text
    spec = load_spec(text.encode())
    hf = json.loads((tiny_model / "config.json").read_text())
    assert spec.serving.dtype == hf.get("dtype", hf.get("torch_dtype")) == "float32"
    assert spec.serving.max_model_len == hf["max_position_embeddings"]
    assert spec.engine.version == "0.32.0"
    assert [p.name for p in tiny_model.iterdir() if p.name.startswith(".")] == []
    # the spec is part of the bundle: a new digest, a config layer
    assert run("bundle", "digest", str(tiny_model)).stdout != before
    layer = build_bundle(tiny_model).manifest.layer(SPEC_FILENAME)
    assert layer.media_type == WEIGHT_CONFIG_MEDIA_TYPE


def test_init_never_overwrites_without_force(tiny_model: Path) -> None:
    target = tiny_model / SPEC_FILENAME
    target.write_text("# mine\n")
    result = run("bundle", "init", str(tiny_model))
    assert result.returncode == 1
    assert f"{target}: already exists" in result.stderr.decode()
    assert "--force" in result.stderr.decode()
    assert target.read_text() == "# mine\n"
    forced = run("bundle", "init", "--force", str(tiny_model))
    assert forced.returncode == 0, forced.stderr
    load_spec(target.read_bytes())


def test_init_does_not_follow_or_replace_a_symlink_without_force(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / SPEC_FILENAME).symlink_to(victim)
    assert run("bundle", "init", str(bundle)).returncode == 1
    assert run("bundle", "init", "--force", str(bundle)).returncode == 0
    assert victim.read_text() == "keep\n"
    assert not (bundle / SPEC_FILENAME).is_symlink()


def test_init_without_config_json_uses_auto(tmp_path: Path) -> None:
    result = run("bundle", "init", str(tmp_path))
    assert result.returncode == 0, result.stderr
    spec = load_spec((tmp_path / SPEC_FILENAME).read_bytes())
    assert spec.serving.dtype == "auto"
    assert spec.serving.max_model_len is None


def test_init_with_broken_config_json_warns_and_uses_defaults(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"dtype": ')
    result = run("bundle", "init", str(tmp_path))
    assert result.returncode == 0
    assert "warning" in result.stderr.decode()
    assert "config.json" in result.stderr.decode()
    assert load_spec((tmp_path / SPEC_FILENAME).read_bytes()).serving.dtype == "auto"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "int4"])
def test_init_reads_the_dtype(tmp_path: Path, dtype: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": dtype}))
    assert run("bundle", "init", str(tmp_path)).returncode == 0
    spec = load_spec((tmp_path / SPEC_FILENAME).read_bytes())
    assert spec.serving.dtype == (dtype if dtype != "int4" else "auto")


def test_init_on_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    result = run("bundle", "init", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert "not a directory" in result.stderr.decode()
