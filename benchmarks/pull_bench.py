"""Pull benchmark (issue 12): ``modelward pull`` against a plain client. Not a timed test.

    .venv/bin/python benchmarks/pull_bench.py [--size-gib 2] [--files 4] [--repeat 3]
        [--workers 4] [--out pull.json]

Starts ``modelward serve`` on loopback (SQLite, file blob store, in a temporary directory),
pushes one bundle of ``--size-gib`` GiB (``--files`` safetensors files of random bytes plus
three tiny JSON configs) signed with a fresh key, aliased ``bench``. Then, in one run,
alternating, ``--repeat`` times each, every run in a new process with a fresh cache/output
directory, the page cache synced before each run, and the server's page cache warm (one
untimed plain pull first); each round starts with the next client:

- ``modelward pull``: ``modelward pull REPO@bench --trust-root root.json --public-key KEY
  --cache-dir DIR`` (the alias resolved through the registry's signed TUF metadata from the
  pinned root, a cold refresh every run as the cache is fresh; verified: hashed against the
  manifest, scanned, signature checked under the worker's policy; materialized read-only
  under the cache);
- ``plain (1)``: a plain Python client (this file, ``--plain``) that resolves the alias
  through the registry's API (its word, no TUF), GETs the manifest and, for each blob,
  streams ``GET /v1/blobs/{digest}`` with httpx, hashes it with sha256 and writes it to a
  file, one blob after another;
- ``plain (N)``: the same, N blobs at a time, N the parallelism pull uses for this bundle
  (``loader.cache.download_workers``: ``--workers``, 4 as in ``modelward pull``, bounded by
  the blobs and the CPUs);
- ``plain (N, unchunked)``: ``plain (N)`` reading ``iter_raw()`` as the transport delivers
  (64 KiB pieces) instead of ``iter_raw(1 MiB)``, which re-chunks through a buffer (copies).

``PYTHONPATH=DIR`` runs ``modelward pull`` from another copy of the package (the "before"
row of docs/performance.md#pull); the output names the copy that ran.

Every time counts the whole process (interpreter start included). Prints MB/s per run,
medians, the ratio of each plain client to pull, and the peak RSS of each process
(VmHWM, sampled every 10 ms). Record the table in docs/performance.md#pull.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from oci_bench import write_safetensors  # one writer of big random safetensors files

REPO_ROOT = Path(__file__).resolve().parent.parent
MODELWARD = str(REPO_ROOT / ".venv" / "bin" / "modelward")
GiB = 2**30
ALIAS = "bench"
FILEPATH = "org.cncf.model.filepath"


# -- the plain client (runs in its own process) ---------------------------------------------
def plain_pull(
    url: str, token: str, repo: str, out: Path, workers: int, read_size: int | None = 1 << 20
) -> None:
    """Resolve, fetch the manifest, then stream + sha256 + write every blob, in pieces of
    ``read_size`` (None: as the transport read them)."""
    import httpx

    org, name = repo.split("/")
    headers = {"Authorization": f"Bearer {token}", "Accept-Encoding": "identity"}
    with httpx.Client(base_url=url, headers=headers, timeout=600) as http:
        digest = (
            http.get(f"/v1/repos/{org}/{name}/aliases/{ALIAS}").raise_for_status().json()["digest"]
        )
        raw = http.get(f"/v1/repos/{org}/{name}/bundles/{digest}/manifest").raise_for_status()
        layers = json.loads(raw.content)["layers"]

        def one(layer: dict[str, Any]) -> None:
            # a plain client trusts the name (pull checks it: modelward.attest.tree)
            target = out / layer["annotations"][FILEPATH]
            target.parent.mkdir(parents=True, exist_ok=True)
            hasher = hashlib.sha256()
            with (
                http.stream("GET", f"/v1/blobs/{layer['digest']}") as response,
                target.open("wb") as fh,
            ):
                response.raise_for_status()
                for block in response.iter_raw(read_size):
                    hasher.update(block)
                    fh.write(block)
            if "sha256:" + hasher.hexdigest() != layer["digest"]:
                raise SystemExit(f"{target}: digest mismatch")

        if workers <= 1:
            for layer in layers:
                one(layer)
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                list(pool.map(one, layers))


# -- the bundle -----------------------------------------------------------------------------
def make_bundle(root: Path, size: int, files: int) -> None:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"model_type": "llama", "nonce": time.time_ns()}))
    (root / "generation_config.json").write_text('{"do_sample": false}')
    (root / "tokenizer_config.json").write_text('{"model_max_length": 2048}')
    for i in range(files):
        write_safetensors(root / f"model-{i + 1:05d}-of-{files:05d}.safetensors", size // files)


# -- timing ---------------------------------------------------------------------------------
def distinct_blobs(client: Any, repo: str, digest: str) -> int:
    """How many blobs pull downloads for ``repo@digest``."""
    from modelward.attest.manifest import parse_manifest

    return len({layer.digest for layer in parse_manifest(client.get_manifest(repo, digest)).layers})


def _hwm_kib(pid: int) -> int:
    """VmHWM of ``pid`` (its own peak RSS since its exec), 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one process.

    The peak is VmHWM sampled every 10 ms (``ru_maxrss`` would also count this process's
    own peak, which a child inherits across fork and exec)."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _hwm_kib(proc.pid))
        time.sleep(0.01)
    elapsed = time.monotonic() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} -> {proc.returncode}\n{err}")
    return elapsed, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gib", type=float, default=2.0)
    parser.add_argument("--files", type=int, default=4, help="safetensors files (default 4)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--workers",
        type=int,
        default=4,
        help="the parallelism pull is asked for (default 4, as the CLI)",
    )
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    parser.add_argument("--unchunked", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--plain", nargs=4, metavar=("URL", "TOKEN", "REPO", "OUT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.plain:
        url, token, repo, out = args.plain
        plain_pull(url, token, repo, Path(out), args.workers, None if args.unchunked else 1 << 20)
        return

    sys.path.insert(0, str(REPO_ROOT))
    from benchmarks._worker_setup import save_trust_root, sign_alias
    from modelward.attest.keys import public_key_pem
    from modelward.loader.cache import download_workers
    from tests.registry.conftest import new_publisher, start_registry

    size = int(args.size_gib * GiB)
    base = Path(tempfile.mkdtemp(prefix="pull-bench-"))
    mw = start_registry("sqlite", base / "mw", None)
    try:
        pub = new_publisher(mw)
        repo = mw.repo(pub.actor)
        src = base / "bundle"
        make_bundle(src, size, args.files)
        pushed = pub.actor.client.push(src, repo, sign=pub.sign, alias=ALIAS)
        sign_alias(pub.actor.client, repo, ALIAS, pub.key)  # as `alias set --key` does
        root = save_trust_root(mw.url, pub.actor.token, base / "root.json")
        total = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
        shutil.rmtree(src)
        key = base / "publisher.pub"
        key.write_bytes(public_key_pem(pub.key.public_key()))
        env = {**os.environ, "MODELWARD_URL": mw.url, "MODELWARD_TOKEN": pub.actor.token}
        py = sys.executable
        me = str(Path(__file__).resolve())

        def cmd(kind: str, out: Path) -> list[str]:
            if kind == "modelward pull":
                return [
                    MODELWARD,
                    "pull",
                    f"{repo}@{ALIAS}",
                    "--trust-root",
                    str(root),
                    "--public-key",
                    str(key),
                    "--cache-dir",
                    str(out),
                ]
            workers = "1" if kind == "plain (1)" else str(par)
            unchunked = ["--unchunked"] if "unchunked" in kind else []
            return [
                py,
                me,
                "--workers",
                workers,
                *unchunked,
                "--plain",
                mw.url,
                pub.actor.token,
                repo,
                str(out),
            ]

        par = download_workers(args.workers, distinct_blobs(pub.actor.client, repo, pushed.digest))
        kinds = list(
            dict.fromkeys(
                ["modelward pull", "plain (1)", f"plain ({par})", f"plain ({par}, unchunked)"]
            )
        )
        where = subprocess.run(
            [py, "-P", "-c", "import modelward; print(modelward.__file__)"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        run_timed(cmd("plain (1)", base / "warm"), env)  # the server's page cache, untimed
        shutil.rmtree(base / "warm")
        times: dict[str, list[float]] = {k: [] for k in kinds}
        rss: dict[str, int] = dict.fromkeys(kinds, 0)
        for i in range(args.repeat):
            # Each round starts with the next client, so none always follows the same one.
            for kind in kinds[i % len(kinds) :] + kinds[: i % len(kinds)]:
                out = base / f"out-{i}-{kinds.index(kind)}"
                os.sync()  # no run pays for the write-back of the previous run's files
                elapsed, peak = run_timed(cmd(kind, out), env)
                times[kind].append(elapsed)
                rss[kind] = max(rss[kind], peak)
                subprocess.run(["chmod", "-R", "u+w", str(out)], check=True)
                shutil.rmtree(out)
                print(f"run {i + 1} {kind:24} {total / elapsed / 1e6:8.0f} MB/s", flush=True)
    finally:
        mw.close()
        mw.server.stop()
        shutil.rmtree(base, ignore_errors=True)

    load = os.getloadavg()
    print(
        f"\n{total / GiB:.2f} GiB ({total} bytes, {args.files} safetensors + 3 configs), "
        f"digest {pushed.digest[:19]}..., {args.repeat} runs each, nproc {os.cpu_count()}, "
        f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\nmodelward pull ran {where.strip()}"
    )
    print("| client | MB/s (median) | runs | vs pull | peak RSS MiB |\n|---|---|---|---|---|")
    pull_mbs = total / statistics.median(times["modelward pull"]) / 1e6
    report: dict[str, Any] = {
        "bytes": total,
        "files": args.files,
        "repeat": args.repeat,
        "nproc": os.cpu_count(),
        "load": load,
        "clients": {},
    }
    for kind in kinds:
        mbs = total / statistics.median(times[kind]) / 1e6
        runs = ", ".join(f"{total / t / 1e6:.0f}" for t in times[kind])
        print(f"| {kind} | {mbs:.0f} | {runs} | {mbs / pull_mbs:.2f}x | {rss[kind] / 1024:.0f} |")
        report["clients"][kind] = {
            "mb_s": mbs,
            "seconds": times[kind],
            "ratio_to_pull": mbs / pull_mbs,
            "peak_rss_kib": rss[kind],
        }
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
