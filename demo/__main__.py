"""``python -m demo``: run the story (see demo/run_demo.py)."""

from __future__ import annotations

from demo.run_demo import main

if __name__ == "__main__":
    raise SystemExit(main())
