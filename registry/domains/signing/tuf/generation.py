"""A number every server process sharing one TUF keys directory can read for the cost of a
memory load: it changes whenever one of them commits new metadata (docs/tuf.md#serving).

``SharedGeneration`` maps the 8-byte file ``<tuf_keys_dir>/served.generation`` (mode 0600,
created with its directory (0700) on first use; never followed through a symlink). A process
that committed a TUF write stores a new random value (``bump``); the others compare the value
with the one they saw when they last read the database (``read``) and read it again when it
differs. Nothing is counted, so no lock is needed: a torn or repeated write only costs one
extra check.

The ``serve --workers`` processes of one registry, and replicas on one machine sharing a keys
directory, see each other's publishes at once this way; a replica on another machine, or a
program writing the database directly, is seen within ``tuf_freshness_seconds``.
"""

from __future__ import annotations

import mmap
import os
import secrets
from pathlib import Path

__all__ = ["GENERATION_FILE", "SharedGeneration"]

GENERATION_FILE = "served.generation"
_SIZE = 8


class SharedGeneration:
    """The shared 8-byte value in ``path``; raises OSError when it cannot be mapped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # the keys directory may not exist yet on a first start (the keys are made later)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(fd).st_size < _SIZE:
                os.ftruncate(fd, _SIZE)
            self._map = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)

    def read(self) -> bytes:
        """The current value (compare it for equality only)."""
        return self._map[:_SIZE]

    def bump(self) -> None:
        """Store a new value: every reader re-checks on its next read."""
        self._map[:_SIZE] = secrets.token_bytes(_SIZE)

    def close(self) -> None:
        self._map.close()
