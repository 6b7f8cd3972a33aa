"""Hashing benchmark: ``modelward bundle digest`` vs ``model_signing`` vs the hardware limit.

Builds a bundle of N weight files (default 4 files, 2 GiB in all) of random bytes in a
temporary directory (deleted afterwards), warms the page cache, then times, median of R
runs (default 5):

- ``modelward bundle digest DIR``            (CLI, wall clock, process start included)
- ``attest.manifest.build_bundle(DIR)``      (the same work in-process, no start-up)
- ``model_signing sign key DIR ...``         (CLI, EC P-256 key made for the run; when the
                                             peer is not installed, its row and column say
                                             "not run")
- the hardware limit: ``openssl speed -evp sha256 -bytes 8192 -seconds 1`` single-core
  throughput x cores; also ``openssl speed ... -multi CORES`` as measured right now,
  which is what the cores actually deliver on a shared machine.

Usage: .venv/bin/python benchmarks/hash_bench.py [--gib 2] [--files 4] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
CHUNK = 16 * 2**20


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def openssl_sha256(multi: int | None = None) -> float:
    """Bytes/second from ``openssl speed -evp sha256 -bytes 8192 -seconds 1``."""
    cmd = ["openssl", "speed", "-evp", "sha256", "-bytes", "8192", "-seconds", "1"]
    if multi:
        cmd += ["-multi", str(multi)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    match = re.search(r"^sha256\s+([0-9.]+)k\s*$", out, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"cannot parse openssl output:\n{out}")
    return float(match.group(1)) * 1000.0  # openssl's "k" is 1000 bytes


def make_bundle(root: Path, total: int, files: int) -> None:
    root.mkdir()
    per_file = total // files
    for i in range(files):
        with (root / f"model-{i + 1:05d}-of-{files:05d}.safetensors").open("wb") as stream:
            written = 0
            while written < per_file:
                n = min(CHUNK, per_file - written)
                stream.write(os.urandom(n))
                written += n
        (root / f"model-{i + 1:05d}-of-{files:05d}.safetensors").chmod(0o644)


def warm(root: Path) -> None:
    for path in sorted(root.iterdir()):
        with path.open("rb") as stream:
            while stream.read(CHUNK):
                pass


def time_runs(label: str, cmd: list[str], repeats: int) -> tuple[float, str]:
    times, out = [], ""
    for _ in range(repeats):
        start = time.perf_counter()
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        if result.returncode != 0:
            raise RuntimeError(f"{label} failed ({result.returncode}):\n{result.stderr}")
        out = result.stdout.strip()
    print(f"  {label}: runs {', '.join(f'{t:.2f}' for t in times)} s", file=sys.stderr)
    return statistics.median(times), out


def time_in_process(root: Path, repeats: int) -> float:
    from modelward.attest.manifest import build_bundle

    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        build_bundle(root)
        times.append(time.perf_counter() - start)
    print(f"  in-process: runs {', '.join(f'{t:.2f}' for t in times)} s", file=sys.stderr)
    return statistics.median(times)


def write_key(path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as stream:
        stream.write(pem)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0, help="bundle size in GiB")
    parser.add_argument("--files", type=int, default=4, help="number of weight files")
    parser.add_argument("--repeats", type=int, default=5, help="runs per tool (median)")
    parser.add_argument("--dir", type=Path, default=None, help="where to create the bundle")
    args = parser.parse_args()

    total = int(args.gib * 2**30)
    cores = os.cpu_count() or 1
    print(f"machine: {cores} cores, {cpu_model()}, Python {platform.python_version()}")
    print(f"load average before: {loadavg()}")
    work = Path(tempfile.mkdtemp(prefix="modelward-bench-", dir=args.dir))
    try:
        bundle = work / "bundle"
        print(f"writing {args.files} files, {total / 2**30:.2f} GiB in all ...", file=sys.stderr)
        make_bundle(bundle, total, args.files)
        key = work / "bench-key.pem"
        write_key(key)
        warm(bundle)
        warm(bundle)

        single = openssl_sha256()
        multi = openssl_sha256(cores)
        limit = single * cores
        rows: list[tuple[str, float]] = []
        t, digest = time_runs(
            "modelward", [str(BIN / "modelward"), "bundle", "digest", str(bundle)], args.repeats
        )
        rows.append(("`modelward bundle digest` (CLI, incl. start-up)", t))
        rows.append(
            ("`build_bundle()` in-process (no start-up)", time_in_process(bundle, args.repeats))
        )
        t_start, _ = time_runs("start-up", [str(BIN / "modelward"), "--help"], args.repeats)
        peer = BIN / "model_signing"
        t_ms: float | None = None
        if not peer.exists():
            print(f"  model_signing: {peer} not found: not run", file=sys.stderr)
        else:
            t_ms, _ = time_runs(
                "model_signing",
                [
                    str(peer),
                    "--log-level",
                    "WARNING",
                    "sign",
                    "key",
                    str(bundle),
                    "--private_key",
                    str(key),
                    "--signature",
                    str(work / "model.sig"),
                ],
                args.repeats,
            )
            rows.append(("`model_signing sign key` (CLI, incl. start-up)", t_ms))

        print(f"\nload average after: {loadavg()}")
        print(f"bundle digest: {digest}")
        print(
            f"hardware limit: openssl single core {single / 1e6:.0f} MB/s x {cores} cores = "
            f"{limit / 1e6:.0f} MB/s; openssl -multi {cores} measured {multi / 1e6:.0f} MB/s"
        )
        print(f"CLI start-up (`modelward --help`, median): {t_start:.2f} s\n")
        print(
            "| what | median s | MB/s | vs limit (1 core x cores) | vs openssl -multi "
            "| vs model_signing |"
        )
        print("|---|---:|---:|---:|---:|---:|")

        def vs_peer(seconds: float) -> str:
            return "not run" if t_ms is None else f"{t_ms / seconds:.2f}x"

        for label, seconds in rows:
            rate = total / seconds
            print(
                f"| {label} | {seconds:.2f} | {rate / 1e6:.0f} | {rate / limit:.0%} | "
                f"{rate / multi:.0%} | {vs_peer(seconds)} |"
            )
        if t_ms is None:
            print("| `model_signing sign key` (CLI, incl. start-up) | not run | | | | |")
        print(
            f"| openssl single core x {cores} (hardware limit) | {total / limit:.2f} | "
            f"{limit / 1e6:.0f} | 100% | {limit / multi:.0%} | {vs_peer(total / limit)} |"
        )
        print(
            f"| openssl -multi {cores} (measured now) | {total / multi:.2f} | "
            f"{multi / 1e6:.0f} | {multi / limit:.0%} | 100% | {vs_peer(total / multi)} |"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
