"""``modelward bundle import-hf`` offline, from a Hugging Face cache laid out by the test."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO = "example-org/tiny-llama"


def _run(*args: str | Path, env_extra: dict[str, str] | None = None):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.update(env_extra or {})
    return subprocess.run(
        [str(REPO_ROOT / ".venv" / "bin" / "modelward"), "bundle", "import-hf", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def _hf_cache(cache: Path, files: dict[str, bytes], commit: str = COMMIT) -> Path:
    """models--org--name/{refs/main, blobs/<sha>, snapshots/<commit>/<file> -> blob}."""
    storage = cache / ("models--" + REPO.replace("/", "--"))
    (storage / "refs").mkdir(parents=True)
    (storage / "refs" / "main").write_text(commit)
    (storage / "blobs").mkdir()
    snapshot = storage / "snapshots" / commit
    for name, data in files.items():
        blob = storage / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return cache


@pytest.fixture
def cache(tiny_model_master: Path, tmp_path: Path) -> Path:
    files = {p.name: p.read_bytes() for p in tiny_model_master.iterdir() if p.is_file()}
    files["modeling_evil.py"] = b"import os\nos.system('echo pwned')\n"
    files["pytorch_model.bin"] = b"\x80\x04K\x01."
    return _hf_cache(tmp_path / "hf-cache", files)


def test_import_branch_resolves_to_commit(cache, tiny_model_master, tmp_path):
    out = tmp_path / "bundle"
    result = _run(REPO, "--revision", "main", "--out", out, "--cache-dir", cache, "--offline")
    assert result.returncode == 0, result.stdout + result.stderr
    record = json.loads((out / ".modelward" / "source.json").read_text())
    assert record["commit"] == COMMIT
    assert record["requested_revision"] == "main"
    assert record["uri"] == f"hf://{REPO}"
    imported = sorted(p.name for p in out.iterdir() if p.is_file())
    expected = sorted(p.name for p in tiny_model_master.iterdir() if p.is_file())
    assert imported == expected  # the .py and .bin were never fetched
    assert not (out / "modeling_evil.py").exists()
    assert not (out / "pytorch_model.bin").is_symlink()
    assert not any(p.is_symlink() for p in out.rglob("*"))
    assert f"--source-revision {COMMIT}" in result.stdout
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


def test_import_by_commit(cache, tmp_path):
    out = tmp_path / "bundle"
    result = _run(REPO, "--revision", COMMIT, "--out", out, "--cache-dir", cache, "--offline")
    assert result.returncode == 0, result.stderr
    assert json.loads((out / ".modelward" / "source.json").read_text())["commit"] == COMMIT


def test_import_unknown_revision_fails_and_leaves_nothing(cache, tmp_path):
    out = tmp_path / "bundle"
    result = _run(REPO, "--revision", "v9", "--out", out, "--cache-dir", cache, "--offline")
    assert result.returncode == 1
    assert f"hf://{REPO}@v9: cannot fetch" in result.stderr
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf-cache"]


def test_import_refuses_a_branch_that_is_not_a_commit(tmp_path):
    cache = _hf_cache(tmp_path / "hf-cache", {"config.json": b"{}"}, commit="not-a-commit")
    out = tmp_path / "bundle"
    result = _run(REPO, "--revision", "main", "--out", out, "--cache-dir", cache, "--offline")
    assert result.returncode == 1
    assert "did not resolve to a 40-hex commit" in result.stderr
    assert not out.exists()


def test_import_refuses_what_the_scanner_refuses(tmp_path):
    config = b'{"model_type": "llama", "auto_map": {"AutoModel": "modeling_evil.Evil"}}'
    cache = _hf_cache(tmp_path / "hf-cache", {"config.json": config})
    out = tmp_path / "bundle"
    result = _run(REPO, "--revision", "main", "--out", out, "--cache-dir", cache, "--offline")
    assert result.returncode == 1
    assert "the scanner refused the snapshot" in result.stderr
    assert "config.json" in result.stderr
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf-cache"]


def test_import_refuses_existing_output(cache, tmp_path):
    out = tmp_path / "bundle"
    out.mkdir()
    (out / "x").write_text("x")
    result = _run(REPO, "--revision", "main", "--out", out, "--cache-dir", cache, "--offline")
    assert result.returncode == 2
    assert "exists and is not an empty directory" in result.stderr


def test_import_bad_repo_id_is_usage_error(cache, tmp_path):
    result = _run("../etc", "--revision", "main", "--out", tmp_path / "b", "--offline")
    assert result.returncode == 2


def test_imported_commit_flows_into_signed_provenance(cache, tmp_path):
    out = tmp_path / "bundle"
    assert (
        _run(REPO, "--revision", "main", "--out", out, "--cache-dir", cache, "--offline").returncode
        == 0
    )
    record = json.loads((out / ".modelward" / "source.json").read_text())
    mw = str(REPO_ROOT / ".venv" / "bin" / "modelward")

    def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [mw, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
        )

    assert run("key", "generate", "--out", tmp_path / "k.pem").returncode == 0
    sig = tmp_path / "provenance.json"
    result = run(
        "bundle", "sign", out, "--key", tmp_path / "k.pem", "--out", sig,
        "--source", record["uri"], "--source-revision", record["commit"],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for allowed, code in (("hf://example-org/*", 0), ("hf://someone-else/*", 1)):
        policy = tmp_path / "policy.yaml"
        policy.write_text(
            "version: 1\nsigners: {keys: [{name: k, path: k.pem.pub}]}\n"
            f"sources: ['{allowed}']\n"
        )
        result = run("bundle", "verify", out, "-s", sig, "--policy", policy)
        assert result.returncode == code, result.stdout + result.stderr
    assert f"source 'hf://{REPO}' is not allowed" in result.stderr
