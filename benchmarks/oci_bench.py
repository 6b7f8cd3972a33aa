"""OCI benchmark: push and pull through ``/v2`` with skopeo, modelward against Debian's
docker-registry (CNCF distribution 2.8), side by side in one run.

    .venv/bin/python benchmarks/oci_bench.py [--size-mib 2048] [--repeat 3]

Starts ``modelward serve`` (loopback, SQLite, file blob store) and ``docker-registry``
(loopback, filesystem storage, no auth). Each repetition builds a fresh bundle of one
safetensors file of ``--size-mib`` random bytes (a new digest, so nothing is skipped), writes
it as an OCI layout, then times with the same client:

- push: ``skopeo copy --preserve-digests oci:LAYOUT docker://HOST/REPO@DIGEST`` (on modelward
  the manifest is judged by the verifier: scanner over the whole file; it is stored as
  ``pending`` until its signature arrives, which is pushed next as a referrer, untimed);
- pull: ``skopeo copy --preserve-digests docker://HOST/REPO@DIGEST oci:OUT``.

It prints MB/s per run, the medians, the ratios modelward / docker-registry (>= 0.9 is the
target) and each server's peak RSS (all its processes, sampled every 50 ms). Without
``docker-registry`` on the machine its column says "not run"; skopeo is the client of both
columns and is required. Record the table in docs/performance.md#oci. A benchmark, not a
test: nothing asserts on times.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))


def _rss_kib(pids: set[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def _group(pgid: int) -> set[int]:
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.getpgid(int(entry.name)) == pgid:
                    out.add(int(entry.name))
    return out


class PeakRss:
    """Samples the summed RSS of a process group every 50 ms."""

    def __init__(self, pgid: int) -> None:
        self.pgid, self.peak, self._stop = pgid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while self.pgid >= 0 and not self._stop.is_set():  # pgid -1: nothing to sample
            self.peak = max(self.peak, _rss_kib(_group(self.pgid)))
            time.sleep(0.05)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


@contextlib.contextmanager
def docker_registry(base: Path) -> Iterator[tuple[str, int]]:
    from tests.oci.conftest import DOCKER_REGISTRY
    from tests.registry.conftest import free_port

    port = free_port()
    config = base / "peer.yml"
    config.write_text(
        f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {base / 'peer'}\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen(
        [DOCKER_REGISTRY, "serve", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    import httpx

    for _ in range(300):
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/v2/", timeout=1).status_code == 200:
                break
        time.sleep(0.1)
    try:
        yield f"127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


def write_safetensors(path: Path, size: int) -> None:
    """One F32 tensor of ``size`` random bytes, written in 16 MiB pieces (flat memory)."""
    import json
    import struct

    n = size // 4
    header = json.dumps({"w": {"dtype": "F32", "shape": [n], "data_offsets": [0, n * 4]}})
    header += " " * (-len(header) % 8)
    with path.open("wb") as out:
        out.write(struct.pack("<Q", len(header)) + header.encode())
        left = n * 4
        while left:
            piece = min(left, 16 << 20)
            out.write(os.urandom(piece))
            left -= piece


def make_bundle(pub: object, base: Path, size: int, nonce: str) -> object:
    from modelward.attest.manifest import build_bundle
    from tests.oci.conftest import Bundle

    root = base / nonce
    root.mkdir(parents=True)
    (root / "config.json").write_text(f'{{"model_type": "llama", "nonce": "{nonce}"}}')
    write_safetensors(root / "model.safetensors", size)
    built = build_bundle(root)
    return Bundle(root, built, pub.sign(built)[0])  # type: ignore[attr-defined]


def timed(*args: str, auth: Path | None) -> float:
    from tests.oci.conftest import skopeo

    start = time.monotonic()
    skopeo(*args, authfile=auth, timeout=3600)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    size = args.size_mib << 20

    from tests.oci.conftest import DOCKER_REGISTRY, host_of, oras_attach, skopeo_login, write_layout
    from tests.registry.conftest import new_publisher, start_registry

    if shutil.which("skopeo") is None:
        raise SystemExit("oci_bench: skopeo not found (apt-get install skopeo): nothing to measure")
    peer = Path(DOCKER_REGISTRY).exists()
    if not peer:
        print(f"docker-registry not found at {DOCKER_REGISTRY}: its column not run", flush=True)

    base = Path(tempfile.mkdtemp(prefix="oci-bench-"))
    mw = start_registry("sqlite", base / "mw", None)
    names = ["modelward", "docker-registry"] if peer else ["modelward"]
    results: dict[str, dict[str, list[float]]] = {n: {"push": [], "pull": []} for n in names}
    try:
        pub = new_publisher(mw)
        repo = mw.repo(pub.actor)
        auth = base / "auth.json"
        skopeo_login(mw, pub.name, pub.actor.token, auth)
        assert mw.server.proc is not None
        with (
            docker_registry(base) if peer else contextlib.nullcontext(("", 0)) as (
                peer_host,
                peer_pid,
            ),
            PeakRss(os.getpgid(mw.server.proc.pid)) as mw_rss,
            PeakRss(os.getpgid(peer_pid) if peer else -1) as peer_rss,
        ):
            for i in range(args.repeat):
                bundle = make_bundle(pub, base / "bundles", size, f"bench-{i}-{time.time_ns()}")
                layout = write_layout(bundle, base / f"layout-{i}", "v1")  # type: ignore[arg-type]
                digest = bundle.digest  # type: ignore[attr-defined]
                hosts = [("modelward", host_of(mw), auth), ("docker-registry", peer_host, None)]
                for name, host, a in hosts[: len(names)]:
                    ref = f"docker://{host}/{repo}@{digest}"
                    results[name]["push"].append(
                        timed(
                            "copy",
                            "--dest-tls-verify=false",
                            "--preserve-digests",
                            f"oci:{layout}:v1",
                            ref,
                            auth=a,
                        )
                    )
                    if name == "modelward":  # its signature, so it is a bundle (untimed)
                        oras_attach(
                            mw,
                            pub.name,
                            pub.actor.token,
                            repo,
                            subject=digest,
                            subject_size=len(bundle.built.manifest.raw),  # type: ignore[attr-defined]
                            data=bundle.signature,
                            tmp=base,  # type: ignore[attr-defined]
                            artifact_type="application/vnd.in-toto+json",
                        )
                    out = base / f"out-{name}-{i}"
                    results[name]["pull"].append(
                        timed(
                            "copy",
                            "--src-tls-verify=false",
                            "--preserve-digests",
                            ref,
                            f"oci:{out}:v1",
                            auth=a,
                        )
                    )
                    shutil.rmtree(out)
                shutil.rmtree(layout)
                shutil.rmtree(bundle.root)  # type: ignore[attr-defined]
        mb = size / 1e6
        version = subprocess.run(
            ["skopeo", "--version"], capture_output=True, text=True, check=False
        ).stdout.strip()
        print(f"size {args.size_mib} MiB, {args.repeat} runs each, {version}")
        print(f"{'':18}{'push MB/s (median)':>22}{'pull MB/s (median)':>22}{'peak RSS MiB':>14}")
        medians = {}
        for name, rss in (("modelward", mw_rss.peak), ("docker-registry", peer_rss.peak))[
            : len(names)
        ]:
            push = statistics.median(results[name]["push"])
            pull = statistics.median(results[name]["pull"])
            medians[name] = (mb / push, mb / pull)
            runs = ", ".join(f"{mb / t:.0f}" for t in results[name]["push"])
            runs2 = ", ".join(f"{mb / t:.0f}" for t in results[name]["pull"])
            print(
                f"{name:18}{mb / push:>14.0f} ({runs}){mb / pull:>14.0f} ({runs2})"
                f"{rss / 1024:>10.0f}"
            )
        if not peer:
            print(f"{'docker-registry':18}{'not run':>14}{'not run':>22}")
            return
        print(
            f"ratio modelward / docker-registry: push "
            f"{medians['modelward'][0] / medians['docker-registry'][0]:.2f}x, pull "
            f"{medians['modelward'][1] / medians['docker-registry'][1]:.2f}x"
        )
    finally:
        mw.close()
        mw.server.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
