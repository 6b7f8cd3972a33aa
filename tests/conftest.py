"""Fixtures shared by the whole suite."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.tinymodel import make_tiny_llama

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_FIXTURES = REPO_ROOT.parent / "shared" / "fixtures"


@pytest.fixture(scope="session")
def tiny_model_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama written once per session. Do not modify: copy it."""
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama") / "model")


@pytest.fixture
def tiny_model(tiny_model_master: Path, tmp_path: Path) -> Path:
    """A private, writable copy of the tiny Llama model directory."""
    dst = tmp_path / "model"
    shutil.copytree(tiny_model_master, dst)
    return dst


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    """../shared/fixtures (read-only third-party signatures)."""
    if not SHARED_FIXTURES.is_dir():
        pytest.fail(f"shared fixtures missing at {SHARED_FIXTURES}")
    return SHARED_FIXTURES
