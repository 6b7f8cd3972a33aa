"""What ``boot`` and ``replay`` settle before vLLM is imported, and the boot steps that need
no engine: the CPU KV-cache choice and a signed baseline the registry refuses.

The CLI runs as a subprocess with ``PYTHONPROFILEIMPORTTIME=1``: its import trace on stderr
shows that neither vLLM nor torch was imported before the refusal (no timing asserted).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelward.loader.errors import InputError
from modelward.loader.hardening import KvCacheChoice, allowed_extra_args, cpu_kv_cache
from tests.registry.conftest import (
    MODELWARD,
    Registry,
    free_port,
    make_bundle_dir,
    new_publisher,
    start_registry,
)

GIB = 1 << 30
_IMPORT = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)\s*$")


def run_traced(
    *args: str,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``modelward ARGS`` with an import trace; (the result, the modules imported).

    The registry URL is a closed loopback port: a command that got as far as the registry
    would fail with a connection error, not with the refusal the tests expect.
    """
    full = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    full.update(
        {
            "MODELWARD_URL": f"http://127.0.0.1:{free_port()}",
            "MODELWARD_TOKEN": "unused",
            "PYTHONPROFILEIMPORTTIME": "1",
            **(env or {}),
        }
    )
    result = subprocess.run(
        [MODELWARD, *args], capture_output=True, text=True, env=full, timeout=120, check=False
    )
    modules = {m.group(1) for m in map(_IMPORT.match, result.stderr.splitlines()) if m}
    # importlib.import_module (the lazy CLI) is not traced; the import statements it runs are
    assert "modelward.cli.trust_options" in modules, "no import trace on stderr"
    message = "\n".join(
        line for line in result.stderr.splitlines() if not line.startswith("import time:")
    )
    return subprocess.CompletedProcess(
        result.args, result.returncode, result.stdout, message
    ), modules


def heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] in {"vllm", "torch", "transformers"}}


def test_unknown_engine_argument_is_refused_before_vllm_is_imported() -> None:
    result, modules = run_traced(
        "boot", "acme/tiny@canary", "--public-key", "pub.pem", "--", "--enforce-eager", "--foo", "3"
    )
    assert result.returncode == 1
    assert "--foo: not on the allowlist of extra engine arguments" in result.stderr
    assert "allowed extra engine arguments: --enforce-eager" in result.stderr
    assert "--max-num-seqs" in result.stderr
    assert heavy(modules) == set()


def test_weakening_engine_argument_is_refused_before_vllm_is_imported() -> None:
    result, modules = run_traced(
        "boot", "acme/tiny@canary", "--public-key", "pub.pem", "--", "--trust-remote-code"
    )
    assert result.returncode == 1
    assert "--trust-remote-code: would run code shipped with the model" in result.stderr
    assert heavy(modules) == set()


def test_server_only_argument_without_serve_names_serve_in_the_allowlist() -> None:
    result, modules = run_traced(
        "boot", "acme/tiny@canary", "--public-key", "pub.pem", "--", "--api-key", "k"
    )
    assert result.returncode == 1
    assert "--api-key: only means something with --serve" in result.stderr
    assert "with --serve also: " in result.stderr
    assert heavy(modules) == set()


def test_malformed_kv_cache_variable_is_refused_before_vllm_is_imported() -> None:
    result, modules = run_traced(
        "boot",
        "acme/tiny@canary",
        "--public-key",
        "pub.pem",
        env={"VLLM_CPU_KVCACHE_SPACE": "lots"},
    )
    assert result.returncode == 2
    assert "VLLM_CPU_KVCACHE_SPACE='lots': must be a whole number of GiB" in result.stderr
    assert heavy(modules) == set()


def test_zero_kv_cache_option_is_a_usage_error() -> None:
    result, modules = run_traced("boot", "acme/tiny@canary", "--cpu-kvcache-space", "0")
    assert result.returncode == 2
    assert "--cpu-kvcache-space" in result.stderr
    assert heavy(modules) == set()


def test_malformed_replay_request_is_refused_before_vllm_is_imported(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "a", "prompt": "hi"}\n{"id": "b", "promt": "typo"}\n')
    result, modules = run_traced(
        "replay", str(requests), "--bundle", "acme/tiny@canary", "--public-key", "pub.pem"
    )
    assert result.returncode == 2
    assert f"{requests}:2: unknown field(s) promt" in result.stderr
    assert heavy(modules) == set()


def test_replay_expected_file_with_wrong_hash_is_refused_before_vllm(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "a", "prompt": "hi"}\n')
    expected = tmp_path / "expected.jsonl"
    expected.write_text(json.dumps({"id": "a", "token_ids": [1, 2], "sha256": "sha256:00"}) + "\n")
    result, modules = run_traced(
        "replay", str(requests), "--bundle", "acme/tiny@canary", "--expected", str(expected)
    )
    assert result.returncode == 2
    assert f"{expected}:1: 'sha256' does not match 'token_ids'" in result.stderr
    assert heavy(modules) == set()


def test_replay_against_and_expected_together_is_a_usage_error(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "a", "prompt": "hi"}\n')
    result, modules = run_traced(
        "replay",
        str(requests),
        "--bundle",
        "acme/tiny@canary",
        "--against",
        "acme/tiny@prod",
        "--expected",
        str(requests),
    )
    assert result.returncode == 2
    assert "give at most one of --against and --expected" in result.stderr
    assert heavy(modules) == set()


def test_replay_engine_arguments_pass_the_boot_allowlist_before_vllm(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "a", "prompt": "hi"}\n')
    result, modules = run_traced(
        "replay",
        str(requests),
        "--bundle",
        "acme/tiny@canary",
        "--public-key",
        "pub.pem",
        "--",
        "--enforce-eager",
        "--trust-remote-code",
    )
    assert result.returncode == 1
    assert "--trust-remote-code: would run code shipped with the model" in result.stderr
    assert "allowed extra engine arguments: --enforce-eager" in result.stderr
    assert heavy(modules) == set()


def test_replay_sequential_without_against_is_a_usage_error(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "a", "prompt": "hi"}\n')
    result, modules = run_traced(
        "replay", str(requests), "--bundle", "acme/tiny@canary", "--sequential"
    )
    assert result.returncode == 2
    assert "--sequential needs --against" in result.stderr
    assert heavy(modules) == set()


def test_replay_expected_text_missing_for_a_tool_call_request_is_named(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "a", "prompt": "hi", "tool_call_format": "hermes"}\n')
    expected = tmp_path / "expected.jsonl"
    expected.write_text(json.dumps({"id": "a", "token_ids": [1, 2]}) + "\n")
    result, modules = run_traced(
        "replay", str(requests), "--bundle", "acme/tiny@canary", "--expected", str(expected)
    )
    assert result.returncode == 2
    assert f"{expected}:1: request 'a' declares a side-effect log" in result.stderr
    assert heavy(modules) == set()


# -- the CPU KV-cache choice -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("available", "gib"),
    [
        (64 * GIB, 4),  # plenty: the 4 GiB cap
        (10 * GIB, 2),  # 25% of 10 GiB, rounded down
        (2 * GIB, 1),  # never below 1 GiB
        (None, 4),  # memory unknown: vLLM's own default size
    ],
)
def test_cpu_kv_cache_default_is_min_of_4_gib_and_a_quarter_of_available_memory(
    available: int | None, gib: int
) -> None:
    choice = cpu_kv_cache({}, option=None, available_bytes=available)
    assert (choice.gib, choice.source) == (gib, "default")
    assert "--cpu-kvcache-space" in choice.describe()
    assert "VLLM_CPU_KVCACHE_SPACE" in choice.describe()


def test_cpu_kv_cache_option_wins_over_the_variable_which_wins_over_the_default() -> None:
    env = {"VLLM_CPU_KVCACHE_SPACE": "3"}
    assert cpu_kv_cache(env, option=2, available_bytes=64 * GIB) == KvCacheChoice(2, "option")
    assert cpu_kv_cache(env, option=None, available_bytes=64 * GIB) == KvCacheChoice(3, "env")


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "lots"])
def test_cpu_kv_cache_variable_that_is_not_whole_gib_is_refused(value: str) -> None:
    with pytest.raises(InputError, match="VLLM_CPU_KVCACHE_SPACE"):
        cpu_kv_cache({"VLLM_CPU_KVCACHE_SPACE": value}, option=None, available_bytes=None)


def test_engine_failure_hint_names_the_setting() -> None:
    hint = KvCacheChoice(4, "default").failure_hint()
    assert "4 GiB" in hint
    assert "--cpu-kvcache-space" in hint
    assert "VLLM_CPU_KVCACHE_SPACE" in hint


def test_allowlist_without_serve_leaves_out_server_only_arguments() -> None:
    assert "--api-key" not in allowed_extra_args(serve=False)
    assert "--api-key" in allowed_extra_args(serve=True)
    assert "--enforce-eager" in allowed_extra_args(serve=False)


# -- --help ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "command", [["pull"], ["verify"], ["boot"], ["replay"], ["baseline", "show"]]
)
def test_loader_help_shows_no_python_type_metavars(command: list[str]) -> None:
    result = subprocess.run(
        [MODELWARD, *command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "100"},
    )
    assert result.returncode == 0, result.stderr
    for bad in ("<bool>", "<list[", "list[Path]"):
        assert bad not in result.stdout, f"{bad} in `modelward {' '.join(command)} --help`"
    assert "--json" in result.stdout


def test_replay_help_documents_its_trust_flags() -> None:
    result = subprocess.run(
        [MODELWARD, "replay", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    text = " ".join(result.stdout.split())
    assert "both --bundle and --against are pulled and verified under it" in text
    assert "without one the replay is refused" in text
    for flag in (
        "--policy",
        "--public-key",
        "--certificate-chain",
        "--identity",
        "--issuer",
        "--sigstore-trust-root",
        "--cpu-kvcache-space",
        "--json",
    ):
        assert flag in text


# -- a signed baseline the registry refuses -------------------------------------------------
@pytest.fixture(scope="module")
def registry_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("refused")
    reg: Registry = start_registry("sqlite", base / "registry", None)
    try:
        publisher = new_publisher(reg)
        repo = reg.repo(publisher)
        digest = publisher.actor.client.push(
            make_bundle_dir(base / "model"), repo, sign=publisher.sign, alias="canary"
        ).digest
        yield {"reg": reg, "repo": repo, "digest": digest, "worker": reg.actor("reader")}
    finally:
        reg.close()
        reg.server.stop()


def _baseline_envelope(key_path: Path, repo: str, digest: str) -> tuple[Any, bytes]:
    from modelward.attest.keys import generate_private_key, public_key_pem, save_private_key
    from modelward.attest.statement import PredicateType
    from modelward.loader.baseline import Baseline, ProbeResult, aggregate_hash, token_hash
    from modelward.loader.fingerprint import Fingerprint, fingerprint_id
    from modelward.loader.statements import load_worker_key, sign_predicate

    key = generate_private_key()
    save_private_key(key, key_path)
    key_path.with_name(key_path.name + ".pub").write_bytes(public_key_pem(key.public_key()))
    worker = load_worker_key(key_path)
    data = {"engine": {"version": "0.32.0"}, "dtype": "float32", "entrypoint": "llm"}
    probes = (ProbeResult("p00", "hello", (5, 6), token_hash((5, 6))),)
    baseline = Baseline(
        digest,
        Fingerprint(data, fingerprint_id(data)),
        probes,
        aggregate_hash(probes),
        True,
        (),
        16,
        0,
    )
    return worker, sign_predicate(
        worker, repo, digest, PredicateType.BASELINE, baseline.to_predicate()
    )


def _baselines(attestations: list[dict[str, Any]]) -> int:
    return sum(
        a["predicate_type"] == "https://modelward.dev/determinism-baseline/v1" for a in attestations
    )


def test_baseline_refused_for_an_unregistered_worker_key_is_kept_and_names_the_key(
    registry_world: dict[str, Any], tmp_path: Path
) -> None:
    """The boot step that attaches the signed baseline, against a real registry: the
    refusal names the key and ``modelward key register``; the envelope is kept in the cache
    and attaches later, once the key is registered."""
    from modelward.attest.keys import keyid
    from modelward.loader.cache import Cache
    from modelward.loader.worker import attach_or_keep

    reg: Registry = registry_world["reg"]
    repo, digest, worker_actor = (
        registry_world["repo"],
        registry_world["digest"],
        registry_world["worker"],
    )
    key_path = tmp_path / "worker.key"
    worker, envelope = _baseline_envelope(key_path, repo, digest)
    error, kept = attach_or_keep(
        worker_actor.client,
        repo,
        digest,
        envelope,
        what="this boot's signed baseline",
        name="baseline-x.dsse.json",
        cache=Cache(tmp_path / "cache"),
        key=worker,
        key_path=key_path,
    )
    assert error is not None
    assert kept is not None
    assert "the registry refused this boot's signed baseline" in error
    assert "attestation_untrusted" in error
    assert str(key_path) in error
    assert keyid(worker.key.public_key())[:16] in error
    assert "modelward key register" in error
    folder = tmp_path / "cache" / "statements" / "sha256" / digest[7:]
    assert kept == folder / "baseline-x.dsse.json"
    assert kept.read_bytes() == envelope
    assert _baselines(worker_actor.client.list_attestations(repo, digest)) == 0

    # what the warning tells the operator to do, done: register the key, attach the file
    registered = reg.cli("key", "register", f"{key_path}.pub", "--principal", worker_actor.name)
    assert registered.returncode == 0, registered.stderr
    attached = reg.cli(
        "attestation", "add", f"{repo}@{digest}", str(kept), token=worker_actor.token
    )
    assert attached.returncode == 0, attached.stderr
    assert _baselines(worker_actor.client.list_attestations(repo, digest)) == 1


def test_unreadable_trust_flag_is_refused_before_vllm_is_imported(tmp_path: Path) -> None:
    result, modules = run_traced(
        "boot",
        "acme/tiny@canary",
        "--public-key",
        str(tmp_path / "missing.pem"),
        "--",
        "--enforce-eager",
    )
    assert result.returncode == 2  # a file named on the command line (docs/cli.md#exit-codes)
    assert f"--public-key {tmp_path / 'missing.pem'}: cannot read" in result.stderr
    assert heavy(modules) == set()


def test_unreadable_trust_root_named_by_where_it_came_from(tmp_path: Path) -> None:
    from modelward.attest.keys import generate_private_key, public_key_pem

    (tmp_path / "pub.pem").write_bytes(public_key_pem(generate_private_key().public_key()))
    policy = tmp_path / "worker.yaml"
    policy.write_text(
        "version: 1\nsigners:\n  keys:\n    - {name: pub, path: pub.pem}\n"
        "tuf: {root: missing-root.json}\n"
    )
    from_policy, _ = run_traced("pull", "acme/tiny@prod", "--policy", str(policy))
    assert from_policy.returncode == 2  # input: docs/cli.md#exit-codes
    assert (
        f"the worker policy's tuf.root {tmp_path / 'missing-root.json'}: cannot read"
        in from_policy.stderr
    )
    from_flag, _ = run_traced(
        "pull",
        "acme/tiny@prod",
        "--policy",
        str(policy),
        "--trust-root",
        str(tmp_path / "other.json"),
    )
    assert f"--trust-root {tmp_path / 'other.json'}: cannot read" in from_flag.stderr
