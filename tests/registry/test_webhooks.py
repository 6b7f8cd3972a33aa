"""Signed webhooks (docs/webhooks.md) against real ``modelward serve`` processes (SQLite and
PostgreSQL) and a real HTTP receiver on loopback that verifies every delivery with the
Standard Webhooks reference package (``standardwebhooks.Webhook(secret).verify``).

One registry per module and kind, with a short retry schedule (its own settings: this
module's ``registry`` stands in for the shared one); endpoints are registry-wide, so each
test takes only the events it makes (a test event, or the ``rollout_id`` of its rollout).
"""

from __future__ import annotations

import base64
import json
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import create_engine, select
from standardwebhooks import Webhook, WebhookVerificationError

from modelward.client.api import APIError, BadRequestError, ForbiddenError
from modelward.registry.models import WebhookEndpoint, WebhookMessage
from tests.registry.conftest import (
    Registry,
    Server,
    new_publisher,
    pg_cluster,  # noqa: F401 - the fixture the postgres runs start from
    push_new,
    start_registry,
    unique,
)

ENV = {
    "MODELWARD_WEBHOOK_RETRY_SCHEDULE": "300ms,300ms",  # three attempts
    "MODELWARD_WEBHOOK_POLL_SECONDS": "0.1",
    "MODELWARD_WEBHOOK_TIMEOUT_SECONDS": "5",
}
KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
ONLINE_POLICY = (
    "version: 1\ntrust_registered_signers: true\naliases:\n"
    "  - {pattern: 'dev-*', roles: [publisher], online: true}\n"
    "  - {pattern: '*', roles: [publisher]}\n"
)
ONLY_HELD = ["rollout.held"]  # an event no test here makes: the endpoint gets test events only
T = TypeVar("T")


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A loopback HTTP server: each path is one endpoint; ``fail[path]`` answers 503 that
    many more times (``-1``: always)."""

    url: str
    got: dict[str, list[Received]] = field(default_factory=dict)
    fail: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def endpoint(self, failures: int = 0) -> str:
        path = f"/{unique('hook')}"
        self.fail[path] = failures
        return self.url + path

    def of(self, url: str) -> list[Received]:
        with self.lock:
            return list(self.got.get(url.removeprefix(self.url), []))


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            with receiver.lock:
                receiver.got.setdefault(self.path, []).append(
                    Received({k.lower(): v for k, v in self.headers.items()}, body)
                )
                left = receiver.fail.get(self.path, 0)
                if left > 0:
                    receiver.fail[self.path] = left - 1
            self.send_response(503 if left != 0 else 204)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
            pass

    return Handler


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    found = Receiver("")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(found))
    found.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module", params=KINDS)
def registry(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Registry]:
    pg = request.getfixturevalue("pg_cluster") if request.param == "postgres" else None
    base = tmp_path_factory.mktemp(f"webhooks-{request.param}")
    started = start_registry(request.param, base, pg, extra_env=ENV)
    try:
        yield started
    finally:
        started.close()
        started.server.stop()


def wait_for(probe: Callable[[], T | None], what: str, timeout: float = 60.0) -> T:
    """``probe()`` once it is truthy; fails naming ``what`` after ``timeout`` (a deadline
    against a hang, never a measurement)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def deliveries(registry: Registry, endpoint: int) -> list[dict[str, Any]]:
    return list(registry.admin.webhook_deliveries(endpoint)["deliveries"])


def settled(registry: Registry, endpoint: int, n: int = 1) -> list[dict[str, Any]] | None:
    """The endpoint's deliveries once ``n`` exist and none is waiting or being sent."""
    found = deliveries(registry, endpoint)
    done = len(found) >= n and all(d["state"] in ("delivered", "failed") for d in found)
    return found if done else None


def stored_events(registry: Registry, rollout_id: str) -> list[str]:
    """The outbox's event types for ``rollout_id``, read from the database."""
    engine = create_engine(registry.database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(WebhookMessage.event_type, WebhookMessage.payload)).all()
    finally:
        engine.dispose()
    return [
        kind
        for kind, payload in rows
        if json.loads(payload)["data"].get("rollout_id") == rollout_id
    ]


def verify(secret: str, got: Received) -> Any:
    return Webhook(secret).verify(got.body, got.headers)


def test_a_rollout_start_advance_and_abort_are_delivered_signed(
    registry: Registry, receiver: Receiver, tmp_path: Path
) -> None:
    url = receiver.endpoint()
    hook = registry.admin.add_webhook(url, ["rollout.*"])
    assert hook["secret"].startswith("whsec_")
    publisher = new_publisher(registry)
    repo = registry.repo(publisher, policy_yaml=ONLINE_POLICY)
    stable = push_new(publisher, repo, tmp_path)
    assert publisher.actor.client.set_alias(repo, "dev-a", stable)["signed"] is True
    candidate = push_new(publisher, repo, tmp_path)
    client = publisher.actor.client
    rollout_id = client.start_rollout(repo, "dev-a", candidate)["rollout_id"]
    client.advance_rollout(repo, "dev-a", "first step")
    client.abort_rollout(repo, "dev-a", "p95 TTFT over the threshold")
    with pytest.raises(APIError):  # refused: its transaction, and no event, committed
        client.advance_rollout(repo, "dev-a", "after the abort")
    assert len(stored_events(registry, rollout_id)) == 3

    def ours() -> list[Any]:
        bodies = [verify(hook["secret"], got) for got in receiver.of(url)]
        return [b for b in bodies if b["data"]["rollout_id"] == rollout_id]

    events = wait_for(lambda: (found := ours()) and len(found) == 3 and found, "3 events")
    by_type = {e["type"]: e for e in events}
    assert set(by_type) == {"rollout.started", "rollout.advanced", "rollout.aborted"}
    started, advanced, aborted = (
        by_type["rollout.started"]["data"],
        by_type["rollout.advanced"]["data"],
        by_type["rollout.aborted"]["data"],
    )
    assert started == {
        "repository": repo,
        "alias": "dev-a",
        "rollout_id": rollout_id,
        "plan_sha256": started["plan_sha256"],
        "index": None,
        "weight": 0,
        "state": "planned",
        "reason": None,
        "actor": publisher.name,
    }
    assert (advanced["index"], advanced["weight"], advanced["state"]) == (0, 5, "running")
    assert (aborted["weight"], aborted["state"]) == (0, "aborted")
    assert aborted["reason"] == "p95 TTFT over the threshold"
    assert all(e["timestamp"].endswith("Z") for e in events)
    # one webhook-id per event, each delivered on the first attempt
    log = wait_for(lambda: settled(registry, hook["id"], 3), "the delivery log")
    assert {d["message_id"] for d in log} == {g.headers["webhook-id"] for g in receiver.of(url)}
    assert all(d["state"] == "delivered" and len(d["attempts"]) == 1 for d in log)


def test_a_receiver_failing_twice_gets_the_third_attempt_and_the_log_shows_each(
    registry: Registry, receiver: Receiver
) -> None:
    url = receiver.endpoint(failures=2)
    hook = registry.admin.add_webhook(url, ONLY_HELD)
    registry.admin.test_webhook(hook["id"])
    (delivery,) = wait_for(lambda: settled(registry, hook["id"]), "the retried delivery")
    assert delivery["state"] == "delivered"
    assert [a["status"] for a in delivery["attempts"]] == [503, 503, 204]
    assert [a["error"] for a in delivery["attempts"]] == ["HTTP 503", "HTTP 503", None]
    assert all(a["at"] and a["duration_ms"] >= 0 for a in delivery["attempts"])
    got = receiver.of(url)
    assert len(got) == 3
    assert len({g.headers["webhook-id"] for g in got}) == 1  # retries keep the id
    assert all(verify(hook["secret"], g)["type"] == "webhook.test" for g in got)
    assert registry.admin.list_webhooks()[-1]["state"] in ("enabled", "failing")


def test_an_endpoint_failing_every_attempt_is_marked_failing_and_never_blocks_others(
    registry: Registry, receiver: Receiver
) -> None:
    bad = registry.admin.add_webhook(receiver.endpoint(failures=-1), ONLY_HELD)
    good_url = receiver.endpoint()
    good = registry.admin.add_webhook(good_url, ONLY_HELD)
    registry.admin.test_webhook(bad["id"])
    registry.admin.test_webhook(good["id"])
    (ok,) = wait_for(lambda: settled(registry, good["id"]), "the good endpoint's delivery")
    assert ok["state"] == "delivered"
    (failed,) = wait_for(lambda: settled(registry, bad["id"]), "the bad endpoint's delivery")
    assert failed["state"] == "failed"
    assert len(failed["attempts"]) == 3  # the first and the schedule's two retries
    states = {e["id"]: e for e in registry.admin.list_webhooks()}
    assert states[bad["id"]]["state"] == "failing"
    assert states[bad["id"]]["failing_since"]
    assert states[good["id"]]["state"] == "enabled"
    audited = [e for e in registry.admin.iter_audit() if e["action"] == "webhook.failing"]
    assert any(e["details"]["endpoint"] == bad["id"] for e in audited)
    # a redelivery that succeeds clears failing
    with receiver.lock:
        receiver.fail[bad["url"].removeprefix(receiver.url)] = 0
    registry.admin.redeliver_webhook(bad["id"], failed["id"])
    (again,) = wait_for(
        lambda: (d := settled(registry, bad["id"])) and d[0]["state"] == "delivered" and d,
        "the redelivery",
    )
    assert len(again["attempts"]) == 4
    assert {e["id"]: e for e in registry.admin.list_webhooks()}[bad["id"]]["state"] == "enabled"


def test_a_tampered_body_or_another_secret_fails_verification(
    registry: Registry, receiver: Receiver
) -> None:
    url = receiver.endpoint()
    hook = registry.admin.add_webhook(url, ONLY_HELD)
    registry.admin.test_webhook(hook["id"])
    (got,) = wait_for(lambda: receiver.of(url), "the test event")
    assert verify(hook["secret"], got)["data"]["endpoint"] == hook["id"]
    tampered = got.body.replace(b'"webhook.test"', b'"rollout.completed"')
    assert tampered != got.body
    with pytest.raises(WebhookVerificationError):
        verify(hook["secret"], Received(got.headers, tampered))
    with pytest.raises(WebhookVerificationError):  # another message's id
        verify(hook["secret"], Received({**got.headers, "webhook-id": "msg_x"}, got.body))
    # a rotated secret signs from now on; the old one no longer verifies
    rotated = registry.admin.rotate_webhook_secret(hook["id"])
    assert rotated["secret"] != hook["secret"]
    registry.admin.test_webhook(hook["id"])
    second = wait_for(lambda: (g := receiver.of(url)) and len(g) == 2 and g[1], "the second")
    verify(rotated["secret"], second)
    with pytest.raises(WebhookVerificationError):
        verify(hook["secret"], second)


def test_the_secret_is_sealed_at_rest_shown_once_and_never_logged(
    registry: Registry, receiver: Receiver
) -> None:
    hook = registry.admin.add_webhook(receiver.endpoint(), ONLY_HELD)
    secret = hook["secret"]
    listed = {e["id"]: e for e in registry.admin.list_webhooks()}[hook["id"]]
    assert "secret" not in listed
    raw = base64.b64decode(secret.removeprefix("whsec_"))
    engine = create_engine(registry.database_url)
    try:
        with engine.connect() as conn:
            sealed = conn.execute(
                select(WebhookEndpoint.secret_sealed).where(WebhookEndpoint.id == hook["id"])
            ).scalar_one()
    finally:
        engine.dispose()
    assert raw not in sealed
    assert secret.encode() not in sealed
    key = registry.server.data_dir / "tuf-keys" / "webhooks.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    registry.admin.test_webhook(hook["id"])
    wait_for(lambda: settled(registry, hook["id"]), "the test event")
    assert secret not in registry.server.log_path.read_text(errors="replace")
    assert all(secret not in json.dumps(e) for e in registry.admin.iter_audit())


def test_a_non_admin_is_refused_403_and_audited(registry: Registry, receiver: Receiver) -> None:
    publisher = registry.actor("publisher")
    with pytest.raises(ForbiddenError):
        publisher.client.add_webhook(receiver.endpoint())
    with pytest.raises(ForbiddenError):
        publisher.client.list_webhooks()
    denied = [
        e
        for e in registry.admin.iter_audit()
        if e["action"] == "denied" and e["actor"] == publisher.name
    ]
    assert {e["subject"] for e in denied} == {"POST /v1/admin/webhooks", "GET /v1/admin/webhooks"}
    assert all(e["details"]["status"] == 403 for e in denied)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/hook", "scheme"),
        ("http:///no-host", "no host"),
        ("https://user:pw@example.com/hook", "credentials"),
        ("https://example.com/hook#frag", "fragment"),
        ("example.com/hook", "scheme"),
        ("http://example.com:99999/", "not a URL"),
        ("http://exa mple.com/", "printable ASCII"),
    ],
)
def test_bad_urls_are_refused_naming_the_field(registry: Registry, url: str, why: str) -> None:
    with pytest.raises(BadRequestError) as refused:
        registry.admin.add_webhook(url)
    assert refused.value.status == 400
    assert refused.value.code == "invalid_webhook"
    assert refused.value.detail == {"field": "url"}
    assert why in refused.value.message
    assert all(e["url"] != url for e in registry.admin.list_webhooks())  # nothing half-made


def test_unknown_event_types_are_refused_naming_the_field(registry: Registry) -> None:
    for events in (["rollout.exploded"], [], ["*"]):
        with pytest.raises(BadRequestError) as refused:
            registry.admin.add_webhook("https://example.com/hook", events)
        assert refused.value.detail == {"field": "events"}


def test_two_serve_processes_on_one_database_deliver_each_message_once(
    registry: Registry, receiver: Receiver
) -> None:
    """A second ``serve`` on the same database and key directory: both delivery loops run,
    and every message reaches the receiver exactly once."""
    if registry.kind == "sqlite":
        pytest.skip("one serve process writes a SQLite database (docs/operations.md#scale-out)")
    second = Server(
        data_dir=registry.server.data_dir.parent / f"second-{uuid.uuid4().hex[:6]}",
        admin_token=registry.server.admin_token,
        database_url=registry.database_url,
        extra_env={**ENV, "MODELWARD_TUF_KEYS_DIR": str(registry.server.data_dir / "tuf-keys")},
    )
    second.data_dir.mkdir(parents=True)
    second.start()
    try:
        url = receiver.endpoint()
        hook = registry.admin.add_webhook(url, ONLY_HELD)
        for _ in range(12):
            registry.admin.test_webhook(hook["id"])
        log = wait_for(lambda: settled(registry, hook["id"], 12), "12 deliveries")
    finally:
        second.stop()
    assert all(d["state"] == "delivered" and len(d["attempts"]) == 1 for d in log)
    ids = [g.headers["webhook-id"] for g in receiver.of(url)]
    assert sorted(ids) == sorted(d["message_id"] for d in log)


@pytest.mark.sqlite_only
def test_the_webhook_commands(registry: Registry, receiver: Receiver) -> None:
    url = receiver.endpoint()
    added = registry.cli("webhook", "add", url, "--events", "rollout.held", "--json", check=True)
    hook = json.loads(added.stdout)
    assert hook["secret"].startswith("whsec_")
    listed = registry.cli("webhook", "list", check=True).stdout
    assert url in listed
    assert hook["secret"] not in listed
    registry.cli("webhook", "test", str(hook["id"]), check=True)
    wait_for(lambda: settled(registry, hook["id"]), "the test event")
    log = registry.cli("webhook", "deliveries", str(hook["id"]), check=True).stdout
    assert "webhook.test" in log
    assert "HTTP 204" in log
    (delivery,) = deliveries(registry, hook["id"])
    registry.cli("webhook", "redeliver", str(hook["id"]), str(delivery["id"]), check=True)
    bad = registry.cli("webhook", "add", "http://u:p@example.com/")
    assert bad.returncode == 1  # the registry's refusal (400): the CLI holds no copy of its rules
    assert "credentials" in bad.stderr
    registry.cli("webhook", "remove", str(hook["id"]), check=True)
    assert url not in registry.cli("webhook", "list", check=True).stdout
    gone = registry.cli("webhook", "test", str(hook["id"]))
    assert gone.returncode == 1
    assert "no webhook endpoint" in gone.stderr


def test_a_held_step_is_delivered_with_the_event_data_and_its_reasons(
    registry: Registry, receiver: Receiver, tmp_path: Path
) -> None:
    """The analysis holding a step (inconclusive: too few samples) sends ``rollout.held``
    with the nine keys of every rollout event, its actor the controller, and the reasons."""
    url = receiver.endpoint()
    hook = registry.admin.add_webhook(url, ["rollout.held"])
    publisher = new_publisher(registry)
    repo = registry.repo(publisher, policy_yaml=ONLINE_POLICY)
    client = publisher.actor.client
    stable = push_new(publisher, repo, tmp_path)
    client.set_alias(repo, "dev-a", stable)
    candidate = push_new(publisher, repo, tmp_path)
    started = client.start_rollout(
        repo,
        "dev-a",
        candidate,
        window_seconds=1,
        min_samples=10_000,
        analysis="thresholds:\n  error_rate: {max: 0.05}\n",
        allow_no_fleet=True,
    )
    rollout_id = str(started["rollout_id"])
    client.advance_rollout(repo, "dev-a", "first step")
    time.sleep(1.5)  # the step's first window is over: only the samples are short
    answer = client.analyze_rollout(repo, "dev-a")
    assert answer["verdict"] == "inconclusive", answer

    def held() -> list[Any]:
        bodies = [verify(hook["secret"], got) for got in receiver.of(url)]
        return [b for b in bodies if b["data"]["rollout_id"] == rollout_id]

    (event,) = wait_for(lambda: held() or None, "the rollout.held delivery")
    data = event["data"]
    assert event["type"] == "rollout.held"
    assert set(data) == {
        "repository", "alias", "rollout_id", "plan_sha256", "index", "weight", "state",
        "reason", "actor", "reasons",
    }  # fmt: skip
    assert (data["repository"], data["alias"], data["index"], data["weight"]) == (
        repo,
        "dev-a",
        0,
        5,
    )
    assert (data["state"], data["actor"]) == ("running", "rollout-controller")
    assert data["plan_sha256"] == started["plan_sha256"]
    assert any("fewer than the 10000" in r for r in data["reasons"]), data
    assert "fewer than the 10000" in data["reason"]
