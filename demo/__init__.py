"""The modelward demo: the whole supply-chain story, one real CLI command at a time.

Run it from the repository root with ``make demo`` (or ``.venv/bin/python -m demo``).
"""
