"""CLI start-up benchmark: how long the ``modelward`` command takes before it does any work.

Runs each command R times (default 11) as a fresh process and reports the median and the
90th percentile of the wall clock, side by side with the floor (``python -c pass`` in the
same virtual environment) and the peer tool (``model_signing``, whose CLI is click; when it is
not installed its rows say "not run"). Help
output is start-up only; ``bundle digest`` of a one-file bundle is start-up plus
microseconds of hashing; ``alias get`` against a closed loopback port is start-up plus
importing the HTTP client and one refused connection.

Usage: .venv/bin/python benchmarks/cli_startup.py [--repeats 11] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed(argv: list[str], repeats: int, env: dict[str, str]) -> list[float]:
    subprocess.run(argv, capture_output=True, env=env, check=False)  # warm the page cache
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, env=env, check=False)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        bundle = Path(tmp) / "bundle"
        bundle.mkdir()
        (bundle / "config.json").write_text("{}")
        config = Path(tmp) / "config"
        url = f"http://127.0.0.1:{closed_port()}"
        env = {
            **os.environ,
            "XDG_CONFIG_HOME": str(config),
            "COLUMNS": "100",
            "MODELWARD_URL": url,
            "MODELWARD_TOKEN": "mw_benchmark",
        }
        mw = str(BIN / "modelward")
        cases = {
            "python -c pass (floor)": [sys.executable, "-c", "pass"],
            "modelward --help": [mw, "--help"],
            "modelward bundle --help": [mw, "bundle", "--help"],
            "modelward bundle digest DIR (1 file)": [mw, "bundle", "digest", str(bundle)],
            "modelward alias get --help": [mw, "alias", "get", "--help"],
            "modelward login --help": [mw, "login", "--help"],
            "modelward alias get (closed port)": [mw, "alias", "get", "acme/x@prod"],
            "model_signing --help (peer)": [str(BIN / "model_signing"), "--help"],
            "model_signing sign key --help (peer)": [
                str(BIN / "model_signing"),
                "sign",
                "key",
                "--help",
            ],
        }
        rows = {}
        missing = {name for name, argv in cases.items() if not Path(argv[0]).exists()}
        for name in missing:
            print(f"{name}: {cases[name][0]} not found: not run", file=sys.stderr)
        for name, argv in cases.items():
            if name in missing:
                continue
            times = timed(argv, args.repeats, env)
            rows[name] = {
                "median_s": statistics.median(times),
                "p90_s": sorted(times)[int(0.9 * (len(times) - 1))],
                "runs_s": [round(t, 4) for t in times],
            }
    floor = rows["python -c pass (floor)"]["median_s"]
    print(f"{'command':42} {'median':>8} {'p90':>8} {'minus floor':>12}")
    for name, row in rows.items():
        print(
            f"{name:42} {row['median_s']:8.3f} {row['p90_s']:8.3f} {row['median_s'] - floor:12.3f}"
        )
    for name in sorted(missing):
        print(f"{name:42} {'not run':>8}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
