"""``python -m modelward.rehearsal fleet|worker ...`` (docs/rollouts.md#rehearsal)."""

from __future__ import annotations

import sys

USAGE = (
    "usage: python -m modelward.rehearsal fleet REF --workers N --dir DIR ...\n"
    "       python -m modelward.rehearsal worker REF --cache-dir D ...\n"
    "(--help after either for its options; docs/rollouts.md#rehearsal)\n"
)


def main(argv: list[str]) -> int:
    """Dispatch to ``fleet`` or ``worker``."""
    if not argv or argv[0] not in ("fleet", "worker"):
        sys.stderr.write(USAGE)
        return 2
    if argv[0] == "fleet":
        from modelward.rehearsal.fleet import main as fleet

        return fleet(argv[1:])
    from modelward.rehearsal.worker import main as worker

    return worker(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
