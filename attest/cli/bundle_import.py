"""Commands registered on the groups in attest.cli._apps (filled in by its issue)."""

from __future__ import annotations
