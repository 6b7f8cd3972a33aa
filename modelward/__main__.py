"""``python -m modelward``: the same as the ``modelward`` command."""

from modelward.cli import main

main()
