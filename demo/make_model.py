"""``python -m demo.make_model OUT_DIR [--seed N]``: write the demo's tiny random Llama.

The same model the test suite uses (tests/tinymodel.py): hidden 128, 2 heads, 2 layers, a
byte-level BPE tokenizer trained on the fly. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.make_model", description=__doc__)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    # tests/tinymodel.py is the suite's model factory; imported by name so the demo shares it
    # (run from the repository root, or with it on PYTHONPATH).
    tinymodel = importlib.import_module("tests.tinymodel")
    out: Path = tinymodel.make_tiny_llama(args.out_dir, seed=args.seed)
    names = sorted(p.name for p in out.iterdir() if p.is_file())
    sys.stdout.write(f"wrote {out}: {', '.join(names)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
