"""Crash campaign: ``kill -9`` the registry at random points of its writes, restart, check.

Per database (SQLite, PostgreSQL) one registry is killed ``kills`` times. Each cycle picks
the next operation in turn —

- ``push``: the client's whole push (HEAD-first blob uploads, one blob through a resumable
  upload session, PUT bundle with its signed provenance, alias move);
- ``upload-commit``: one ~1.5 MiB blob through an upload session (chunks, then commit);
- ``alias-move``: a compare-and-swap move of one alias between three bundles;
- ``approval``: a reviewer approves a pushed bundle for ``prod``;
- ``quarantine``: a reviewer quarantines a pushed bundle;

(garbage collection has no endpoint or command yet: not exercised) — starts it in a thread,
sleeps a random delay drawn from [0, 1.3 x the operation's measured duration] and kills the
server with SIGKILL — the ``modelward serve`` process and every process under it (its
workers: killing the parent alone leaves them serving, docs/reliability.md F4) — so kills
land before, inside and just after the operation. After the restart (a new process, checked
alive after it answered ``/healthz``) it checks:

1. every write the client saw a 2xx for (every one, logged by the client's transport) is
   there: blob (HEAD size), upload session (offset at least the acknowledged one, or
   committed), bundle (exact manifest bytes), alias move (its version and digest in the
   history), approval and quarantine (their audit events, the quarantined flag);
2. nothing partial is visible: the operation's bundle is absent or complete (manifest
   bytes, every blob present at its size, its attestation listed), its blob absent or whole
   (size and SHA-256 of the bytes served);
3. the audit log verifies: the hash chain read from the database after every restart (the
   code ``modelward audit verify --database-url`` runs) and, every ``cli_every`` cycles and
   at the end, the CLI itself and — where the registry signs checkpoints —
   ``modelward audit verify --since CHECKPOINT --key KEY``, which proves the log only grew
   across the crashes since that checkpoint was saved (the pinned key read with
   ``modelward audit key``);
4. the client's retry completes (the same push, the resumed upload, the alias move —
   recognised by its reason when the first attempt had committed —, the approval, the
   quarantine), and the alias history holds each move exactly once.

At the end every acknowledged write of the whole run is checked again. A failed check is a
finding (``findings`` in ``out/crash.json``); the campaign goes on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

__all__ = ["OPERATIONS", "run", "run_one_database"]

OPERATIONS = ("push", "upload-commit", "alias-move", "approval", "quarantine")
WRITES = frozenset({"PUT", "POST", "PATCH", "DELETE"})


@dataclass
class Ack:
    """One 2xx answer to a write, as the client's transport received it."""

    cycle: int
    op: str
    method: str
    path: str
    status: int
    body: Any


class AckLog:
    """Every 2xx write the campaign's clients saw (thread-safe)."""

    def __init__(self) -> None:
        self.acks: list[Ack] = []
        self.cycle = 0
        self.op = "setup"
        self._lock = threading.Lock()

    def add(self, method: str, path: str, status: int, body: bytes) -> None:
        try:
            parsed: Any = json.loads(body) if body else None
        except ValueError:
            parsed = None
        with self._lock:
            self.acks.append(Ack(self.cycle, self.op, method, path, status, parsed))

    def of_cycle(self, cycle: int) -> list[Ack]:
        with self._lock:
            return [a for a in self.acks if a.cycle == cycle]


class RecordingTransport(httpx.BaseTransport):
    """An HTTP transport that logs every 2xx answer to a write before handing it on."""

    def __init__(self, log: AckLog) -> None:
        self._inner = httpx.HTTPTransport()
        self._log = log

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        if request.method not in WRITES or not 200 <= response.status_code < 300:
            return response
        try:
            body = response.read()
        finally:
            response.close()
        self._log.add(request.method, request.url.path, response.status_code, body)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            content=body,
            request=request,
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._inner.close()


@dataclass
class Kill:
    """One cycle: what ran, when the kill landed, and what the checks found."""

    cycle: int
    op: str
    delay_s: float
    op_finished_before_kill: bool
    outcome: str
    acks_before_kill: int = 0  # 2xx answers the killed attempt got: > 0 means mid-operation
    restart_s: float = 0.0
    retried: bool = False
    problems: list[str] = field(default_factory=list)


class Campaign:
    """One registry, its actors and the state the checks compare against."""

    def __init__(
        self, reg: Any, work: Path, rng: random.Random, cli_every: int, calibrations: int = 3
    ) -> None:
        from tests.registry.conftest import new_publisher

        self.reg = reg
        self.work = work
        self.rng = rng
        self.cli_every = cli_every
        self.calibrations = calibrations
        self.log = AckLog()
        self.pub = new_publisher(reg)
        self.reviewer = reg.actor("reviewer")
        self.repo = reg.repo(self.pub)
        self.state_dir = work / "client-state"
        self.pub_client = self._client(self.pub.actor.token)
        self.rev_client = self._client(self.reviewer.token)
        self.pushed: list[str] = []  # bundles pushed and acknowledged
        self.quarantined: set[str] = set()
        self.pool: list[str] = []  # bundles the alias moves between (never quarantined)
        self.bundles: dict[str, bytes] = {}  # digest -> manifest bytes (every push tried)
        self.blobs: dict[str, bytes] = {}  # digest -> bytes (every upload tried)
        self.checkpoint_key = self._checkpoint_key()
        self.checkpoint: Path | None = None
        self.durations: dict[str, float] = {}
        self.recent: dict[str, list[float]] = {}
        self.counter = 0
        self.requarantine_409 = 0  # retries answered 409 "already quarantined" (by us)

    # -- clients and the operations ----------------------------------------------------------
    def _client(self, token: str) -> Any:
        from modelward.client.api import RegistryClient, TransferOptions

        options = TransferOptions(
            chunk_threshold=2**20,
            chunk_size=256 * 2**10,
            read_size=64 * 2**10,
            workers=2,
            max_retries=1,
            retry_backoff=0.05,
            state_dir=self.state_dir,
        )
        return RegistryClient(
            self.reg.url, token, timeout=60, options=options, transport=RecordingTransport(self.log)
        )

    def _new_bundle_dir(self) -> Path:
        from tests.registry.conftest import make_bundle_dir

        self.counter += 1
        root = self.work / "bundles" / f"b{self.counter}"
        if root.exists():
            return root
        make_bundle_dir(
            root, nonce=f"crash-{self.counter}-{self.rng.random()}", big=(3 * 2**20) // 2
        )
        return root

    def prepare_push(self) -> Callable[[], None]:
        from modelward.attest.manifest import build_bundle

        root = self._new_bundle_dir()
        built = build_bundle(root)
        digest = built.manifest.digest
        self.bundles[digest] = built.manifest.raw

        def op() -> None:
            result = self.pub_client.push(
                root, self.repo, sign=self.pub.sign, alias="latest", reason=f"push {digest}"
            )
            if result.digest != digest:
                raise AssertionError(f"push answered {result.digest}, built {digest}")
            if digest not in self.pushed:
                self.pushed.append(digest)

        op.digest = digest  # type: ignore[attr-defined]
        return op

    def prepare_upload(self) -> Callable[[], None]:
        from modelward.client.blobs import BlobSource

        data = self.rng.randbytes((3 * 2**20) // 2 + self.rng.randrange(4096))
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.blobs[digest] = data

        def op() -> None:
            self.pub_client.blobs.upload(
                BlobSource(digest, len(data), data=data, repository=self.repo)
            )

        op.digest = digest  # type: ignore[attr-defined]
        return op

    def prepare_alias(self) -> Callable[[], None]:
        reason = f"crash move {self.counter}-{self.rng.random():.9f}"
        self.counter += 1

        def op() -> None:
            from modelward.client.api import NotFoundError

            try:
                state = self.pub_client.get_alias(self.repo, "moving")
                version, current = int(state["version"]), state["digest"]
            except NotFoundError:
                version, current = 0, None
            # the retry after a crash: the first attempt may have committed unacknowledged
            if version and any(
                h.get("reason") == reason
                for h in self.pub_client.alias_history(self.repo, "moving")
            ):
                return
            target = self.rng.choice([d for d in self.pool if d != current])
            self.pub_client.set_alias(
                self.repo, "moving", target, expected_version=version, reason=reason
            )

        op.reason = reason  # type: ignore[attr-defined]
        return op

    def _live(self) -> list[str]:
        """Pushed bundles not quarantined (pushing one when there is none)."""
        live = [d for d in self.pushed if d not in self.quarantined]
        if not live:
            self.prepare_push()()
            live = [self.pushed[-1]]
        return live

    def prepare_approval(self) -> Callable[[], None]:
        digest = self.rng.choice(self._live())

        def op() -> None:
            answer = self.rev_client.approve(self.repo, digest, "prod")
            if self.reviewer.name not in answer.get("approvers", []):
                raise AssertionError(f"approval answered {answer}")

        op.digest = digest  # type: ignore[attr-defined]
        return op

    def prepare_quarantine(self) -> Callable[[], None]:
        digest = self._live()[0]
        reason = f"crash test {digest[:19]} {self.rng.random():.9f}"

        def op() -> None:
            from modelward.client.api import ConflictError

            try:
                answer = self.rev_client.quarantine(self.repo, digest, reason)
            except ConflictError as exc:
                # a retry whose first attempt committed: 409 with the quarantine on record;
                # it is this client's own quarantine when its principal and reason match
                detail = exc.detail if isinstance(exc.detail, dict) else {}
                if (detail.get("quarantined_by"), detail.get("reason")) != (
                    self.reviewer.name,
                    reason,
                ):
                    raise
                self.requarantine_409 += 1
                answer = {"quarantined": True}
            if not answer.get("quarantined"):
                raise AssertionError(f"quarantine answered {answer}")
            self.quarantined.add(digest)

        op.digest = digest  # type: ignore[attr-defined]
        return op

    def prepare(self, name: str) -> Callable[[], None]:
        return {
            "push": self.prepare_push,
            "upload-commit": self.prepare_upload,
            "alias-move": self.prepare_alias,
            "approval": self.prepare_approval,
            "quarantine": self.prepare_quarantine,
        }[name]()

    # -- setup -------------------------------------------------------------------------------
    def setup(self) -> None:
        """Three bundles for the alias to move between; time each operation once."""
        for _ in range(3):
            op = self.prepare_push()
            op()
            self.pool.append(op.digest)  # type: ignore[attr-defined]
        self.pushed = []  # the pool is never approved against or quarantined
        for name in OPERATIONS:
            self.log.op = f"calibrate {name}"
            for _ in range(self.calibrations):
                op = self.prepare(name)
                started = time.perf_counter()
                op()
                self.observe(name, time.perf_counter() - started)
        self._save_checkpoint()

    def observe(self, name: str, seconds: float) -> None:
        """Keep the operation's duration current: the median of its recent whole runs."""
        recent = self.recent.setdefault(name, [])
        recent.append(seconds)
        del recent[:-7]
        self.durations[name] = sorted(recent)[len(recent) // 2]

    # -- the audit log -----------------------------------------------------------------------
    def _checkpoint_key(self) -> str | None:
        self.reg.cli("audit", "checkpoint")  # the registry makes its key on first use
        probe = self.reg.cli("audit", "key", "--data-dir", str(self.reg.server.data_dir))
        key = (
            probe.stdout.strip().splitlines()[-1]
            if probe.returncode == 0 and probe.stdout
            else None
        )
        return key if key and "+" in key else None

    def _save_checkpoint(self) -> None:
        if self.checkpoint_key is None:
            return
        path = self.work / "checkpoint.txt"
        result = self.reg.cli(
            "audit", "checkpoint", "--out", str(path), "--key", self.checkpoint_key
        )
        self.checkpoint = path if result.returncode == 0 else None

    def audit_problems(self, *, cli: bool) -> list[str]:
        from modelward.attest.audit.chain import verify_chain
        from modelward.registry.domains.audit.offline import events_from_database

        problems: list[str] = []
        try:
            verify_chain(events_from_database(self.reg.database_url))
        except Exception as exc:  # noqa: BLE001 - every failure is the finding
            problems.append(f"audit chain does not verify: {type(exc).__name__}: {exc}")
        if cli:
            result = self.reg.cli("audit", "verify", "--database-url", self.reg.database_url)
            if result.returncode != 0:
                problems.append(
                    f"modelward audit verify --database-url exited "
                    f"{result.returncode}: {result.stdout[-400:]}"
                    f"{result.stderr[-400:]}"
                )
        if cli and self.checkpoint is not None and self.checkpoint_key is not None:
            result = self.reg.cli(
                "audit", "verify", "--since", str(self.checkpoint), "--key", self.checkpoint_key
            )
            if result.returncode != 0:
                problems.append(
                    f"modelward audit verify --since (the log only grew across "
                    f"the crashes since the checkpoint) exited {result.returncode}: "
                    f"{result.stdout[-400:]}{result.stderr[-400:]}"
                )
            self._save_checkpoint()
        return problems

    def _events(self) -> list[dict[str, Any]]:
        return list(self.reg.admin.iter_audit(after=0))

    # -- the checks --------------------------------------------------------------------------
    def ack_problems(
        self, acks: list[Ack], events: list[dict[str, Any]] | None = None
    ) -> list[str]:
        """Every acknowledged write is still there."""
        from modelward.client.api import NotFoundError

        admin = self.reg.admin
        problems: list[str] = []
        histories: dict[str, list[dict[str, Any]]] = {}
        if events is None and any(re.search(r"/approvals$|/quarantine$", a.path) for a in acks):
            events = self._events()
        for ack in acks:
            path = ack.path
            try:
                if m := re.fullmatch(r"/v1/blobs/(sha256:[0-9a-f]{64})", path):
                    if admin.blob_size(m.group(1)) is None:
                        problems.append(f"acknowledged blob {m.group(1)} is gone")
                elif m := re.fullmatch(r"/v1/uploads/([^/]+)/commit", path):
                    digest = (ack.body or {}).get("digest")
                    if digest and admin.blob_size(digest) != (ack.body or {}).get("size"):
                        problems.append(f"committed upload {digest} is gone or short")
                elif m := re.fullmatch(r"/v1/uploads/([^/]+)", path):
                    problems += self._session_problem(m.group(1), ack)
                elif path == "/v1/uploads":
                    problems += self._session_problem(str((ack.body or {}).get("id")), ack)
                elif m := re.fullmatch(
                    r"/v1/repos/[^/]+/[^/]+/bundles/(sha256:[0-9a-f]{64})", path
                ):
                    digest = m.group(1)
                    raw = admin.get_manifest(self.repo, digest)
                    if raw != self.bundles.get(digest, raw):
                        problems.append(f"acknowledged bundle {digest}: manifest bytes differ")
                elif m := re.fullmatch(r"/v1/repos/[^/]+/[^/]+/aliases/([^/]+)", path):
                    alias = m.group(1)
                    if alias not in histories:
                        histories[alias] = admin.alias_history(self.repo, alias)
                    body = ack.body or {}
                    if not any(
                        h["version"] == body.get("version") and h["to_digest"] == body.get("digest")
                        for h in histories[alias]
                    ):
                        problems.append(
                            f"acknowledged alias move {alias} -> v{body.get('version')}"
                            f" {body.get('digest')} is not in the history"
                        )
                elif m := re.fullmatch(
                    r"/v1/repos/[^/]+/[^/]+/bundles/(sha256:[0-9a-f]{64})/approvals", path
                ):
                    if not _has_event(
                        events or [], "bundle.approve", m.group(1), self.reviewer.name
                    ):
                        problems.append(f"acknowledged approval of {m.group(1)} has no audit event")
                elif m := re.fullmatch(
                    r"/v1/repos/[^/]+/[^/]+/bundles/(sha256:[0-9a-f]{64})/quarantine", path
                ):
                    record = admin.get_bundle(self.repo, m.group(1))
                    if not record.get("quarantined"):
                        problems.append(f"acknowledged quarantine of {m.group(1)} is undone")
                    if not _has_event(
                        events or [], "bundle.quarantine", m.group(1), self.reviewer.name
                    ):
                        problems.append(
                            f"acknowledged quarantine of {m.group(1)} has no audit event"
                        )
            except NotFoundError:
                problems.append(f"acknowledged {ack.method} {path} ({ack.status}): now 404")
        return problems

    def _session_problem(self, upload_id: str, ack: Ack) -> list[str]:
        from modelward.client.api import NotFoundError

        body = ack.body or {}
        try:
            state = self.pub_client._json("GET", f"/v1/uploads/{upload_id}")
        except NotFoundError:  # committed (the blob is there) or cancelled since: fine
            digest = body.get("digest")
            if digest and digest in self.blobs and self.reg.admin.blob_size(digest) is None:
                return [f"upload session {upload_id} vanished and its blob is not there"]
            return []
        if int(state["offset"]) < int(body.get("offset", 0)):
            return [
                f"upload session {upload_id}: offset {state['offset']} is behind the "
                f"acknowledged {body.get('offset')}"
            ]
        return []

    def partial_problems(self, name: str, op: Callable[[], None]) -> list[str]:
        """The operation's bundle or blob is absent or whole."""
        from modelward.attest.manifest import parse_manifest
        from modelward.client.api import NotFoundError

        admin = self.reg.admin
        digest = getattr(op, "digest", None)
        problems: list[str] = []
        if name == "push" and digest:
            try:
                raw = admin.get_manifest(self.repo, digest)
            except NotFoundError:
                return []
            if raw != self.bundles[digest]:
                return [f"bundle {digest}: manifest bytes differ from the ones pushed"]
            manifest = parse_manifest(raw)
            for d, size in [
                (manifest.config.digest, manifest.config.size),
                *((layer.digest, layer.size) for layer in manifest.layers),
            ]:
                have = admin.blob_size(d)
                if have != size:
                    problems.append(
                        f"bundle {digest} is visible; its blob {d} is "
                        f"{'missing' if have is None else f'{have} bytes'}"
                    )
            if not admin.list_attestations(self.repo, digest):
                problems.append(f"bundle {digest} is visible without its attestation")
        elif name == "upload-commit" and digest:
            size = admin.blob_size(digest)
            if size is not None:
                data = admin.get_blob(digest)
                if size != len(self.blobs[digest]) or data != self.blobs[digest]:
                    problems.append(f"blob {digest} is visible but not whole ({size} bytes)")
        return problems

    def effect_problems(self, name: str, op: Callable[[], None]) -> list[str]:
        """After the retry: the operation's effect is there, once."""
        admin = self.reg.admin
        if name == "alias-move":
            reason = getattr(op, "reason", "")
            history = admin.alias_history(self.repo, "moving")
            hits = [h for h in history if h.get("reason") == reason]
            versions = [h["version"] for h in history]
            problems = (
                []
                if len(hits) == 1
                else [f"alias move {reason!r} is in the history {len(hits)} times"]
            )
            if versions != list(range(1, len(versions) + 1)):
                problems.append(f"alias history versions are not contiguous: {versions}")
            return problems
        if name == "quarantine":
            digest = getattr(op, "digest", "")
            if not admin.get_bundle(self.repo, digest).get("quarantined"):
                return [f"bundle {digest} is not quarantined after the retry"]
        return []


def _has_event(events: list[dict[str, Any]], action: str, digest: str, actor: str) -> bool:
    return any(
        e.get("action") == action
        and e.get("actor") == actor
        and str(e.get("subject", "")).endswith(f"@{digest}")
        for e in events
    )


def _restart(c: Campaign, killed: list[int]) -> float:
    """Start the server again; the new process must still be alive once ``/healthz``
    answered (a survivor of the kill holding the port would make it exit)."""
    from reliability._infra import alive

    started = time.monotonic()
    for attempt in range(10):
        try:
            c.reg.server.start()
            break
        except RuntimeError as exc:
            # The port held by a process that is not ours (a client's ephemeral port on a
            # busy machine) is the machine's, not a finding: wait and start again. A
            # survivor of the kill holding it is a finding (F4): never retried.
            if "already in use" not in str(exc) or attempt == 9:
                raise
            survivors = [pid for pid in killed if alive(pid)]
            if survivors:
                raise RuntimeError(
                    f"killed processes {survivors} survive and hold the port"
                ) from exc
            time.sleep(1)
    took = round(time.monotonic() - started, 2)
    proc = c.reg.server.proc
    time.sleep(0.2)
    if not killed or proc is None or proc.poll() is not None:
        raise RuntimeError(
            f"the server did not really restart (killed {killed}):\n{c.reg.server.log()}"
        )
    return took


def _cycle(c: Campaign, cycle: int, name: str) -> Kill:
    from modelward.client.api import RegistryClientError
    from reliability._infra import kill_tree

    c.log.cycle, c.log.op = cycle, name
    op = c.prepare(name)
    delay = c.rng.uniform(0.0, 1.3 * c.durations[name])
    done = threading.Event()
    errors: list[BaseException] = []

    def attempt() -> None:
        try:
            op()
        except BaseException as exc:  # noqa: BLE001 - judged below
            errors.append(exc)
        finally:
            done.set()

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    time.sleep(delay)
    finished = done.is_set()
    killed = kill_tree(c.reg.server)
    worker.join(120)
    if not errors:
        outcome = "completed"
    elif isinstance(errors[0], RegistryClientError) and "Transport" in type(errors[0]).__name__:
        outcome = "interrupted"
    else:
        outcome = f"error: {type(errors[0]).__name__}: {str(errors[0])[:300]}"
    kill = Kill(
        cycle, name, round(delay, 4), finished, outcome, acks_before_kill=len(c.log.of_cycle(cycle))
    )
    kill.restart_s = _restart(c, killed)
    problems = kill.problems
    if outcome.startswith("error") and "TransportError" not in outcome:
        problems.append(f"the interrupted attempt failed with a non-transport error: {outcome}")
    problems += c.ack_problems(c.log.of_cycle(cycle))
    problems += c.partial_problems(name, op)
    problems += c.audit_problems(cli=cycle % c.cli_every == 0)
    # the client's retry completes (and, uninterrupted, tells how long the operation takes)
    c.log.op = f"{name} retry"
    try:
        began = time.perf_counter()
        op()
        kill.retried = True
        if name != "upload-commit":  # a resumed upload sends less than a whole one
            c.observe(name, time.perf_counter() - began)
    except Exception as exc:  # noqa: BLE001 - the finding
        problems.append(f"retry failed: {type(exc).__name__}: {str(exc)[:400]}")
    problems += c.effect_problems(name, op)
    problems += c.ack_problems(c.log.of_cycle(cycle))
    return kill


def run_one_database(
    kind: str,
    reg: Any,
    out: Path,
    *,
    kills: int,
    seed: int = 15,
    cli_every: int = 10,
    calibrations: int = 3,
    max_time: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """``kills`` cycles against one running registry (fewer if ``max_time`` runs out)."""
    work = out / kind
    work.mkdir(parents=True, exist_ok=True)
    c = Campaign(reg, work, random.Random(seed), cli_every, calibrations)
    started = time.monotonic()
    c.setup()
    results: list[Kill] = []
    for cycle in range(1, kills + 1):
        if max_time is not None and time.monotonic() - started > max_time:
            break
        name = OPERATIONS[(cycle - 1) % len(OPERATIONS)]
        kill = _cycle(c, cycle, name)
        results.append(kill)
        if progress is not None and (kill.problems or cycle % 10 == 0):
            progress(f"{kind} cycle {cycle}/{kills} {name}: {kill.outcome} {kill.problems or ''}")
    # the whole log again, and the CLI verification, at the end
    c.log.cycle, c.log.op = kills + 1, "final"
    final = c.ack_problems(list(c.log.acks), c._events())
    final += c.audit_problems(cli=True)
    c.pub_client.close()
    c.rev_client.close()
    by_op: dict[str, dict[str, int]] = {}
    for k in results:
        entry = by_op.setdefault(
            k.op,
            {
                "kills": 0,
                "interrupted": 0,
                "completed_before_kill": 0,
                "interrupted_after_some_2xx": 0,
                "other": 0,
                "with_problems": 0,
            },
        )
        entry["kills"] += 1
        entry["interrupted_after_some_2xx"] += k.outcome == "interrupted" and k.acks_before_kill > 0
        entry[
            "interrupted"
            if k.outcome == "interrupted"
            else "completed_before_kill"
            if k.outcome == "completed"
            else "other"
        ] += 1
        entry["with_problems"] += bool(k.problems)
    return {
        "database": kind,
        "kills": len(results),
        "kills_requested": kills,
        "seconds": round(time.monotonic() - started, 1),
        "acknowledged_writes": len(c.log.acks),
        "operation_durations_s": {k: round(v, 3) for k, v in c.durations.items()},
        "by_operation": by_op,
        "mean_restart_s": round(sum(k.restart_s for k in results) / max(1, len(results)), 2),
        "signed_checkpoints": c.checkpoint_key is not None,
        "quarantine_retries_answered_409": c.requarantine_409,
        "final_problems": final,
        "cycles": [asdict(k) for k in results],
        "findings": [
            {"cycle": k.cycle, "op": k.op, "problems": k.problems} for k in results if k.problems
        ]
        + ([{"cycle": "final", "op": "all", "problems": final}] if final else []),
    }


def run(
    out: Path,
    *,
    kills: int = 200,
    databases: tuple[str, ...] = ("sqlite", "postgres"),
    seed: int = 15,
    cli_every: int = 10,
    max_time_per_database: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The campaign over ``databases``; writes and returns ``out/crash.json``."""
    from reliability._infra import each_database

    work = out / "crash"
    started = time.monotonic()
    results = each_database(
        databases,
        work,
        lambda kind, reg: run_one_database(
            kind,
            reg,
            work,
            kills=kills,
            seed=seed,
            cli_every=cli_every,
            progress=progress,
            max_time=max_time_per_database,
        ),
    )
    summary = {
        "campaign": "crash",
        "kills_per_database": kills,
        "operations": list(OPERATIONS),
        "not_exercised": "garbage collection: the registry has no GC endpoint or command",
        "seconds": round(time.monotonic() - started, 1),
        "databases": [{k: v for k, v in r.items() if k != "cycles"} for r in results],
        "new_findings": sum(len(r.get("findings", [])) for r in results),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "crash.json").write_text(json.dumps(summary, indent=2) + "\n")
    with contextlib.suppress(OSError):
        (out / "crash-cycles.json").write_text(json.dumps(results, indent=1) + "\n")
    return summary
