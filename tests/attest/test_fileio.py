"""Command outputs (``--out FILE``): atomic for files, in place for devices and fifos, which
are never renamed over (a root user's ``--out /dev/null`` once replaced the device)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from modelward.attest._fileio import write_output


def test_a_new_or_regular_output_is_replaced_whole(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "out.json"
    write_output(out, b"first")
    write_output(out, b"second")
    assert out.read_bytes() == b"second"
    assert [p.name for p in out.parent.iterdir()] == ["out.json"]  # no temporary left


def test_a_fifo_output_is_written_in_place_not_renamed_over(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    write_output(fifo, b"checkpoint")
    reader.join(timeout=10)
    assert received == [b"checkpoint"]
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_dev_null_stays_a_device() -> None:
    write_output(Path("/dev/null"), b"discarded")
    assert stat.S_ISCHR(Path("/dev/null").stat().st_mode)
