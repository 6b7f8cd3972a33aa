"""``--json`` on the loader's commands, through the real ``modelward`` CLI against a real
registry (``modelward serve``, SQLite): one JSON document on stdout, checked against the
shapes docs/loader.md#json-output documents; every message on stderr.

(``boot --json`` and ``replay --json`` need vLLM: tests/loader/test_boot_vllm.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import forkserver
from tests.loader.test_pull import flip_byte
from tests.registry.conftest import (
    Actor,
    Registry,
    make_bundle_dir,
    new_publisher,
    start_registry,
)

DIGEST = {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}
STRINGS = {"type": "array", "items": {"type": "string"}}
NULLABLE_STRING = {"type": ["string", "null"]}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    """An object with exactly these keys, all required (a new key is a deliberate change)."""
    return {
        "type": "object",
        "properties": properties,
        "required": sorted(properties),
        "additionalProperties": False,
    }


DECISION = _object(
    {
        "allowed": {"type": "boolean"},
        "checks": {
            "type": "array",
            "items": _object(
                {
                    "name": {"type": "string"},
                    "passed": {"type": "boolean"},
                    "message": {"type": "string"},
                }
            ),
        },
        "signers": {
            "type": "array",
            "items": _object(
                {
                    "name": {"type": "string"},
                    "kind": {"type": "string"},
                    "detail": {"type": "string"},
                }
            ),
        },
    }
)
PULL_SCHEMA = _object(
    {
        "reference": {"type": "string"},
        "repo": {"type": "string"},
        "digest": DIGEST,
        "directory": {"type": "string"},
        "decision": DECISION,
        "statements": {
            "type": "array",
            "items": _object(
                {
                    "kind": {"type": "string"},
                    "predicate_type": {"type": "string"},
                    "signers": STRINGS,
                }
            ),
        },
        "ignored": {
            "type": "array",
            "items": _object(
                {
                    "label": {"type": "string"},
                    "sha256": {"type": "string"},
                    "reason": {"type": "string"},
                }
            ),
        },
        "repaired": {"type": "array", "items": DIGEST},
    }
)
VERIFY_SCHEMA = _object(
    {
        "target": {"type": "string"},
        "digest": DIGEST,
        "directory": {"type": "string"},
        "files": {"type": "integer", "minimum": 0},
        "verified": {"type": "boolean"},
        "error": NULLABLE_STRING,
    }
)
BASELINE_SHOW_SCHEMA = _object(
    {
        "reference": {"type": "string"},
        "repo": {"type": "string"},
        "digest": DIGEST,
        "baselines": {
            "type": "array",
            "items": _object(
                {
                    "fingerprint_id": DIGEST,
                    "aggregate": DIGEST,
                    "probes": {"type": "integer", "minimum": 1},
                    "batch_invariant": {"type": "boolean"},
                    "batch_divergences": {
                        "type": "array",
                        "items": _object(
                            {"probe": {"type": "string"}, "index": {"type": "integer"}}
                        ),
                    },
                    "engine": NULLABLE_STRING,
                    "dtype": NULLABLE_STRING,
                    "device": _object({"type": NULLABLE_STRING, "name": NULLABLE_STRING}),
                    "entrypoint": NULLABLE_STRING,
                    "fingerprint": {"type": "object"},
                    "signed_by": STRINGS,
                }
            ),
        },
        "skipped": STRINGS,
    }
)


def check(document: Any, schema: dict[str, Any]) -> None:
    import jsonschema

    jsonschema.validate(document, schema)


@dataclass
class World:
    reg: Registry
    worker: Actor
    repo: str
    digest: str
    pem: Path
    base: Path

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "MODELWARD_URL": self.reg.url, "MODELWARD_TOKEN": self.worker.token}
        # the JSON shapes, not alias signing (tests/tuf): the registry's word names canary
        unsigned = ["--unsigned-aliases"] if args[0] in ("verify", "baseline") else []
        return forkserver.run([*args, *unsigned], env, timeout=120)

    def pull(self, cache: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.cli(
            "pull",
            f"{self.repo}@canary",
            "--public-key",
            str(self.pem),
            "--unsigned-aliases",
            "--cache-dir",
            str(cache),
            *extra,
        )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    from modelward.attest.keys import public_key_pem

    base = tmp_path_factory.mktemp("json")
    reg = start_registry("sqlite", base / "registry", None)
    try:
        publisher = new_publisher(reg)
        repo = reg.repo(publisher)
        digest = publisher.actor.client.push(
            make_bundle_dir(base / "model"), repo, sign=publisher.sign, alias="canary"
        ).digest
        pem = base / "publisher.pem"
        pem.write_bytes(public_key_pem(publisher.key.public_key()))
        yield World(reg, reg.actor("reader"), repo, digest, pem, base)
    finally:
        reg.close()
        reg.server.stop()


def test_pull_json_is_one_document_on_stdout(world: World, tmp_path: Path) -> None:
    result = world.pull(tmp_path / "cache", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)  # the whole of stdout is the one document
    check(document, PULL_SCHEMA)
    assert document["digest"] == world.digest
    assert document["repo"] == world.repo
    assert document["reference"] == f"{world.repo}@canary"
    assert Path(document["directory"]) == (
        tmp_path / "cache" / "bundles" / "sha256" / world.digest[7:]
    )
    assert Path(document["directory"], "model.safetensors").is_file()
    assert document["decision"]["allowed"] is True
    assert any(
        s["predicate_type"].startswith("https://slsa.dev/provenance")
        for s in document["statements"]
    )
    assert document["repaired"] == []


def test_pull_json_lists_repaired_blobs_and_keeps_messages_on_stderr(
    world: World, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    assert world.pull(cache).returncode == 0
    directory = cache / "bundles" / "sha256" / world.digest[7:]
    flip_byte(directory / "model.safetensors")
    result = world.pull(cache, "--repair", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    check(document, PULL_SCHEMA)
    assert len(document["repaired"]) == 1
    assert "repaired: cached blob" in result.stderr
    assert "repaired: cached blob" not in result.stdout


def test_pull_json_refusal_prints_nothing_on_stdout(world: World, tmp_path: Path) -> None:
    result = world.cli("pull", f"{world.repo}@canary", "--cache-dir", str(tmp_path), "--json")
    assert result.returncode == 2  # usage: no trust flag given (docs/cli.md#exit-codes)
    assert result.stdout == ""
    assert "no trust given" in result.stderr


def test_verify_json_of_directory_and_reference(world: World, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    pulled = json.loads(world.pull(cache, "--json").stdout)
    by_dir = world.cli("verify", pulled["directory"], "--json")
    assert by_dir.returncode == 0, by_dir.stderr
    document = json.loads(by_dir.stdout)
    check(document, VERIFY_SCHEMA)
    assert document["verified"] is True
    assert document["error"] is None
    assert document["digest"] == world.digest
    assert document["files"] == 2
    by_ref = world.cli("verify", f"{world.repo}@canary", "--cache-dir", str(cache), "--json")
    assert by_ref.returncode == 0, by_ref.stderr
    assert json.loads(by_ref.stdout) == {**document, "target": f"{world.repo}@canary"}


def test_verify_json_reports_a_flipped_byte_and_exits_1(world: World, tmp_path: Path) -> None:
    pulled = json.loads(world.pull(tmp_path / "cache", "--json").stdout)
    flip_byte(Path(pulled["directory"]) / "model.safetensors")
    result = world.cli("verify", pulled["directory"], "--json")
    assert result.returncode == 1
    document = json.loads(result.stdout)
    check(document, VERIFY_SCHEMA)
    assert document["verified"] is False
    assert "model.safetensors" in document["error"]
    assert "pull --repair" in result.stderr


def _attach_baseline(world: World, key_path: Path) -> tuple[str, str]:
    """A signed baseline statement by a registered worker key; (fingerprint id, aggregate)."""
    from modelward.attest.keys import generate_private_key, public_key_pem, save_private_key
    from modelward.attest.statement import PredicateType
    from modelward.loader.baseline import Baseline, ProbeResult, aggregate_hash, token_hash
    from modelward.loader.fingerprint import Fingerprint, fingerprint_id
    from modelward.loader.statements import load_worker_key, sign_predicate

    key = generate_private_key()
    save_private_key(key, key_path)
    key_path.with_name(key_path.name + ".pub").write_bytes(public_key_pem(key.public_key()))
    world.reg.admin.register_key(
        public_key_pem(key.public_key()).decode(), principal=world.worker.name
    )
    data = {
        "engine": {"name": "vllm", "version": "0.32.0"},
        "dtype": "float32",
        "device": {"type": "cpu", "name": "test-cpu", "count": 1},
        "entrypoint": "llm",
    }
    probes = tuple(
        ProbeResult(f"p0{i}", f"prompt {i}", (i, 7, 11), token_hash((i, 7, 11))) for i in range(3)
    )
    baseline = Baseline(
        world.digest,
        Fingerprint(data, fingerprint_id(data)),
        probes,
        aggregate_hash(probes),
        True,
        (),
        16,
        0,
    )
    envelope = sign_predicate(
        load_worker_key(key_path),
        world.repo,
        world.digest,
        PredicateType.BASELINE,
        baseline.to_predicate(),
    )
    world.worker.client.add_attestation(world.repo, world.digest, envelope)
    return baseline.fingerprint.id, baseline.aggregate


def test_baseline_show_json_lists_trusted_baselines(world: World, tmp_path: Path) -> None:
    fingerprint, aggregate = _attach_baseline(world, tmp_path / "worker.key")
    result = world.cli(
        "baseline",
        "show",
        f"{world.repo}@canary",
        "--worker-public-key",
        str(tmp_path / "worker.key.pub"),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    check(document, BASELINE_SHOW_SCHEMA)
    assert document["digest"] == world.digest
    [entry] = [b for b in document["baselines"] if b["fingerprint_id"] == fingerprint]
    assert entry["aggregate"] == aggregate
    assert entry["probes"] == 3
    assert entry["engine"] == "0.32.0"
    assert entry["device"] == {"type": "cpu", "name": "test-cpu"}
    assert len(entry["signed_by"]) == 1
    # another worker's key trusts none of them: an empty list, still one document
    other = world.cli(
        "baseline", "show", f"{world.repo}@canary", "--worker-public-key", str(world.pem), "--json"
    )
    assert other.returncode == 0, other.stderr
    assert json.loads(other.stdout)["baselines"] == []
