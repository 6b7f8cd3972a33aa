"""Real registry servers for the registry tests.

- ``pg_cluster``: a PostgreSQL cluster from the machine's own binaries (initdb/pg_ctl run as the
  ``postgres`` system user when we are root), on a free loopback port; skipped with a visible
  reason when the binaries are missing.
- ``s3_endpoint``: moto's ThreadedMotoServer on a free port with one bucket.
- ``registry``: a ``modelward serve`` subprocess, parametrized over sqlite and postgres,
  session-scoped; tests isolate themselves with fresh repository and principal names.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from modelward.client.api import RegistryClient, TransferOptions
from tests import forkserver
from tests.inprocess import run_modelward

REPO_ROOT = Path(__file__).resolve().parents[2]
MODELWARD = str(REPO_ROOT / ".venv" / "bin" / "modelward")
if not Path(MODELWARD).exists():  # an installed environment elsewhere
    MODELWARD = shutil.which("modelward") or MODELWARD


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def unique(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


# -- PostgreSQL ----------------------------------------------------------------------------
def _pg_bindir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), reverse=True)
    return candidates[0].parent if candidates else None


@dataclass
class PgCluster:
    host: str
    port: int
    user: str = "postgres"

    def create_database(self, name: str | None = None) -> str:
        """A fresh database; returns its SQLAlchemy URL (psycopg 3)."""
        import psycopg

        name = name or unique("db")
        conninfo = f"host={self.host} port={self.port} user={self.user} dbname=postgres"
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://{self.user}@{self.host}:{self.port}/{name}"


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    bindir = _pg_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (initdb/pg_ctl) on this machine")
    as_root = os.geteuid() == 0
    if as_root and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser: cannot start PostgreSQL as postgres")
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    base = Path(tempfile.mkdtemp(prefix="modelward-pg-"))
    if as_root:
        shutil.chown(base, user="postgres")
    data = base / "data"
    port = free_port()
    subprocess.run(
        [
            *prefix,
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
        ],
        check=True,
        capture_output=True,
    )
    opts = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    subprocess.run(
        [
            *prefix,
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            opts,
            "-l",
            str(base / "log"),
            "-w",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield PgCluster("127.0.0.1", port)
    finally:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(base, ignore_errors=True)


# -- S3 (moto) -----------------------------------------------------------------------------
@dataclass
class S3Endpoint:
    url: str
    bucket: str

    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ENDPOINT_URL_S3": self.url,
            "MODELWARD_S3_ENDPOINT_URL": self.url,
        }


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[S3Endpoint]:
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    s3 = boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    bucket = unique("bucket")
    s3.create_bucket(Bucket=bucket)
    try:
        yield S3Endpoint(url, bucket)
    finally:
        server.stop()


# -- registry servers ----------------------------------------------------------------------
@dataclass
class Server:
    """One ``modelward serve`` process; restartable on the same port, data and database."""

    data_dir: Path
    admin_token: str
    database_url: str | None = None
    blob_store: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    proc: forkserver.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"serve-{self.port}.log"

    def start(self, timeout: float = 60.0) -> None:
        args = [
            MODELWARD,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]
        if self.database_url:
            args += ["--database-url", self.database_url]
        if self.blob_store:
            args += ["--blob-store", self.blob_store]
        env = {**os.environ, "MODELWARD_BOOTSTRAP_TOKEN": self.admin_token, **self.extra_env}
        env.pop("MODELWARD_URL", None)
        env.pop("MODELWARD_TOKEN", None)
        # its own process group: kill9() ends the supervisor and its workers together;
        # forked from a parent that has imported modelward already (tests/forkserver.py)
        self.proc = forkserver.spawn(args[1:], env, stdout=self.log_path, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"modelward serve exited {self.proc.returncode}:\n{self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    time.sleep(0.2)  # an answer from another process's leftovers: ours exits
                    if self.proc.poll() is not None:
                        raise RuntimeError(
                            f"modelward serve exited {self.proc.returncode} while something "
                            f"else answered on its port:\n{self.log()}"
                        )
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"modelward serve did not become healthy:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def kill9(self) -> None:
        """SIGKILL the whole server: the supervisor and its ``--workers`` processes."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill9()

    def restart(self) -> None:
        self.kill9()
        self.start()


@dataclass
class Actor:
    name: str
    role: str
    token: str
    client: RegistryClient


@dataclass
class Registry:
    """A running registry and an admin client; makes principals, keys and repositories."""

    kind: str
    server: Server
    admin: RegistryClient
    _actors: list[Actor] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def database_url(self) -> str:
        if self.server.database_url:
            return self.server.database_url
        return f"sqlite:///{self.server.data_dir / 'registry.db'}"

    def client(self, token: str | None, **options: Any) -> RegistryClient:
        return RegistryClient(self.url, token, timeout=60, options=TransferOptions(**options))

    def client_env(self) -> dict[str, str]:
        """What a person's machine holds for this registry: its URL, and its TUF root v1
        (saved once, checked out of band in real life) as ``MODELWARD_TRUST_ROOT``, with a
        cache of this registry's own (``XDG_CACHE_HOME``) where signing commands keep the
        metadata they verified from it (docs/tuf.md#what-a-signer-checks)."""
        base = self.server.data_dir.parent / "client"
        root = base / "root.json"
        if not root.exists():
            base.mkdir(parents=True, exist_ok=True)
            root.write_bytes(self.admin.tuf_file("1.root.json"))
        return {
            "MODELWARD_URL": self.url,
            "MODELWARD_TRUST_ROOT": str(root),
            "XDG_CACHE_HOME": str(base / "cache"),
        }

    def actor(self, role: str, name: str | None = None) -> Actor:
        name = name or unique(role[:3])
        self.admin.create_principal(name, role)
        token = str(self.admin.create_token(name)["token"])
        actor = Actor(name, role, token, self.client(token))
        self._actors.append(actor)
        return actor

    def repo(self, *publishers: Actor | Publisher, policy_yaml: str | None = None) -> str:
        """A new repository (created by the admin) that ``publishers`` may publish to."""
        name = f"{unique('o')}/{unique('m')}"
        self.admin.create_repo(name, policy_yaml)
        for p in publishers:
            self.admin.add_publisher(name, p.name)
        return name

    def cli(
        self,
        *args: str,
        token: str | None = None,
        check: bool = False,
        env: dict[str, str] | None = None,
        process: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """``modelward *args`` as this registry's client: in this process (tests/inprocess.py),
        or as a subprocess when the test is about the process (``process=True``)."""
        full_env = {
            **os.environ,
            **self.client_env(),
            "MODELWARD_TOKEN": token or self.server.admin_token,
            **(env or {}),
        }
        if process or os.environ.get("MODELWARD_TEST_CLI") == "process":
            result = forkserver.run(args, full_env, timeout=120)
        else:
            result = run_modelward(args, full_env)
        if check and result.returncode != 0:
            raise AssertionError(
                f"modelward {' '.join(args)} -> {result.returncode}\n"
                f"{result.stdout}\n{result.stderr}"
            )
        return result

    def close(self) -> None:
        for actor in self._actors:
            actor.client.close()
        self.admin.close()


def start_registry(kind: str, base: Path, pg: PgCluster | None, **kw: Any) -> Registry:
    data_dir = base / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    database_url = pg.create_database() if pg is not None else None
    server = Server(
        data_dir=data_dir, admin_token=secrets.token_urlsafe(32), database_url=database_url, **kw
    )
    server.start()
    admin = RegistryClient(server.url, server.admin_token, timeout=60)
    return Registry(kind, server, admin)


@pytest.fixture(
    scope="session", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def registry(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Registry]:
    pg = request.getfixturevalue("pg_cluster") if request.param == "postgres" else None
    reg = start_registry(request.param, tmp_path_factory.mktemp(f"reg-{request.param}"), pg)
    try:
        yield reg
    finally:
        reg.close()
        reg.server.stop()


@pytest.fixture
def fresh_registry(tmp_path: Path) -> Iterator[Registry]:
    """A private SQLite registry for tests that kill or restart the server."""
    reg = start_registry("sqlite", tmp_path, None)
    try:
        yield reg
    finally:
        reg.close()
        reg.server.stop()


# -- bundles -------------------------------------------------------------------------------
def make_bundle_dir(root: Path, *, nonce: str | None = None, big: int = 0) -> Path:
    """A small, scanner-clean bundle: config.json (unique per nonce) and a safetensors file,
    the same bytes for every bundle made in one directory (one test's), other bytes in
    another: a quarantine in one test covers weights no other test shares."""
    import numpy as np
    from safetensors.numpy import save_file

    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(
        json.dumps({"model_type": "llama", "nonce": nonce or unique()})
    )
    seed = int(hashlib.sha256(str(root.parent).encode()).hexdigest()[:6], 16)
    weights = np.arange(16, dtype=np.float32) + np.float32(seed % (1 << 20))
    save_file({"w": weights}, str(root / "model.safetensors"))
    if big:
        n = big // 4
        save_file(
            {"big": np.random.default_rng(0).random(n, dtype=np.float32)},
            str(root / "big.safetensors"),
        )
    return root


def provenance_predicate(built: Any = None) -> dict[str, Any]:
    """A SLSA provenance v1 predicate, as ``modelward bundle sign`` makes it."""
    from datetime import UTC, datetime

    from modelward.attest.provenance import make_provenance

    now = datetime.now(UTC)
    return make_provenance(started_on=now, finished_on=now)


@dataclass
class Publisher:
    actor: Actor
    key: Any
    keyid: str

    @property
    def name(self) -> str:
        return self.actor.name

    def sign(self, built: Any) -> list[bytes]:
        from modelward.attest.dsse import sign_envelope
        from modelward.attest.statement import PredicateType, make_statement

        payload = make_statement(
            "bundle", built.manifest.digest, PredicateType.PROVENANCE, provenance_predicate(built)
        )
        return [sign_envelope(payload, [self.key])]

    def sign_digest(self, digest: str) -> bytes:
        from modelward.attest.dsse import sign_envelope
        from modelward.attest.statement import PredicateType, make_statement

        payload = make_statement(
            "bundle", digest, PredicateType.PROVENANCE, provenance_predicate(None)
        )
        return sign_envelope(payload, [self.key])


def new_publisher(reg: Registry, role: str = "publisher") -> Publisher:
    from modelward.attest.keys import generate_private_key, public_key_pem

    actor = reg.actor(role)
    key = generate_private_key()
    keyid = str(actor.client.register_key(public_key_pem(key.public_key()).decode())["keyid"])
    return Publisher(actor, key, keyid)


def push_new(pub: Publisher, repo: str, tmp: Path, **kw: Any) -> str:
    """Push a fresh unique bundle signed by ``pub``; return its digest."""
    root = make_bundle_dir(tmp / unique("b"))
    return pub.actor.client.push(root, repo, sign=pub.sign, **kw).digest


def run_py(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
