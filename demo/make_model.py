"""``python -m demo.make_model OUT_DIR [--seed N]``: write the demo's tiny random Llama.

The same model the test suite uses (demo/tinymodel.py): hidden 128, 2 heads, 2 layers, a
byte-level BPE tokenizer trained on the fly. Nothing is downloaded. Run it from the
repository root (no PYTHONPATH needed); ``demo.tinymodel.make_tiny_llama`` is the same thing
as a function.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from demo.tinymodel import make_tiny_llama

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.make_model", description=__doc__)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = make_tiny_llama(args.out_dir, seed=args.seed)
    names = sorted(p.name for p in out.iterdir() if p.is_file())
    sys.stdout.write(f"wrote {out}: {', '.join(names)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
