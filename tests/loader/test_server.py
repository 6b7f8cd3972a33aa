"""loader.server without vLLM: readiness against real child processes and real HTTP servers,
the refusals of one-request generation, and the API key the probes present."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from modelward.loader.engine import GenerationRequest
from modelward.loader.errors import EngineFailed
from modelward.loader.server import ServedEngine, _api_key


class _FakeOpenAI(BaseHTTPRequestHandler):
    """A stand-in vLLM server (a real HTTP server): lists one model, answers completions
    with choices in reverse order, and records what it was sent."""

    seen: list[dict[str, Any]] = []  # noqa: RUF012 - shared with the test on purpose

    def log_message(self, *_args: Any) -> None:
        pass

    def _reply(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._reply({"data": [{"id": "bundle-model"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.seen.append({"body": body, "auth": self.headers.get("authorization")})
        choices = [
            {"index": i, "token_ids": [i, len(str(p))]} for i, p in enumerate(body["prompt"])
        ]
        self._reply({"choices": list(reversed(choices))})


@pytest.fixture
def fake_server() -> Iterator[str]:
    _FakeOpenAI.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _child(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


def test_child_exiting_before_ready_is_engine_failed() -> None:
    served = ServedEngine(_child("raise SystemExit(3)"), "http://127.0.0.1:9", None)
    try:
        with pytest.raises(EngineFailed, match="exited with status 3 before it was ready"):
            served.wait_ready(60)
    finally:
        served.stop()


def test_server_never_ready_times_out_and_stop_ends_the_child() -> None:
    child = _child("import time; time.sleep(600)")
    served = ServedEngine(child, "http://127.0.0.1:9", None)
    with pytest.raises(EngineFailed, match="was not ready after 1 s"):
        served.wait_ready(1)
    served.stop(grace=10)
    assert child.poll() is not None


def test_generate_sends_one_request_and_orders_choices(fake_server: str) -> None:
    child = _child("import time; time.sleep(600)")
    served = ServedEngine(child, fake_server, "k3y")
    try:
        served.wait_ready(30)
        requests = [GenerationRequest(prompt=p, max_tokens=5, seed=7) for p in ("a", "bbb")]
        assert served.generate(requests) == [(0, 1), (1, 3)]
        [sent] = _FakeOpenAI.seen
        assert sent["auth"] == "Bearer k3y"
        assert sent["body"]["model"] == "bundle-model"
        assert sent["body"]["prompt"] == ["a", "bbb"]
        assert sent["body"]["return_token_ids"] is True
        assert (sent["body"]["seed"], sent["body"]["temperature"]) == (7, 0.0)
    finally:
        served.stop(grace=10)


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        (
            [GenerationRequest(prompt="a", seed=1), GenerationRequest(prompt="b", seed=2)],
            "one set of sampling parameters",
        ),
        (
            [GenerationRequest(prompt="a"), GenerationRequest(prompt_token_ids=(1, 2))],
            "all text or all token-id prompts",
        ),
    ],
)
def test_generate_refuses_mixed_requests(
    fake_server: str, requests: list[GenerationRequest], message: str
) -> None:
    served = ServedEngine(_child("import time; time.sleep(600)"), fake_server, None)
    try:
        with pytest.raises(ValueError, match=message):
            served.generate(requests)
        assert _FakeOpenAI.seen == []
    finally:
        served.stop(grace=10)


def test_generate_against_a_dead_server_is_engine_failed() -> None:
    served = ServedEngine(_child("pass"), "http://127.0.0.1:9", None)
    try:
        with pytest.raises(EngineFailed, match="generation on the vLLM server failed"):
            served.generate([GenerationRequest(prompt="a")])
    finally:
        served.stop()


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ((), {}, None),
        ((), {"VLLM_API_KEY": "from-env"}, "from-env"),
        (("--api-key", "flag"), {"VLLM_API_KEY": "from-env"}, "flag"),
        (("--api-key=inline",), {}, "inline"),
        (("--api-key", "one", "--api-key", "two"), {}, "two"),
    ],
)
def test_api_key_the_probes_present(
    args: tuple[str, ...], env: dict[str, str], expected: str | None
) -> None:
    assert _api_key(args, env) == expected


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ((), "--ready-file needs --serve"),
        (("--serve",), "is not a directory"),
    ],
)
def test_boot_ready_file_usage_errors(tmp_path: Path, extra: tuple[str, ...], message: str) -> None:
    from tests.registry.conftest import MODELWARD

    ready = tmp_path / "missing-dir" / "ready" if extra else tmp_path / "ready"
    result = subprocess.run(
        [MODELWARD, "boot", "acme/tiny@prod", "--ready-file", str(ready), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert not ready.exists()
