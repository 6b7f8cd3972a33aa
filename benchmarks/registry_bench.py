"""Registry benchmark (issue 4): a benchmark, not a timed test.

In one run:
  1. push and pull an N GiB bundle through ``modelward serve`` on loopback (registry client,
     resumable chunked upload, digest-checked streamed download with ``unsafe_fetch``: the
     transfer alone, no signature or policy check), against the plain-file peer:
     nginx serving the same file (PUT via WebDAV with ``curl -T``, GET with ``curl`` then
     ``sha256sum``);
  2. peak RSS of server and client moving each size in ``--rss-sizes`` (must not grow with size);
  3. alias resolves per second and p99 latency with 50 concurrent authenticated clients on
     PostgreSQL (``wrk -t2 -c50``), side by side with MLflow's ``mlflow server`` on the same
     PostgreSQL answering ``GET /api/2.0/mlflow/registered-models/alias``.

Peers are optional: nginx/wrk from Debian (``apt-get install nginx wrk``), MLflow from a
separate venv (``--mlflow-venv DIR`` with ``mlflow`` and ``psycopg2-binary``). Missing peers are
reported as "not run". Prints a Markdown table and writes JSON to ``--out``.

    .venv/bin/python benchmarks/registry_bench.py --size-gib 2 --rss-sizes 2,8 --out bench.json

``--skip-transfer`` runs the alias rows only, ``--skip-mlflow`` leaves out the MLflow peer,
``--workers N`` passes ``serve --workers N`` for the alias row (default: serve's own default).
wrk's latency percentiles leave out requests that hit its 2 s timeout; the JSON keeps wrk's
``Socket errors`` line so such timeouts stay visible.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
MODELWARD = str(REPO / ".venv" / "bin" / "modelward")
GiB = 2**30


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, timeout: float = 120.0, ok: tuple[int, ...] = (200,)) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code in ok:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def peak_rss_mib(pid: int) -> float:
    """VmHWM (peak resident set) of a live process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_measured(args: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Run a child to completion; return (seconds, its peak RSS in MiB) via wait4."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{args[:3]} exited {proc.returncode}")
    return elapsed, usage.ru_maxrss / 1024


# -- PostgreSQL (the machine's binaries, as the postgres user when root) ------------------
class Postgres:
    def __init__(self) -> None:
        found = shutil.which("pg_ctl") or next(
            iter(sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), reverse=True)), None
        )
        if not found:
            raise RuntimeError("no PostgreSQL binaries")
        self.bindir = Path(found).resolve().parent
        self.prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.base = Path(tempfile.mkdtemp(prefix="mw-bench-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.base, user="postgres")
        self.port = free_port()
        data = str(self.base / "data")
        subprocess.run(
            [
                *self.prefix,
                str(self.bindir / "initdb"),
                "-D",
                data,
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
        )
        opts = f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c max_connections=300"
        subprocess.run(
            [
                *self.prefix,
                str(self.bindir / "pg_ctl"),
                "-D",
                data,
                "-o",
                opts,
                "-l",
                str(self.base / "log"),
                "-w",
                "start",
            ],
            check=True,
            capture_output=True,
        )

    def database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        subprocess.run(
            [
                *self.prefix,
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.base / "data"),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(self.base, ignore_errors=True)


# -- the registry ----------------------------------------------------------------------------
class Serve:
    def __init__(
        self, work: Path, database_url: str | None = None, workers: int | None = None
    ) -> None:
        self.token = secrets.token_urlsafe(32)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        data = work / f"serve-{self.port}"
        data.mkdir(parents=True)
        args = [
            MODELWARD,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data-dir",
            str(data),
        ]
        if database_url:
            args += ["--database-url", database_url]
        if workers is not None:
            args += ["--workers", str(workers)]
        env = {
            **os.environ,
            "MODELWARD_BOOTSTRAP_TOKEN": self.token,
            "MODELWARD_LOG_LEVEL": "warning",
        }
        self.log = (work / f"serve-{self.port}.log").open("wb")
        self.proc = subprocess.Popen(args, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:  # up, or a clear error as soon as the server exits
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                log = (data.parent / f"serve-{self.port}.log").read_text(errors="replace")
                raise RuntimeError(f"modelward serve did not come up:\n{log[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def make_big_bundle(root: Path, size: int) -> Path:
    """A bundle with one safetensors file of ``size`` bytes (random payload, tiny header)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(
        json.dumps({"model_type": "llama", "n": secrets.token_hex(4)})
    )
    header = json.dumps({"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}})
    header += " " * (-len(header) % 8)
    block = os.urandom(8 * 2**20)
    with (root / "model.safetensors").open("wb") as fh:
        fh.write(len(header).to_bytes(8, "little") + header.encode())
        left = size
        while left:
            n = min(left, len(block))
            fh.write(block[:n])
            left -= n
    return root


CLIENT_SNIPPET = """
import sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from modelward.client.api import RegistryClient, TransferOptions, parse_reference
url, token, op, a, b = sys.argv[1:6]
opts = TransferOptions(workers=4, state_dir=Path(a).parent / "state")
with RegistryClient(url, token, options=opts, timeout=600) as c:
    if op == "push":
        from tests.registry.conftest import Publisher
        import json
        pub = json.loads(Path(b).read_text())
        from modelward.attest.keys import load_private_key
        key = load_private_key(Path(pub["key"]))
        p = Publisher(actor=None, key=key, keyid="")
        print(c.push(Path(a), pub["repo"], sign=p.sign, alias="bench").digest)
    else:
        # Digests only, no signature or policy check: a transfer benchmark, not a load.
        import warnings
        from modelward.client.errors import UnsafeFetchWarning
        warnings.simplefilter("ignore", UnsafeFetchWarning)
        c.unsafe_fetch(parse_reference(b), Path(a))
"""


def bench_transfer(work: Path, size: int, serve: Serve) -> dict[str, Any]:
    from modelward.attest.keys import generate_private_key, public_key_pem, save_private_key
    from modelward.client.api import RegistryClient

    admin = RegistryClient(serve.url, serve.token, timeout=600)
    name = f"p{secrets.token_hex(4)}"
    admin.create_principal(name, "publisher")
    token = str(admin.create_token(name)["token"])
    pubc = RegistryClient(serve.url, token)
    key = generate_private_key()
    pubc.register_key(public_key_pem(key.public_key()).decode())
    repo = f"bench/m{secrets.token_hex(4)}"
    admin.create_repo(repo)
    admin.add_publisher(repo, name)
    save_private_key(key, work / f"{name}.pem")
    (work / f"{name}.json").write_text(json.dumps({"key": str(work / f"{name}.pem"), "repo": repo}))
    root = make_big_bundle(work / f"bundle-{size}", size)
    code = CLIENT_SNIPPET.format(repo=str(REPO))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    push_s, push_rss = run_measured(
        [PY, "-c", code, serve.url, token, "push", str(root), str(work / f"{name}.json")], env
    )
    pull_dir = work / f"pulled-{size}"
    pull_s, pull_rss = run_measured(
        [PY, "-c", code, serve.url, token, "pull", str(pull_dir), f"{repo}@bench"], env
    )
    result = {
        "bytes": size,
        "push_s": push_s,
        "pull_s": pull_s,
        "push_MBps": size / push_s / 1e6,
        "pull_MBps": size / pull_s / 1e6,
        "client_push_rss_mib": push_rss,
        "client_pull_rss_mib": pull_rss,
        "server_peak_rss_mib": peak_rss_mib(serve.proc.pid),
    }
    shutil.rmtree(pull_dir, ignore_errors=True)
    admin.close()
    pubc.close()
    return result | {"source": root}


def bench_nginx(work: Path, src: Path) -> dict[str, Any] | None:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        return None
    port = free_port()
    root = work / "nginx-root"
    root.mkdir(exist_ok=True)
    conf = work / "nginx.conf"
    user = "user root;" if os.geteuid() == 0 else ""  # workers must read the temp dirs
    conf.write_text(f"""
{user} daemon off; worker_processes 2; pid {work}/nginx.pid; error_log {work}/nginx-error.log;
events {{ worker_connections 1024; }}
http {{ access_log off; client_max_body_size 0; client_body_temp_path {work}/nginx-tmp;
  proxy_temp_path {work}/nginx-tmp; fastcgi_temp_path {work}/nginx-tmp;
  uwsgi_temp_path {work}/nginx-tmp; scgi_temp_path {work}/nginx-tmp; sendfile on;
  server {{ listen 127.0.0.1:{port}; root {root}; dav_methods PUT; create_full_put_path on; }} }}
""")
    proc = subprocess.Popen([nginx, "-c", str(conf), "-p", str(work)])
    try:
        wait_http(f"http://127.0.0.1:{port}/", ok=(200, 403, 404))
        url = f"http://127.0.0.1:{port}/blob"
        t0 = time.perf_counter()
        subprocess.run(["curl", "-sf", "-T", str(src), url], check=True)
        put_s = time.perf_counter() - t0
        out = work / "nginx-got"
        t0 = time.perf_counter()
        subprocess.run(["curl", "-sf", "-o", str(out), url], check=True)
        subprocess.run(["sha256sum", str(out)], check=True, capture_output=True)
        get_s = time.perf_counter() - t0
        size = src.stat().st_size
        out.unlink()
        return {
            "put_s": put_s,
            "get_s": get_s,
            "put_MBps": size / put_s / 1e6,
            "get_MBps": size / get_s / 1e6,
        }
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(root, ignore_errors=True)


def wrk(
    url: str, headers: dict[str, str], duration: int, conns: int, script: Path | None = None
) -> dict[str, Any] | None:
    """``wrk -t2`` against ``url`` (``script``: a Lua file choosing each request's path)."""
    if shutil.which("wrk") is None:
        return None
    args = ["wrk", "-t2", f"-c{conns}", f"-d{duration}s", "--latency"]
    if script is not None:
        args += ["-s", str(script)]
    for k, v in headers.items():
        args += ["-H", f"{k}: {v}"]
    out = subprocess.run([*args, url], check=True, capture_output=True, text=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}

    def percentile_ms(p: int) -> float:
        found = re.search(rf"\b{p}%\s+([\d.]+)(us|ms|s)\b", out)
        return float(found.group(1)) * scale[found.group(2)] if found else float("nan")

    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors:.*", out)
    return {
        "rps": rps,
        "p50_ms": percentile_ms(50),
        "p99_ms": percentile_ms(99),
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": errors.group(0) if errors else None,
    }


def bench_alias(
    work: Path, pg: Postgres, duration: int, conns: int, workers: int | None
) -> dict[str, Any] | None:
    from modelward.client.api import RegistryClient

    sys.path.insert(0, str(REPO))
    from tests.registry.conftest import make_bundle_dir

    db = pg.database(f"mwbench{secrets.token_hex(3)}")
    serve = Serve(work, f"postgresql+psycopg://postgres@{db}", workers)
    try:
        admin = RegistryClient(serve.url, serve.token)
        from modelward.attest.keys import generate_private_key, public_key_pem

        key = generate_private_key()
        admin.register_key(public_key_pem(key.public_key()).decode())
        admin.create_repo("bench/alias")
        from tests.registry.conftest import Publisher

        pub = Publisher(actor=None, key=key, keyid="")  # type: ignore[arg-type]
        digest = admin.push(
            make_bundle_dir(work / "alias-bundle"), "bench/alias", sign=pub.sign, alias="dev"
        ).digest
        reader = "r" + secrets.token_hex(4)
        admin.create_principal(reader, "reader")
        token = str(admin.create_token(reader)["token"])
        url = f"{serve.url}/v1/repos/bench/alias/aliases/dev"
        assert (
            httpx.get(url, headers={"Authorization": f"Bearer {token}"}).json()["digest"] == digest
        )
        result = wrk(url, {"Authorization": f"Bearer {token}"}, duration, conns)
        print(f"modelward alias resolve: {result}", file=sys.stderr)
        return None if result is None else result | {"workers": workers or "default"}
    finally:
        serve.stop()


def bench_mlflow(
    work: Path, pg: Postgres, venv: Path | None, duration: int, conns: int
) -> dict[str, Any] | None:
    mlflow = venv / "bin" / "mlflow" if venv else None
    if mlflow is None or not mlflow.exists():
        return None
    port = free_port()
    db = pg.database("mlflowbench")
    log = (work / "mlflow.log").open("wb")
    proc = subprocess.Popen(
        [
            str(mlflow),
            "server",
            "--backend-store-uri",
            f"postgresql+psycopg2://postgres@{db}",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "2",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}/api/2.0/mlflow"
    try:
        wait_http(f"http://127.0.0.1:{port}/health", timeout=600)
        httpx.post(f"{base}/registered-models/create", json={"name": "bench"}).raise_for_status()
        httpx.post(
            f"{base}/model-versions/create", json={"name": "bench", "source": "s3://bench/model"}
        ).raise_for_status()
        httpx.post(
            f"{base}/registered-models/alias",
            json={"name": "bench", "alias": "dev", "version": "1"},
        ).raise_for_status()
        result = wrk(f"{base}/registered-models/alias?name=bench&alias=dev", {}, duration, conns)
        print(f"mlflow alias resolve: {result}", file=sys.stderr)
        return result
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def _guarded(fn: Any, *args: Any) -> Any:
    """Run a peer measurement; a peer that fails is reported, not fatal."""
    try:
        return fn(*args)
    except (RuntimeError, OSError, httpx.HTTPError, subprocess.SubprocessError) as exc:
        print(f"peer {fn.__name__} failed: {exc}", file=sys.stderr)
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-gib", type=float, default=2.0)
    parser.add_argument("--rss-sizes", default="2,8", help="GiB sizes for the RSS rows")
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--mlflow-venv", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--skip-transfer", action="store_true", help="alias rows only")
    parser.add_argument("--skip-mlflow", action="store_true", help="no MLflow peer row")
    parser.add_argument(
        "--workers", type=int, default=None, help="serve --workers for the alias row"
    )
    parser.add_argument("--out", type=Path, default=Path("registry-bench.json"))
    opts = parser.parse_args()
    work = opts.work or Path(tempfile.mkdtemp(prefix="mw-bench-"))
    results: dict[str, Any] = {
        "transfer": [],
        "peer_nginx": None,
        "connections": opts.connections,
        "machine": {"nproc": os.cpu_count(), "loadavg_start": os.getloadavg()},
        "argv": sys.argv[1:],
    }
    pg = Postgres()
    try:
        sizes = sorted({opts.size_gib, *(float(s) for s in opts.rss_sizes.split(",") if s)})
        for gib in [] if opts.skip_transfer else sizes:
            serve = Serve(work)  # a fresh server per size: its peak RSS is that size's
            try:
                row = bench_transfer(work, int(gib * GiB), serve)
            finally:
                serve.stop()
            src = row.pop("source")
            if gib == opts.size_gib:
                results["peer_nginx"] = _guarded(bench_nginx, work, src / "model.safetensors")
            shutil.rmtree(src, ignore_errors=True)
            shutil.rmtree(work / f"serve-{serve.port}", ignore_errors=True)
            results["transfer"].append(row)
        opts.out.write_text(json.dumps(results, indent=2))
        results["alias_modelward"] = bench_alias(
            work, pg, opts.duration, opts.connections, opts.workers
        )
        opts.out.write_text(json.dumps(results, indent=2))
        if not opts.skip_mlflow:
            results["alias_mlflow"] = _guarded(
                bench_mlflow, work, pg, opts.mlflow_venv, opts.duration, opts.connections
            )
        results["machine"]["loadavg_end"] = os.getloadavg()
    finally:
        pg.stop()
        if opts.work is None:  # our own temp dir: blob stores and pulled copies go with it
            shutil.rmtree(work, ignore_errors=True)
    opts.out.write_text(json.dumps(results, indent=2))
    print(render(results))


def render(r: dict[str, Any]) -> str:
    lines = ["| measurement | modelward | peer |", "|---|---|---|"]
    ng = r.get("peer_nginx")
    for row in r["transfer"]:
        gib = row["bytes"] / GiB
        peer_put = f"{ng['put_MBps']:.0f} MB/s (nginx PUT)" if ng and gib else "not run"
        peer_get = f"{ng['get_MBps']:.0f} MB/s (curl + sha256sum)" if ng else "not run"
        lines.append(
            f"| push {gib:g} GiB | {row['push_MBps']:.0f} MB/s ({row['push_s']:.1f} s) "
            f"| {peer_put} |"
        )
        lines.append(
            f"| pull {gib:g} GiB | {row['pull_MBps']:.0f} MB/s ({row['pull_s']:.1f} s) "
            f"| {peer_get} |"
        )
        lines.append(
            f"| peak RSS {gib:g} GiB: server / client push / client pull | "
            f"{row['server_peak_rss_mib']:.0f} / {row['client_push_rss_mib']:.0f} / "
            f"{row['client_pull_rss_mib']:.0f} MiB | |"
        )
    mw, ml = r.get("alias_modelward"), r.get("alias_mlflow")

    def fmt(x: dict[str, Any] | None) -> str:
        if not x:
            return "not run"
        return f"{x['rps']:.0f} req/s, p50 {x['p50_ms']:.1f} ms, p99 {x['p99_ms']:.1f} ms"

    conns = r.get("connections", 50)
    lines.append(
        f"| alias resolve, {conns} clients (PostgreSQL) | {fmt(mw)} | {fmt(ml)} (MLflow) |"
    )
    if mw and ml:
        lines.append(f"| alias resolve ratio modelward / MLflow | {mw['rps'] / ml['rps']:.1f}× | |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
