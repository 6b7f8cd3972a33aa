"""The checkpoint key file: created once with mode 0600 at the default path, never created at a
configured one, refused when other users can read it."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from modelward.registry.domains.audit.keyfile import (
    CheckpointKeyUnavailable,
    checkpoint_signer,
    create_signer_file,
    read_signer_file,
)
from modelward.registry.settings import Settings


def test_default_key_is_created_once_with_mode_0600(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    with ThreadPoolExecutor(8) as pool:  # processes starting together end up with one key
        signers = list(pool.map(lambda _: checkpoint_signer(settings), range(16)))
    assert len({s.verifier.key_string for s in signers}) == 1
    path = tmp_path / "data" / "audit-checkpoint.key"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.read_text().startswith("PRIVATE+KEY+modelward.invalid/audit/")
    assert sorted(p.name for p in path.parent.iterdir()) == ["audit-checkpoint.key"]
    assert read_signer_file(path) == signers[0]


def test_a_configured_key_path_is_never_created(tmp_path: Path) -> None:
    missing = tmp_path / "mounted" / "audit.key"
    with pytest.raises(CheckpointKeyUnavailable, match="does not exist"):
        checkpoint_signer(Settings(data_dir=tmp_path, audit_checkpoint_key=missing))
    assert not missing.exists()
    made = create_signer_file(missing, "registry.example/audit")
    with pytest.raises(FileExistsError):
        create_signer_file(missing, "registry.example/audit")
    signer = checkpoint_signer(Settings(data_dir=tmp_path, audit_checkpoint_key=missing))
    assert signer == made
    assert signer.name == "registry.example/audit"


def test_a_key_file_other_users_can_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "k"
    create_signer_file(path, "registry.example/audit")
    path.chmod(0o640)
    with pytest.raises(CheckpointKeyUnavailable, match="chmod 600"):
        read_signer_file(path)


def test_a_symlinked_or_garbled_key_file_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    create_signer_file(real, "registry.example/audit")
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(CheckpointKeyUnavailable):
        read_signer_file(link)
    garbled = tmp_path / "garbled"
    fd = os.open(garbled, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"PRIVATE+KEY+x+00000000+AAAA\n")
    os.close(fd)
    with pytest.raises(CheckpointKeyUnavailable, match="not a checkpoint key"):
        read_signer_file(garbled)
