"""``modelward pull`` / ``verify`` / ``boot`` refusals against a lying registry stand-in.

Each attack is served over real HTTP; the worker must refuse with the reason, exit 1, and
leave nothing materialized.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import forkserver
from tests.inprocess import run_modelward
from tests.loader.hostile_registry import HostileRegistry, Served, serve_dir
from tests.registry.conftest import MODELWARD, provenance_predicate

REPO = "acme/tiny"


@pytest.fixture
def hostile() -> Iterator[HostileRegistry]:
    reg = HostileRegistry()
    reg.start()
    yield reg
    reg.stop()


@pytest.fixture(scope="session")
def publisher_key() -> Any:
    from modelward.attest.keys import generate_private_key

    return generate_private_key()


@pytest.fixture
def publisher_pem(publisher_key: Any, tmp_path: Path) -> Path:
    from modelward.attest.keys import public_key_pem

    path = tmp_path / "publisher.pub.pem"
    path.write_bytes(public_key_pem(publisher_key.public_key()))
    return path


def signer(key: Any) -> Any:
    def sign(built: Any) -> list[bytes]:
        from modelward.attest.dsse import sign_envelope
        from modelward.attest.statement import PredicateType, make_statement

        payload = make_statement(
            REPO, built.manifest.digest, PredicateType.PROVENANCE, provenance_predicate(built)
        )
        return [sign_envelope(payload, [key])]

    return sign


def with_spec(model: Path) -> Path:
    from modelward.attest.spec import render_spec_template

    (model / "modelward.yaml").write_text(render_spec_template(dtype="float32", max_model_len=256))
    return model


def run(reg: HostileRegistry, *args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    """The real CLI against the hostile registry, which publishes no TUF metadata: aliases
    are taken on its word (``--unsigned-aliases``), and everything after is still checked."""
    env = {**os.environ, "MODELWARD_URL": reg.url, "MODELWARD_TOKEN": "worker-token"}
    unsigned = ["--unsigned-aliases"] if args[0] in ("pull", "boot", "verify") else []
    # a boot is about its process (signals, the engine's children): its own, forked
    if args[0] == "boot":
        return forkserver.run([*args, *unsigned, "--cache-dir", str(cache)], env, timeout=120)
    return run_modelward([*args, *unsigned, "--cache-dir", str(cache)], env)


def pull_prod(
    hostile: HostileRegistry, publisher_pem: Path, cache: Path, *flags: str
) -> subprocess.CompletedProcess[str]:
    """``modelward pull REPO@prod --public-key PEM [flags]`` into ``cache``."""
    return run(
        hostile, "pull", f"{REPO}@prod", *flags, "--public-key", str(publisher_pem), cache=cache
    )


def nothing_materialized(cache: Path) -> bool:
    bundles = cache / "bundles" / "sha256"
    return not bundles.exists() or not any(bundles.iterdir())


def test_pull_materializes_read_only_and_verify_passes(
    hostile: HostileRegistry,
    tiny_model: Path,
    publisher_key: Any,
    publisher_pem: Path,
    tmp_path: Path,
) -> None:
    served = serve_dir(with_spec(tiny_model), REPO, signer(publisher_key))
    hostile.add(served)
    cache = tmp_path / "cache"
    result = pull_prod(hostile, publisher_pem, cache)
    assert result.returncode == 0, result.stderr
    digest, directory = result.stdout.split()
    assert digest == served.digest
    root = Path(directory)
    assert root == cache / "bundles" / "sha256" / digest.removeprefix("sha256:")
    weights = root / "model.safetensors"
    assert weights.stat().st_mode & 0o222 == 0
    assert root.stat().st_mode & 0o222 == 0
    blob = cache / "blobs" / "sha256" / served.manifest_layer_hex("model.safetensors")
    assert weights.stat().st_ino == blob.stat().st_ino  # hardlinked into the cache
    assert run(hostile, "verify", directory, cache=cache).returncode == 0
    by_ref = run(hostile, "verify", f"{REPO}@prod", cache=cache)
    assert by_ref.returncode == 0, by_ref.stderr
    assert by_ref.stdout.startswith(f"ok {digest}")


@pytest.fixture
def flipped(
    hostile: HostileRegistry,
    tiny_model: Path,
    publisher_key: Any,
    publisher_pem: Path,
    tmp_path: Path,
) -> tuple[Served, Path, Path]:
    """(served bundle, cache, directory): pulled, then one byte of the weights flipped in
    the cache (the materialized file is a hardlink to the cached blob)."""
    served = serve_dir(with_spec(tiny_model), REPO, signer(publisher_key))
    hostile.add(served)
    cache = tmp_path / "cache"
    result = pull_prod(hostile, publisher_pem, cache)
    assert result.returncode == 0, result.stderr
    directory = Path(result.stdout.split()[1])
    flip_byte(directory / "model.safetensors")
    return served, cache, directory


def test_byte_flipped_in_cache_is_caught_by_verify(
    hostile: HostileRegistry, flipped: tuple[Served, Path, Path]
) -> None:
    _served, cache, directory = flipped
    check = run(hostile, "verify", str(directory), cache=cache)
    assert check.returncode == 1
    assert "model.safetensors" in check.stderr
    assert "digest mismatch" in check.stderr
    assert "pull --repair" in check.stderr


def test_pull_repair_downloads_a_corrupted_blob_again_and_rebuilds_the_tree(
    hostile: HostileRegistry, publisher_pem: Path, flipped: tuple[Served, Path, Path]
) -> None:
    served, cache, directory = flipped
    # a plain pull trusts the cache's sizes and keeps the materialized tree
    again = pull_prod(hostile, publisher_pem, cache)
    assert again.returncode == 0, again.stderr
    assert run(hostile, "verify", str(directory), cache=cache).returncode == 1
    repaired = pull_prod(hostile, publisher_pem, cache, "--repair")
    assert repaired.returncode == 0, repaired.stderr
    weights = "sha256:" + served.manifest_layer_hex("model.safetensors")
    assert f"repaired: cached blob {weights} did not match" in repaired.stderr
    assert repaired.stderr.count("repaired:") == 1  # the intact blobs were kept
    assert Path(repaired.stdout.split()[1]) == directory
    check = run(hostile, "verify", str(directory), cache=cache)
    assert check.returncode == 0, check.stderr
    assert directory.stat().st_mode & 0o222 == 0
    assert not [p for p in directory.parent.iterdir() if p.name.startswith(".")]
    # nothing left to repair: a second --repair changes nothing
    quiet = pull_prod(hostile, publisher_pem, cache, "--repair")
    assert quiet.returncode == 0, quiet.stderr
    assert "repaired:" not in quiet.stderr


def flip_byte(path: Path) -> None:
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def test_interrupted_download_resumes_with_range(
    hostile: HostileRegistry,
    tiny_model: Path,
    publisher_key: Any,
    publisher_pem: Path,
    tmp_path: Path,
) -> None:
    served = serve_dir(with_spec(tiny_model), REPO, signer(publisher_key))
    hostile.add(served)
    # an earlier pull was killed part-way through the weights: its partial file remains
    hexdigest = served.manifest_layer_hex("model.safetensors")
    blobs = tmp_path / "cache" / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    (blobs / f".{hexdigest}.partial").write_bytes(served.blobs["sha256:" + hexdigest][:4096])
    result = run(
        hostile,
        "pull",
        f"{REPO}@prod",
        "--public-key",
        str(publisher_pem),
        cache=tmp_path / "cache",
    )
    assert result.returncode == 0, result.stderr
    assert hostile.ranges == ["bytes=4096-"]
    assert not (blobs / f".{hexdigest}.partial").exists()


def refused(
    hostile: HostileRegistry, served: Served, pem: Path, cache: Path, *reasons: str
) -> None:
    hostile.add(served)
    result = run(hostile, "pull", f"{REPO}@prod", "--public-key", str(pem), cache=cache)
    assert result.returncode == 1, result.stdout + result.stderr
    for reason in reasons:
        assert reason in result.stderr, result.stderr
    assert nothing_materialized(cache)


def test_pickle_bundle_is_refused(
    hostile: HostileRegistry,
    tiny_model: Path,
    publisher_key: Any,
    publisher_pem: Path,
    tmp_path: Path,
) -> None:
    (tiny_model / "extra.pkl").write_bytes(pickle.dumps({"a": 1}))
    served = serve_dir(with_spec(tiny_model), REPO, signer(publisher_key))
    refused(hostile, served, publisher_pem, tmp_path / "cache", "extra.pkl")


def test_auto_map_bundle_is_refused(
    hostile: HostileRegistry,
    tiny_model: Path,
    publisher_key: Any,
    publisher_pem: Path,
    tmp_path: Path,
) -> None:
    config = json.loads((tiny_model / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilModel"}
    (tiny_model / "config.json").write_text(json.dumps(config))
    served = serve_dir(with_spec(tiny_model), REPO, signer(publisher_key))
    refused(hostile, served, publisher_pem, tmp_path / "cache", "config.json")


def test_unsigned_bundle_is_refused(
    hostile: HostileRegistry, tiny_model: Path, publisher_pem: Path, tmp_path: Path
) -> None:
    served = serve_dir(with_spec(tiny_model), REPO, lambda built: [])
    refused(hostile, served, publisher_pem, tmp_path / "cache", "refused by the worker's policy")


def test_untrusted_signer_is_refused(
    hostile: HostileRegistry, tiny_model: Path, publisher_pem: Path, tmp_path: Path
) -> None:
    from modelward.attest.keys import generate_private_key

    served = serve_dir(with_spec(tiny_model), REPO, signer(generate_private_key()))
    refused(hostile, served, publisher_pem, tmp_path / "cache", "refused by the worker's policy")


def test_quarantined_bundle_is_refused(
    hostile: HostileRegistry,
    tiny_model: Path,
    publisher_key: Any,
    publisher_pem: Path,
    tmp_path: Path,
) -> None:
    served = serve_dir(with_spec(tiny_model), REPO, signer(publisher_key))
    served.quarantined = True
    refused(hostile, served, publisher_pem, tmp_path / "cache", "quarantined", "malware found")


def test_manifest_not_matching_digest_is_refused(
    hostile: HostileRegistry,
    tiny_model: Path,
    publisher_key: Any,
    publisher_pem: Path,
    tmp_path: Path,
) -> None:
    served = serve_dir(with_spec(tiny_model), REPO, signer(publisher_key))
    served.manifest = served.manifest.replace(b'"schemaVersion":2', b'"schemaVersion": 2')
    refused(hostile, served, publisher_pem, tmp_path / "cache", "sha256:")


def test_tampered_blob_is_refused(
    hostile: HostileRegistry,
    tiny_model: Path,
    publisher_key: Any,
    publisher_pem: Path,
    tmp_path: Path,
) -> None:
    served = serve_dir(with_spec(tiny_model), REPO, signer(publisher_key))
    digest = next(iter(served.blobs))
    served.blobs[digest] = served.blobs[digest][:-1] + b"X"
    refused(hostile, served, publisher_pem, tmp_path / "cache", digest)


def test_pull_without_trust_is_refused(hostile: HostileRegistry, tmp_path: Path) -> None:
    result = run(hostile, "pull", f"{REPO}@prod", cache=tmp_path / "cache")
    assert result.returncode == 2  # usage: no trust flag given (docs/cli.md#exit-codes)
    assert "no trust given" in result.stderr


def test_boot_refuses_weakening_extra_argument(
    hostile: HostileRegistry, publisher_pem: Path, tmp_path: Path
) -> None:
    result = run(
        hostile,
        "boot",
        f"{REPO}@prod",
        "--public-key",
        str(publisher_pem),
        "--",
        "--trust-remote-code",
        "--tokenizer",
        "/tmp/evil",
        cache=tmp_path / "c",
    )
    assert result.returncode == 1
    assert "--trust-remote-code: would run code shipped with the model" in result.stderr
    assert "--tokenizer" in result.stderr
    assert hostile.ranges == []
    assert nothing_materialized(tmp_path / "c")


def test_boot_without_vllm_names_the_extra(
    hostile: HostileRegistry, publisher_pem: Path, tmp_path: Path
) -> None:
    shadow = tmp_path / "shadow" / "vllm"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'vllm'\")\n")
    env = {
        **os.environ,
        "MODELWARD_URL": hostile.url,
        "MODELWARD_TOKEN": "w",
        "PYTHONPATH": str(shadow.parent),
    }
    result = subprocess.run(
        [
            MODELWARD,
            "boot",
            f"{REPO}@prod",
            "--public-key",
            str(publisher_pem),
            "--unsigned-aliases",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 3  # the environment lacks the engine (docs/cli.md#exit-codes)
    assert "pip install 'modelward[vllm]'" in result.stderr


def test_boot_refuses_engine_version_other_than_pinned(
    hostile: HostileRegistry,
    tiny_model: Path,
    publisher_key: Any,
    publisher_pem: Path,
    tmp_path: Path,
) -> None:
    from modelward.attest.spec import render_spec_template

    (tiny_model / "modelward.yaml").write_text(
        render_spec_template(dtype="float32", engine_version="0.31.0")
    )
    hostile.add(serve_dir(tiny_model, REPO, signer(publisher_key)))
    result = run(
        hostile,
        "boot",
        f"{REPO}@prod",
        "--public-key",
        str(publisher_pem),
        cache=tmp_path / "cache",
    )
    assert result.returncode == 1
    assert "bundle pins vllm 0.31.0 but this worker runs vllm 0.32.0" in result.stderr
    assert [b["outcome"] for b in hostile.boots] == ["refused"]


def test_default_cache_dir_respects_xdg(tmp_path: Path) -> None:
    from modelward.loader.cache import default_cache_dir

    assert default_cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "modelward"
    assert default_cache_dir({}) == Path.home() / ".cache" / "modelward"


def test_an_alias_without_a_pinned_tuf_root_is_refused_with_the_hint(
    hostile: HostileRegistry, publisher_pem: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "MODELWARD_URL": hostile.url, "MODELWARD_TOKEN": "worker-token"}
    result = forkserver.run(
        [
            "pull",
            f"{REPO}@prod",
            "--public-key",
            str(publisher_pem),
            "--cache-dir",
            str(tmp_path / "c"),
        ],
        env,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert "needs a pinned TUF root (--trust-root root.json" in result.stderr
    assert "pulling by digest needs none" in result.stderr
    assert hostile.ranges == []  # refused before a byte of the bundle was asked for
    assert nothing_materialized(tmp_path / "c")
