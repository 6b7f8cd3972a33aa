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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The suite's time per area (``tests/<area>/``), so its budget can be watched from CI's
    output: setup, call and teardown of every test summed (over all xdist workers: it is
    test-seconds, not wall time), largest first."""
    areas: dict[str, float] = {}
    counts: dict[str, int] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if not isinstance(report, pytest.TestReport):
                continue
            parts = report.nodeid.split("/")
            area = parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]
            areas[area] = areas.get(area, 0.0) + report.duration
            if report.when == "call":
                counts[area] = counts.get(area, 0) + 1
    if not areas:
        return
    terminalreporter.write_sep("=", "time per area (test-seconds, all workers)")
    for area, seconds in sorted(areas.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{area:<16} {seconds:8.1f} s  {counts.get(area, 0):5d} tests")
    terminalreporter.write_line(f"{'total':<16} {sum(areas.values()):8.1f} s")
