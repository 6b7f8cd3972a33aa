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


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``sqlite_only`` run against the SQLite registry alone: their PostgreSQL
    variants are deselected. The attack tests an issue asks for on both databases keep both;
    follow-ups and CLI behaviour that does not depend on the database run once, to keep
    `make test` affordable (README).

    Under pytest-xdist (``make test`` runs ``-n 2 --dist loadgroup``) the tests that boot vLLM
    are one group, run by one worker: their session fixtures (the shared float32 run, the
    perturbed model's run) are then built once, and two vLLM engines never compete for the
    same cores and memory."""
    for item in items:
        if item.get_closest_marker("vllm") is not None:
            item.add_marker(pytest.mark.xdist_group("vllm"))
    drop = [
        item
        for item in items
        if item.get_closest_marker("sqlite_only") is not None
        and getattr(item, "callspec", None) is not None
        and item.callspec.params.get("registry") == "postgres"
    ]
    if drop:
        config.hook.pytest_deselected(items=drop)
        dropped = set(map(id, drop))
        items[:] = [item for item in items if id(item) not in dropped]
