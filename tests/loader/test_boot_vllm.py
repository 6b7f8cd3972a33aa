"""``modelward boot``, ``baseline show`` and ``replay`` end to end: a real registry
(``modelward serve``, SQLite), a signed push, a reader worker with its own key, real vLLM.

vLLM boots: a first boot whose worker key is not registered yet (``--json``, the KV cache
from ``--cpu-kvcache-space``: the registry refuses the baseline, the boot counts, the baseline
is kept and attached once the key is registered), match, forged-baseline divergence, one
replay, two OpenAI servers (a baseline recorded on the server, then a divergent one that
stops it).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelward.loader.baseline import Baseline, ProbeResult, aggregate_hash, token_hash
from tests.loader.test_pull import flip_byte, with_spec
from tests.registry.conftest import MODELWARD, Registry, new_publisher, start_registry

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

BASELINE = "https://modelward.dev/determinism-baseline/v1"
REPLAY = "https://modelward.dev/replay-result/v1"
REPLAY_JSON_KEYS = {
    "repo",
    "version",
    "bundle_digest",
    "against",
    "requests_sha256",
    "concurrency",
    "engine_args",
    "mode",
    "mode_reason",
    "reference_divergence_count",
    "fingerprint_id",
    "fingerprint",
    "runs",
    "requests",
    "executions",
    "consecutive_matches",
    "matches",
    "divergence_count",
    "output_divergence_count",
    "divergences",
    "side_effect_requests",
    "side_effect_divergence_count",
    "side_effect_divergences",
    "unique_completions",
    "max_unique_completions",
    "reference",
    "attached",
    "attached_to",
    "attach_error",
    "statement_file",
    "capture",
    "kv_cache",
}


class World:
    def __init__(self, base: Path, model: Path) -> None:
        from modelward.attest.keys import generate_private_key, public_key_pem, save_private_key

        self.base = base
        self.reg: Registry = start_registry("sqlite", base / "registry", None)
        publisher = new_publisher(self.reg)
        self.publisher = publisher
        self.repo = self.reg.repo(publisher)
        self.digest = publisher.actor.client.push(
            with_spec(model), self.repo, sign=publisher.sign
        ).digest
        self.pem = base / "publisher.pem"
        self.pem.write_bytes(public_key_pem(publisher.key.public_key()))
        self.publisher_key = base / "publisher.key"
        save_private_key(publisher.key, self.publisher_key)
        # canary, signed by the publisher (the repository's publishers' TUF role)
        self.reg.cli(
            "alias",
            "set",
            f"{self.repo}@canary",
            self.digest,
            "--key",
            str(self.publisher_key),
            token=publisher.actor.token,
            check=True,
        )
        self.worker = self.reg.actor("reader")
        self.worker_key = base / "worker.key"
        self.worker_private = generate_private_key()
        save_private_key(self.worker_private, self.worker_key)
        self.worker_key.with_name("worker.key.pub").write_bytes(
            public_key_pem(self.worker_private.public_key())
        )
        self.cache = base / "cache"
        self.attached: subprocess.CompletedProcess[str] | None = None  # see first_boot

    def register_worker_key(self) -> None:
        from modelward.attest.keys import public_key_pem

        self.reg.admin.register_key(
            public_key_pem(self.worker_private.public_key()).decode(), principal=self.worker.name
        )

    def cli(
        self, *args: str, trust: bool = True, kv_env: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "MODELWARD_URL": self.reg.url,
            "MODELWARD_TOKEN": self.worker.token,
            "VLLM_CPU_KVCACHE_SPACE": "1",
        }
        if not kv_env:
            del env["VLLM_CPU_KVCACHE_SPACE"]
        extra = (
            [
                "--public-key",
                str(self.pem),
                "--cache-dir",
                str(self.cache),
                "--worker-key",
                str(self.worker_key),
            ]
            if trust
            else []
        )
        if args[0] in ("boot", "replay", "baseline"):  # about vLLM, not alias signing
            extra.append("--unsigned-aliases")
        cmd = [MODELWARD, args[0], *args[1:2], *extra, *args[2:]]
        return subprocess.run(
            cmd, capture_output=True, text=True, env=env, timeout=900, check=False
        )

    def boot(self) -> subprocess.CompletedProcess[str]:
        return self.cli("boot", f"{self.repo}@canary", "--", "--enforce-eager")

    def statements(self, predicate_type: str) -> list[dict[str, Any]]:
        items = self.worker.client.list_attestations(self.repo, self.digest)
        return [
            json.loads(base64.b64decode(json.loads(base64.b64decode(a["data"]))["payload"]))
            for a in items
            if a["predicate_type"] == predicate_type
        ]

    def attach_forged_baseline(
        self, predicate: dict[str, Any], digest: str, *, probe: int, token: int
    ) -> None:
        """Attach, signed by the worker's key, ``predicate`` for ``digest`` with one token
        of one probe changed (hashes recomputed, so only the tokens disagree)."""
        from modelward.attest.dsse import sign_envelope
        from modelward.attest.statement import make_statement

        forged = json.loads(json.dumps(predicate))
        forged["bundle_digest"] = digest
        ids = forged["probes"][probe]["token_ids"]
        ids[token] = (ids[token] + 1) % 100
        forged["probes"][probe]["sha256"] = token_hash(ids)
        forged["aggregate"] = aggregate_hash(
            [
                ProbeResult(p["id"], p["prompt"], tuple(p["token_ids"]), p["sha256"])
                for p in forged["probes"]
            ]
        )
        envelope = sign_envelope(
            make_statement(self.repo, digest, BASELINE, forged), [self.worker_private]
        )
        self.worker.client.add_attestation(self.repo, digest, envelope)

    def boots(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.reg.admin._json(
            "GET", f"/v1/repos/{self.repo}/bundles/{self.digest}/boots"
        )
        return result


@pytest.fixture(scope="module")
def world(
    tiny_model_master: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[World]:
    base = tmp_path_factory.mktemp("boot")
    shutil.copytree(tiny_model_master, base / "model")
    w = World(base, base / "model")
    yield w
    w.reg.close()
    w.reg.server.stop()


@pytest.fixture(scope="module")
def first_boot(world: World) -> subprocess.CompletedProcess[str]:
    """The first boot, before the worker key is registered: the registry refuses its signed
    baseline. Then what its warning says is done: register the key, attach the kept file."""
    refused = world.cli(
        "boot",
        f"{world.repo}@canary",
        "--json",
        "--cpu-kvcache-space",
        "1",
        "--",
        "--enforce-eager",
        kv_env=False,
    )
    world.register_worker_key()
    if refused.returncode == 0:
        kept = json.loads(refused.stdout)["baseline_file"]
        world.attached = world.reg.cli(
            "attestation", "add", f"{world.repo}@{world.digest}", kept, token=world.worker.token
        )
    return refused


def test_boot_with_unregistered_worker_key_counts_and_keeps_the_baseline(
    world: World, first_boot: subprocess.CompletedProcess[str]
) -> None:
    assert first_boot.returncode == 0, first_boot.stderr[-3000:]
    report = json.loads(first_boot.stdout)  # vLLM's logs went to stderr, not stdout
    assert report["digest"] == world.digest
    assert report["outcome"] == "ok"
    assert report["exit_code"] == 0
    assert report["baseline"] == "attach_refused"
    assert report["baseline_attached"] is False
    assert "attestation_untrusted" in report["baseline_attach_error"]
    assert str(world.worker_key) in report["baseline_attach_error"]
    assert "modelward key register" in report["baseline_attach_error"]
    assert report["batch_invariant"] is True
    assert report["kv_cache"] == {
        "device": "cpu",
        "gib": 1,
        "source": "option",
        "env": "VLLM_CPU_KVCACHE_SPACE",
    }
    assert "cpu kv cache: 1 GiB (from --cpu-kvcache-space" in first_boot.stderr
    assert (
        f"modelward key register {world.worker_key}.pub --principal {world.worker.name}"
        in first_boot.stderr
    )
    assert "modelward attestation add" in first_boot.stderr
    boots = world.boots()
    assert [b["outcome"] for b in boots] == ["ok"]
    assert boots[0]["detail"]["baseline"] == "attach_refused"
    assert boots[0]["detail"]["baseline_attached"] is False
    # attached afterwards from the kept file, as the warning said
    assert world.attached is not None
    assert world.attached.returncode == 0, world.attached.stderr
    statements = world.statements(BASELINE)
    assert len(statements) == 1
    assert statements[0]["subject"][0]["digest"]["sha256"] == world.digest[7:]
    baseline = Baseline.from_predicate(statements[0]["predicate"])
    assert baseline.bundle_digest == world.digest
    assert baseline.aggregate == report["aggregate"]
    assert baseline.fingerprint.id == report["fingerprint_id"]
    assert all(p.token_ids for p in baseline.probes)
    assert json.dumps(boots[0]).count(baseline.fingerprint.id) >= 1


def test_second_boot_matches_recorded_baseline(
    world: World, first_boot: subprocess.CompletedProcess[str]
) -> None:
    second = world.boot()
    assert second.returncode == 0, second.stderr[-3000:]
    assert "matches" in second.stdout
    assert len(world.statements(BASELINE)) == 1  # nothing new recorded
    shown = world.cli("baseline", "show", f"{world.repo}@canary", trust=False)
    assert shown.returncode == 2  # no trust given
    env_args = ("--worker-public-key", str(world.worker_key) + ".pub", "--unsigned-aliases")
    shown = subprocess.run(
        [MODELWARD, "baseline", "show", f"{world.repo}@canary", *env_args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "MODELWARD_URL": world.reg.url, "MODELWARD_TOKEN": world.worker.token},
    )
    assert shown.returncode == 0, shown.stderr
    assert "1 baseline(s)" in shown.stdout
    assert "engine=0.32.0 dtype=float32 device=cpu" in shown.stdout


def test_forged_divergent_baseline_refuses_boot(
    world: World, first_boot: subprocess.CompletedProcess[str]
) -> None:

    world.attach_forged_baseline(
        world.statements(BASELINE)[0]["predicate"], world.digest, probe=2, token=5
    )
    result = world.boot()
    assert result.returncode == 1
    assert "p02: first differing token index 5" in result.stderr
    assert world.boots()[-1]["outcome"] == "refused"


def test_warn_policy_boots_through_engine_mismatch_and_divergence(
    world: World, first_boot: subprocess.CompletedProcess[str], tmp_path: Path
) -> None:
    """The worker policy's warn modes: a bundle pinned to another vLLM and a trusted baseline
    that disagrees both become warnings; the boot goes on and says so everywhere."""
    from modelward.attest.keys import public_key_pem
    from modelward.attest.spec import render_spec_template

    model = tmp_path / "pinned-elsewhere"
    shutil.copytree(world.base / "model", model)
    (model / "modelward.yaml").write_text(
        render_spec_template(dtype="float32", max_model_len=256, engine_version="0.31.0")
    )
    publisher = new_publisher(world.reg)
    world.reg.admin.add_publisher(world.repo, publisher.name)
    other = publisher.actor.client.push(
        model, world.repo, sign=publisher.sign, alias="warned"
    ).digest
    (tmp_path / "publisher.pem").write_bytes(public_key_pem(publisher.key.public_key()))
    policy = tmp_path / "worker-policy.yaml"
    policy.write_text(
        "version: 1\nsigners:\n  keys:\n    - name: publisher\n"
        "      path: publisher.pem\nengine_version: warn\nbaseline: warn\n"
    )
    genuine = next(
        s["predicate"]
        for s in world.statements(BASELINE)
        if s["predicate"]["fingerprint"]["entrypoint"] == "llm"
    )
    world.attach_forged_baseline(genuine, other, probe=3, token=2)

    result = world.cli(
        "boot",
        f"{world.repo}@warned",
        "--policy",
        str(policy),
        "--cache-dir",
        str(world.cache),
        "--worker-key",
        str(world.worker_key),
        "--",
        "--enforce-eager",
        trust=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "bundle pins vllm 0.31.0 but this worker runs vllm 0.32.0" in result.stderr
    assert "p03: first differing token index 2" in result.stderr
    assert "diverges (warn)" in result.stdout
    boots: list[dict[str, Any]] = world.reg.admin._json(
        "GET", f"/v1/repos/{world.repo}/bundles/{other}/boots"
    )
    assert [b["outcome"] for b in boots] == ["ok"]
    assert boots[0]["detail"]["baseline"] == "diverged"
    warnings = " ".join(boots[0]["detail"]["warnings"])
    assert "0.31.0" in warnings
    assert "first differing token index 2" in warnings


def test_byte_flipped_in_cache_after_pull_is_caught_at_boot(
    world: World, first_boot: subprocess.CompletedProcess[str]
) -> None:
    directory = world.cache / "bundles" / "sha256" / world.digest[7:]
    flip_byte(directory / "model.safetensors")
    try:
        result = world.boot()
        assert result.returncode == 1
        assert "model.safetensors" in result.stderr
        assert "digest mismatch" in result.stderr
        assert "pull --repair" in result.stderr
        assert world.boots()[-1]["outcome"] == "refused"
    finally:
        flip_byte(directory / "model.safetensors")


@pytest.fixture(scope="module")
def replayed(
    world: World,
    first_boot: subprocess.CompletedProcess[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One replay of 100 requests × 3 runs through canary, its signed result attached (after
    the first boot, which registers the worker key); (the result, the capture file)."""
    from tests.loader.conftest import write_requests

    tmp = tmp_path_factory.mktemp("replayed")
    requests = write_requests(tmp / "requests.jsonl", 100)
    capture = tmp / "out.jsonl"
    result = world.cli(
        "replay",
        str(requests),
        "--bundle",
        f"{world.repo}@canary",
        "--runs",
        "3",
        "--concurrency",
        "25",
        "--capture",
        str(capture),
        "--json",
        "--",
        "--enforce-eager",
    )
    return result, capture


def test_replay_cli_counts_and_attaches_signed_result(
    world: World, replayed: tuple[subprocess.CompletedProcess[str], Path]
) -> None:
    result, capture = replayed
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert set(report) == REPLAY_JSON_KEYS  # docs/loader.md#json-output
    assert report["executions"] == 300
    assert report["consecutive_matches"] == 300
    assert report["divergence_count"] == 0
    assert report["attached"] is True
    assert report["attach_error"] is None
    assert report["attached_to"] == f"{world.reg.url} {world.repo}@{world.digest}"
    assert report["kv_cache"]["source"] == "env"
    assert report["engine_args"] == ["--enforce-eager"]
    assert report["mode"] == "single"
    # progress after every run (stderr is no terminal: a line per tenth of the runs)
    for run in (1, 2, 3):
        assert f"replay: run {run}/3: {run * 100} consecutive matches, 0 divergences" in (
            result.stderr
        )
    assert (
        f"attached the signed replay result to {world.repo}@{world.digest} at {world.reg.url}"
    ) in result.stderr
    assert len(capture.read_text().splitlines()) == 100
    predicate = world.statements(REPLAY)[-1]["predicate"]
    assert predicate["consecutive_matches"] == 300
    assert predicate["max_unique_completions"] == 1
    assert predicate["bundle_digest"] == world.digest
    assert predicate["engine_args"] == ["--enforce-eager"]


def _start_serving(world: World, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "MODELWARD_URL": world.reg.url,
        "MODELWARD_TOKEN": world.worker.token,
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [
                MODELWARD,
                "boot",
                f"{world.repo}@canary",
                "--public-key",
                str(world.pem),
                "--unsigned-aliases",
                "--cache-dir",
                str(world.cache),
                "--worker-key",
                str(world.worker_key),
                "--serve",
                "--port",
                str(port),
                "--ready-file",
                str(log_path.with_suffix(".ready")),
                "--report-interval",  # signed fleet reports (docs/loader.md#following-a-rollout)
                "2",
                "--",
                "--enforce-eager",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _wait_for_report(world: World, deadline: float) -> dict[str, Any]:
    """The first fleet report in the registry's database signed by the worker key with
    requests in it, its envelope verified with the worker key's public half."""
    import time

    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    from modelward.attest.keys import keyid
    from modelward.attest.rollout import open_report, verify_report
    from modelward.registry.models import RolloutReport

    engine = create_engine(world.reg.database_url)
    try:
        while time.monotonic() < deadline:
            with Session(engine) as session:
                rows = session.scalars(
                    select(RolloutReport)
                    .where(RolloutReport.worker_keyid == keyid(world.worker_private.public_key()))
                    .order_by(RolloutReport.id)
                ).all()
            for row in rows:
                if row.requests >= 1:
                    envelope = bytes(row.envelope)
                    opened = open_report(envelope)
                    verified = verify_report(envelope, opened, world.worker_private.public_key())
                    assert verified.worker_keyid == row.worker_keyid
                    return dict(json.loads(row.predicate))
            time.sleep(1)
    finally:
        engine.dispose()
    raise AssertionError("no fleet report with requests reached the registry")


def _served_baselines(world: World) -> list[dict[str, Any]]:
    return [
        s["predicate"]
        for s in world.statements(BASELINE)
        if s["predicate"]["fingerprint"].get("entrypoint") == "openai-server"
    ]


def test_serve_records_baseline_then_serves_and_forwards_sigterm(
    world: World, first_boot: subprocess.CompletedProcess[str], tmp_path: Path
) -> None:
    import signal
    import time

    import httpx

    from tests.registry.conftest import free_port

    port = free_port()
    log_path = tmp_path / "serve.log"
    proc = _start_serving(world, port, log_path)
    url = f"http://127.0.0.1:{port}"
    try:
        # the boot is reported "serving" only after the baseline ran on the server
        deadline = time.monotonic() + 800
        while time.monotonic() < deadline and proc.poll() is None:
            if world.boots()[-1]["outcome"] == "serving":
                break
            time.sleep(1)
        assert world.boots()[-1]["outcome"] == "serving", log_path.read_text()[-3000:]
        assert world.boots()[-1]["detail"]["baseline"] == "recorded"
        ready = log_path.with_suffix(".ready")
        while time.monotonic() < deadline and not ready.exists():
            time.sleep(0.2)
        assert json.loads(ready.read_text())["baseline"] == "recorded"
        served = _served_baselines(world)
        assert len(served) == 1
        # the same greedy tokens as the in-process engine's baseline, over HTTP
        in_process = next(
            s["predicate"]
            for s in world.statements(BASELINE)
            if s["predicate"]["fingerprint"]["entrypoint"] == "llm"
        )
        assert served[0]["fingerprint_id"] != in_process["fingerprint_id"]
        assert [p["token_ids"] for p in served[0]["probes"]] == [
            p["token_ids"] for p in in_process["probes"]
        ]
        model_id = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"]
        completion = httpx.post(
            f"{url}/v1/completions",
            timeout=120,
            json={"model": model_id, "prompt": "hello world", "max_tokens": 4, "temperature": 0},
        )
        assert completion.status_code == 200, completion.text
        # a signed report of the server's /metrics reached the registry
        report = _wait_for_report(world, deadline)
        assert report["digest"] == world.digest
        assert report["rollout_id"] is None  # no rollout of canary
        assert report["requests"] >= 1, report  # the baseline's probes and the completion
        assert report["errors"] == 0, report
        assert report["ttft_ms"]["p95"] is not None, report
        assert report["capacity"] == 256, report  # vLLM's default max_num_seqs, no flag given
        proc.send_signal(signal.SIGTERM)
        proc.wait(180)
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{url}/v1/models", timeout=2)
        assert not ready.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def test_serve_with_divergent_baseline_stops_the_server(world: World, tmp_path: Path) -> None:
    import httpx

    from tests.registry.conftest import free_port

    served = _served_baselines(world)
    assert served, "the serving test records the server's baseline first"
    world.attach_forged_baseline(served[0], world.digest, probe=1, token=3)
    port = free_port()
    log_path = tmp_path / "serve.log"
    proc = _start_serving(world, port, log_path)
    try:
        assert proc.wait(800) == 1, log_path.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert "p01: first differing token index 3" in log_path.read_text()
    assert not log_path.with_suffix(".ready").exists()
    assert world.boots()[-1]["outcome"] == "refused"
    assert "openai-server" in json.dumps(world.boots()[-1])
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2)


TOOL_PREFIX = '<tool_call>{"name": "get_weather", "arguments": {"city": "'
#: a structured-output constraint that makes the tiny random model write a tool call: the
#: name is forced, the argument is the model's choice (the perturbed head favours "%&'()")
TOOL_REGEX = (
    r'<tool_call>\{"name": "get_weather", "arguments": \{"city": '
    r'"[A-Za-z0-9 %&\'()*+,.-]{1,12}"\}\}</tool_call>'
)


def _replay_requests_with_tool_calls(path: Path) -> Path:
    from tests.loader.conftest import write_requests

    write_requests(path, 100)
    with path.open("a") as fh:
        for i, prompt in enumerate(["weather in paris", "hello world 1", "0 1 2 3"]):
            fh.write(
                json.dumps(
                    {
                        "id": f"tool{i}",
                        "prompt": prompt,
                        "max_tokens": 96,
                        "temperature": 0,
                        "tool_call_format": "hermes",
                        "structured_output": {"regex": TOOL_REGEX},
                    }
                )
                + "\n"
            )
    return path


@pytest.fixture(scope="module")
def perturbed(
    world: World,
    first_boot: subprocess.CompletedProcess[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[str, Path]:
    """A second bundle in the repository: the tiny model with a perturbed output head (after
    the first boot, which registers the worker key the replay results are signed with)."""
    from modelward.attest.keys import public_key_pem
    from tests.loader.conftest import perturb_weights

    base = tmp_path_factory.mktemp("perturbed")
    model = base / "perturbed"
    shutil.copytree(world.base / "model", model)
    perturb_weights(model)
    publisher = new_publisher(world.reg)
    world.reg.admin.add_publisher(world.repo, publisher.name)
    digest = publisher.actor.client.push(
        model, world.repo, sign=publisher.sign, alias="perturbed"
    ).digest
    pem = base / "p2.pem"
    pem.write_bytes(public_key_pem(publisher.key.public_key()))
    return digest, pem


def test_replay_against_perturbed_bundle_reports_output_and_tool_call_divergences(
    world: World, perturbed: tuple[str, Path], tmp_path: Path
) -> None:
    other, pem = perturbed
    requests = _replay_requests_with_tool_calls(tmp_path / "requests.jsonl")
    capture = tmp_path / "out.jsonl"
    result = world.cli(
        "replay",
        str(requests),
        "--bundle",
        f"{world.repo}@canary",
        "--against",
        f"{world.repo}@perturbed",
        "--public-key",
        str(pem),
        "--concurrency",
        "25",
        "--runs",
        "2",
        "--capture",
        str(capture),
        "--",
        "--enforce-eager",
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert f"reference {world.repo}@{other}" in result.stdout
    assert "divergences 0" not in result.stdout.splitlines()
    assert "first differing token index" in result.stdout
    # the tool call's text is the same up to its argument, which the side-effect log names
    assert "side effects differ at tool_calls[0].arguments.city" in result.stdout
    assert "(of 3 requests with a side-effect log)" in result.stdout
    captured = {row["id"]: row for row in map(json.loads, capture.read_text().splitlines())}
    assert captured["tool0"]["text"].startswith(TOOL_PREFIX)
    assert captured["tool0"]["side_effects"]["tool_calls"][0]["name"] == "get_weather"
    predicate = world.statements(REPLAY)[-1]["predicate"]
    assert predicate["against"] == other
    assert predicate["divergence_count"] > 0
    assert predicate["consecutive_matches"] < 100
    assert {"run": 1, "request": "tool0", "path": "tool_calls[0].arguments.city"} in (
        predicate["side_effect_divergences"]
    )
    assert predicate["mode"] in {"interleaved", "sequential"}
    if predicate["mode"] == "interleaved":  # the reference ran every run too, unchanged
        assert predicate["reference_divergence_count"] == 0
        assert "mode interleaved" in result.stdout


def test_sequential_replay_finds_the_same_tool_call_divergences(
    world: World, perturbed: tuple[str, Path], tmp_path: Path
) -> None:
    _, pem = perturbed
    requests = _replay_requests_with_tool_calls(tmp_path / "requests.jsonl")
    capture = tmp_path / "out.jsonl"
    result = world.cli(
        "replay",
        str(requests),
        "--bundle",
        f"{world.repo}@perturbed",
        "--against",
        f"{world.repo}@canary",
        "--public-key",
        str(pem),
        "--concurrency",
        "25",
        "--sequential",
        "--capture",
        str(capture),
        "--json",
        "--",
        "--enforce-eager",
    )
    assert result.returncode == 1, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["mode"] == "sequential"
    assert report["mode_reason"] == "asked for (--sequential)"
    assert report["reference_divergence_count"] is None
    paths = {(d["request"], d["path"]) for d in report["side_effect_divergences"]}
    assert ("tool0", "tool_calls[0].arguments.city") in paths
    assert report["side_effect_divergence_count"] == len(report["side_effect_divergences"])
    captured = {row["id"]: row for row in map(json.loads, capture.read_text().splitlines())}
    assert captured["tool0"]["text"].startswith(TOOL_PREFIX)


def test_release_record_carries_the_boot_baseline_and_replay_result(
    world: World, replayed: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path
) -> None:
    """canary's release record (signed by the publisher, whose role signs canary) embeds the
    baseline the first boot recorded and the replay's signed result, and verifies offline."""
    assert replayed[0].returncode == 0, replayed[0].stderr[-3000:]
    root, record = tmp_path / "root.json", tmp_path / "canary.release.json"
    assert world.reg.cli("trust", "root", "--out", str(root)).returncode == 0
    made = world.reg.cli(
        "release",
        "record",
        f"{world.repo}@canary",
        "--key",
        str(world.publisher_key),
        "--out",
        str(record),
        "--json",
    )
    assert made.returncode == 0, made.stderr
    summary = json.loads(made.stdout)
    assert summary["digest"] == world.digest
    assert summary["baselines"] >= 1
    assert summary["replays"] >= 1
    predicate = json.loads(base64.b64decode(json.loads(record.read_bytes())["payload"]))[
        "predicate"
    ]
    replays = [
        json.loads(base64.b64decode(json.loads(base64.b64decode(r["data"]))["payload"]))
        for r in predicate["replays"]
    ]
    assert {r["predicate"]["bundle_digest"] for r in replays} == {world.digest}
    assert any(r["predicate"]["engine_args"] == ["--enforce-eager"] for r in replays)
    verified = world.reg.cli("release", "verify", str(record), "--trust-root", str(root), "--json")
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["valid"] is True
