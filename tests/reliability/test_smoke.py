"""Small runs of the four reliability campaigns (docs/reliability.md); ``make reliability``
runs them at full scale.

Each smoke checks the campaign's own invariants at a small scale, so it fails on a new
finding: an undocumented exception from a parser, a 5xx or a response the schema does not
describe, an acknowledged write lost across ``kill -9``, a lost compare-and-swap update.
Findings already written up in docs/reliability.md (and not fixed yet) are expected
failures (``xfail``) naming their write-up.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from reliability.fuzz.campaign import FINDINGS_DIR, describe, replay, run_target, smoke
from reliability.fuzz.harness import Judge, no_network
from reliability.fuzz.known import known_for
from reliability.fuzz.targets import SHARED_FIXTURES, TARGETS, prepare

needs_fixtures = pytest.mark.skipif(
    not SHARED_FIXTURES.is_dir(), reason=f"shared fixtures missing at {SHARED_FIXTURES}"
)


# -- fuzzing -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fuzz_ctx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare(tmp_path_factory.mktemp("fuzz-ctx"))


@needs_fixtures
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_fuzz_target_smoke(target: str, fuzz_ctx: Path) -> None:
    judge = smoke(target, fuzz_ctx, 500)
    assert judge.executions >= 500
    new = {s: f for s, f in judge.findings.items() if known_for(s) is None}
    assert not new, describe(new)
    if judge.findings:
        refs = sorted({known_for(s).ref for s in judge.findings})  # type: ignore[union-attr]
        pytest.xfail(f"known finding(s): {', '.join(refs)}")


@needs_fixtures
@pytest.mark.parametrize("path", sorted(FINDINGS_DIR.glob("*.input")), ids=lambda p: p.name)
def test_fixed_finding_stays_fixed(path: Path, fuzz_ctx: Path) -> None:
    """The saved input of each finding in docs/reliability.md fails no more (or, while one is
    open and listed in reliability/fuzz/known.py, fails only as written up: xfail)."""
    [(_, finding)] = replay([path], fuzz_ctx)
    if finding is None:
        return
    known = known_for(finding.signature)
    assert known is not None, f"{path.name} fails again:\n{finding.traceback}"
    pytest.xfail(f"{known.ref}: {finding.signature}")


@needs_fixtures
def test_atheris_drives_a_target(fuzz_ctx: Path, tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    result = run_target("manifest", fuzz_ctx, tmp_path, runs=3000, max_time=120)
    assert result.executions >= 3000, result
    assert result.cov, "no coverage feedback: instrumentation broken"
    assert result.cov > 20
    assert not result.findings, result.findings


def test_judge_reports_undocumented_exceptions_and_network_use() -> None:
    def parser(data: bytes) -> None:
        if data == b"bad":
            raise ValueError("documented")
        if data == b"net":
            socket.create_connection(("127.0.0.1", 9))
        {}[data]  # KeyError: not documented

    judge = Judge("t", parser, (ValueError,))
    with no_network():
        judge(b"bad")
        judge(b"key")
        judge(b"net")
    kinds = sorted(f.kind for f in judge.findings.values())
    assert kinds == ["exception", "network"], judge.findings
    assert judge.documented_raised == 1


# -- servers -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sqlite_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from reliability._infra import registry

    with registry("sqlite", tmp_path_factory.mktemp("rel-sqlite")) as reg:
        yield reg


def test_api_fuzz_smoke(sqlite_registry: object, tmp_path: Path) -> None:
    from reliability.api_fuzz import ROLES, known_api_failure, run_one_database

    # every operation once per role (the seeded examples); admin also fuzzes and follows links
    phases = dict.fromkeys(ROLES, "examples") | {"admin": "examples,fuzzing,stateful"}
    result = run_one_database(
        "sqlite",
        sqlite_registry,
        tmp_path,
        examples=3,
        max_time=120,
        roles=ROLES,
        phases=phases,
        checks="not_a_server_error,status_code_conformance,content_type_conformance,"
        "response_schema_conformance,response_headers_conformance",
    )
    failures = [f for r in result["roles"].values() for f in r["failures"]]
    for role, r in result["roles"].items():
        assert r["operations"], f"{role}: schemathesis ran nothing: {r}"
        assert not r["timed_out"], f"{role}: schemathesis did not finish"
    new = [f for f in failures if known_api_failure(f) is None]
    assert not new, new
    assert all(r["server_5xx_in_log"] == 0 for r in result["roles"].values())
    if failures:
        refs = sorted({known_api_failure(f) or "" for f in failures})
        pytest.xfail(f"known schema finding(s): {', '.join(refs)}")


def test_api_report_cut_by_the_time_limit_is_summarized_without_its_last_line(
    tmp_path: Path,
) -> None:
    """A role stopped at its time limit can leave its ndjson report's last line half
    written: summarized without it, and said so; a bad line before the last still raises."""
    import json

    from reliability.api_fuzz import summarize

    whole = json.dumps({"Initialized": {}})
    (tmp_path / "ndjson-1.ndjson").write_text(f"{whole}\n{whole}\n" + whole[:7])
    summary = summarize(tmp_path)
    assert summary["report_truncated"] is True
    assert summary["cases"] == 0
    (tmp_path / "ndjson-1.ndjson").write_text(f"{whole[:7]}\n{whole}\n")
    with pytest.raises(json.JSONDecodeError):
        summarize(tmp_path)
    (tmp_path / "ndjson-1.ndjson").write_text(f"{whole}\n")
    assert summarize(tmp_path)["report_truncated"] is False


def test_crash_smoke_kill9_each_write(tmp_path: Path) -> None:
    from reliability._infra import registry
    from reliability.crash import OPERATIONS, run_one_database

    with registry("sqlite", tmp_path / "reg") as reg:
        # the CLI checks (audit verify, --since across all five crashes) run once, at the end
        result = run_one_database(
            "sqlite", reg, tmp_path, kills=len(OPERATIONS), cli_every=99, calibrations=1
        )
    assert result["kills"] == len(OPERATIONS)
    assert set(result["by_operation"]) == set(OPERATIONS)
    assert not result["findings"], result["findings"]
    assert result["acknowledged_writes"] > 20


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_contention_smoke_no_lost_update(kind: str, tmp_path: Path) -> None:
    from reliability._infra import postgres_for, registry
    from reliability.contention import run_one_database

    with postgres_for((kind,)) as pg:
        if isinstance(pg, str):
            pytest.skip(pg)
        with registry(kind, tmp_path / "reg", pg) as reg:
            result = run_one_database(kind, reg, tmp_path, writers=16, rounds=1, landed=1)
    assert result["successful_writes"] >= 16 + 1
    assert result["lost_updates"] == 0
    assert not result["problems"], result["problems"]
