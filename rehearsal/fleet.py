"""A small local fleet for rehearsals (docs/rollouts.md#rehearsal).

``python -m modelward.rehearsal fleet ORG/NAME@ALIAS --workers N --dir DIR --trust-root ROOT
--public-key PEM [--latency-ms MS] [--error-rate R] [--behave DIGEST=R,MS]... [--seconds S]``
with ``MODELWARD_URL`` and ``MODELWARD_TOKEN`` (an admin's, to enrol the workers):

1. enrol: worker ``wNN`` reuses ``DIR/wNN`` (its key and ``enrolment.json``, mode 0600)
   or is enrolled as an operator would: a reader principal, a token, a worker key
   registered to it;
2. start one ``worker`` process each (its own cache, ready file and log under ``DIR/wNN``);
3. say when each serves a digest, and each switch after; ``DIR/fleet.json`` lists them;
4. on SIGTERM, SIGINT or after ``--seconds``: every worker drains and exits (0); a worker
   that exits by itself stops the fleet (1, with its log's tail).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from modelward.attest.keys import (
    generate_private_key,
    keyid,
    load_private_key,
    public_key_pem,
    save_private_key,
)
from modelward.client.api import RegistryClient
from modelward.rehearsal.worker import parse_behave

__all__ = ["main"]


@dataclass
class Member:
    name: str
    home: Path
    keyid: str
    principal: str
    token: str
    proc: subprocess.Popen[bytes] | None = None
    serving: str | None = None

    @property
    def ready(self) -> Path:
        return self.home / "ready.json"

    @property
    def log(self) -> Path:
        return self.home / "worker.log"

    def digest(self) -> str | None:
        try:
            return str(json.loads(self.ready.read_text())["digest"])
        except (FileNotFoundError, ValueError, KeyError):
            return None


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _enrol(client: RegistryClient, home: Path, name: str, repo: str) -> Member:
    """(1): the worker's key, principal and token, reused when ``home`` has them."""
    record, key_path = home / "enrolment.json", home / "worker.key"
    if record.is_file() and key_path.is_file():
        doc = json.loads(record.read_text())
        key = load_private_key(key_path)
        return Member(name, home, keyid(key.public_key()), doc["principal"], doc["token"])
    home.mkdir(parents=True, exist_ok=True)
    principal = f"rehearsal-{repo.replace('/', '-')}-{name}-{secrets.token_hex(3)}"
    client.create_principal(principal, "reader")
    token = str(client.create_token(principal)["token"])
    key = generate_private_key()
    client.register_key(public_key_pem(key.public_key()).decode(), principal=principal)
    save_private_key(key, key_path)
    record.write_text(json.dumps({"principal": principal, "token": token}))
    record.chmod(0o600)
    return Member(name, home, keyid(key.public_key()), principal, token)


def _spawn(m: Member, args: argparse.Namespace, url: str) -> None:
    """(2): the worker process, its output in its log."""
    m.ready.unlink(missing_ok=True)
    command = [
        sys.executable, "-m", "modelward.rehearsal", "worker", args.reference,
        "--cache-dir", str(m.home / "cache"), "--trust-root", str(args.trust_root),
        "--public-key", str(args.public_key), "--worker-key", str(m.home / "worker.key"),
        "--ready-file", str(m.ready), "--poll", str(args.poll),
        "--report-interval", str(args.report_interval),
        "--latency-ms", str(args.latency_ms), "--error-rate", str(args.error_rate),
        *(f"--behave=sha256:{h}={b.error_rate},{b.latency_ms}" for h, b in args.behave),
    ]  # fmt: skip
    env = {**os.environ, "MODELWARD_URL": url, "MODELWARD_TOKEN": m.token}
    with m.log.open("ab") as out:
        m.proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)


def _stop(members: list[Member]) -> None:
    for m in members:
        if m.proc is not None and m.proc.poll() is None:
            m.proc.send_signal(signal.SIGTERM)
    for m in members:
        if m.proc is None:
            continue
        try:
            m.proc.wait(20)
        except subprocess.TimeoutExpired:
            m.proc.kill()
            m.proc.wait()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m modelward.rehearsal fleet",
        description="A local fleet of workers serving REF with stand-in engines (no GPU), "
        "sending real signed reports. MODELWARD_TOKEN: an admin's (it enrols the workers).",
    )
    p.add_argument("reference", help="ORG/NAME@ALIAS")
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--dir", type=Path, required=True, help="the fleet's keys, caches, logs")
    p.add_argument("--trust-root", type=Path, required=True)
    p.add_argument("--public-key", type=Path, required=True)
    p.add_argument("--latency-ms", type=float, default=50.0)
    p.add_argument("--error-rate", type=float, default=0.0)
    behave = "sha256:<hex>=ERROR_RATE,LATENCY_MS for one digest (repeatable)"
    p.add_argument("--behave", type=parse_behave, action="append", default=[], help=behave)
    p.add_argument("--poll", type=float, default=1.0)
    p.add_argument("--report-interval", type=float, default=1.0)
    p.add_argument("--seconds", type=float, default=0.0, help="stop after (0: until signalled)")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if not 1 <= args.workers <= 100:
        _say(f"error: --workers {args.workers}: a rehearsal fleet has 1 to 100 workers")
        return 2
    url, token = os.environ.get("MODELWARD_URL"), os.environ.get("MODELWARD_TOKEN")
    if not url or not token:
        _say("error: MODELWARD_URL and MODELWARD_TOKEN (an admin's) must be set")
        return 2
    repo = args.reference.partition("@")[0]
    with RegistryClient(url, token, timeout=60) as client:
        members = [
            _enrol(client, args.dir / f"w{i:02d}", f"w{i:02d}", repo) for i in range(args.workers)
        ]
    stopping: list[int] = []

    def stop(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for m in members:
        _spawn(m, args, url)
    listing = [
        {"name": m.name, "keyid": m.keyid, "principal": m.principal, "ready_file": str(m.ready),
         "log": str(m.log)} for m in members
    ]  # fmt: skip
    (args.dir / "fleet.json").write_text(json.dumps({"workers": listing}, indent=2))
    _say(f"rehearsal fleet: {len(members)} worker(s) following {args.reference} with stand-in "
         f"engines (never a production worker); stop with SIGTERM or Ctrl-C")  # fmt: skip
    deadline = time.monotonic() + args.seconds if args.seconds > 0 else None
    try:
        while not stopping and (deadline is None or time.monotonic() < deadline):
            for m in members:
                if m.proc is not None and m.proc.poll() is not None:
                    tail = m.log.read_text(errors="replace")[-1500:]
                    _say(f"error: worker {m.name} exited ({m.proc.returncode}):\n{tail}")
                    return 1
                digest = m.digest()
                if digest is not None and digest != m.serving:
                    verb = "serves" if m.serving is None else "switched to"
                    _say(f"{m.name} {m.keyid[:12]} {verb} {digest}")
                    m.serving = digest
            time.sleep(0.25)
    finally:
        _stop(members)
    return 0
