"""Contention: many writers racing compare-and-swap on one alias, on SQLite and PostgreSQL.

Each writer has its own client (its own connections). Two phases per database:

- **rounds**: ``rounds`` times, every writer reads the alias, all wait at a barrier, then
  all send ``PUT .../aliases/race`` with the version they read (a real move: a digest
  other than the one read). At most one write per version can win; the rest get 409
  ``stale_version`` with the current state.
- **until landed**: every writer keeps re-reading and retrying until ``landed`` of its own
  writes succeeded, so every one of ``writers x landed`` writes must end up in the history.

Every attempt carries a unique reason. Checks: only 2xx or 409 answers (anything else — a
5xx, a "database is locked" — is a finding); every successful write is in the history
exactly once, with the version it was granted; no version granted twice; versions are
1..N without a gap; each entry moves from the previous entry's digest; the final state is
the last successful write; the audit chain verifies and holds one ``alias.set`` (or, for a
move back to a digest the alias held before, ``alias.rollback``) event per successful write.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["run", "run_one_database"]


@dataclass
class Tally:
    wins: list[tuple[int, str, str]] = field(default_factory=list)  # (version, reason, digest)
    conflicts: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _attempt(
    client: Any,
    repo: str,
    digests: list[str],
    *,
    i: int,
    tag: str,
    tally: Tally,
    barrier: threading.Barrier | None,
) -> bool:
    from modelward.client.api import ConflictError, NotFoundError

    try:
        state = client.get_alias(repo, "race")
        version, current = int(state["version"]), state["digest"]
    except NotFoundError:
        version, current = 0, None
    target = next(d for d in digests[i % len(digests) :] + digests if d != current)
    if barrier is not None:
        barrier.wait(timeout=300)
    try:
        answer = client.set_alias(repo, "race", target, expected_version=version, reason=tag)
    except ConflictError as exc:
        with tally.lock:
            tally.conflicts += 1
            if exc.current is None or int(exc.current.get("version", 0)) < 1:
                tally.errors.append(f"{tag}: 409 without the current state: {exc}")
        return False
    except Exception as exc:  # noqa: BLE001 - every other outcome is the finding
        with tally.lock:
            tally.errors.append(f"{tag}: {type(exc).__name__}: {str(exc)[:300]}")
        return False
    with tally.lock:
        tally.wins.append((int(answer["version"]), tag, target))
    return True


def run_one_database(
    kind: str, reg: Any, out: Path, *, writers: int, rounds: int, landed: int
) -> dict[str, Any]:
    """Both phases against one running registry; returns the measured numbers and problems."""
    from tests.registry.conftest import new_publisher, push_new

    work = out / kind
    work.mkdir(parents=True, exist_ok=True)
    pub = new_publisher(reg)
    repo = reg.repo(pub)
    digests = [push_new(pub, repo, work) for _ in range(3)]
    clients = [reg.client(pub.actor.token) for _ in range(writers)]
    tally = Tally()
    started = time.monotonic()

    barrier = threading.Barrier(writers)

    def rounds_writer(i: int) -> None:
        for r in range(rounds):
            _attempt(
                clients[i],
                repo,
                digests,
                i=i,
                tag=f"round {r} writer {i}",
                tally=tally,
                barrier=barrier,
            )

    _all(writers, rounds_writer)
    rounds_s = time.monotonic() - started
    rounds_wins, rounds_conflicts = len(tally.wins), tally.conflicts

    def landing_writer(i: int) -> None:
        got, attempt = 0, 0
        while got < landed and attempt < landed * writers * 4:
            attempt += 1
            got += _attempt(
                clients[i],
                repo,
                digests,
                i=i,
                tag=f"land writer {i} try {attempt}",
                tally=tally,
                barrier=None,
            )

    _all(writers, landing_writer)
    landing_s = time.monotonic() - started - rounds_s
    for c in clients:
        c.close()

    history = reg.admin.alias_history(repo, "race")
    final = reg.admin.get_alias(repo, "race")
    problems, granted_twice = _problems(
        reg, repo, tally, history, final, writers=writers, landed=landed
    )
    return {
        "database": kind,
        "writers": writers,
        "rounds": rounds,
        "landed_per_writer": landed,
        "rounds_phase": {
            "attempts": writers * rounds,
            "wins": rounds_wins,
            "conflicts": rounds_conflicts,
            "seconds": round(rounds_s, 1),
        },
        "landing_phase": {
            "wins": len(tally.wins) - rounds_wins,
            "conflicts": tally.conflicts - rounds_conflicts,
            "seconds": round(landing_s, 1),
        },
        "successful_writes": len(tally.wins),
        "history_entries": len(history),
        "final_version": final["version"],
        "other_errors": len(tally.errors),
        "lost_updates": len(granted_twice) + max(0, len(tally.wins) - len(history)),
        "problems": problems,
    }


def _problems(
    reg: Any,
    repo: str,
    tally: Tally,
    history: list[dict[str, Any]],
    final: dict[str, Any],
    *,
    writers: int,
    landed: int,
) -> tuple[list[str], list[int]]:
    """Every check of the module docstring; returns the problems and the doubly granted
    versions."""
    from modelward.attest.audit.chain import verify_chain
    from modelward.registry.domains.audit.offline import events_from_database

    problems = list(tally.errors)
    versions = [v for v, _, _ in tally.wins]
    granted_twice = [v for v, n in Counter(versions).items() if n > 1]
    if granted_twice:
        problems.append(f"versions granted to two writers (lost updates): {granted_twice[:10]}")
    if [h["version"] for h in history] != list(range(1, len(history) + 1)):
        problems.append("history versions are not 1..N without gaps")
    by_reason = Counter(h["reason"] for h in history)
    for version, reason, digest in tally.wins:
        if by_reason[reason] != 1:
            problems.append(
                f"successful write {reason!r} is in the history {by_reason[reason]} times"
            )
        elif not any(
            h["reason"] == reason and h["version"] == version and h["to_digest"] == digest
            for h in history
        ):
            problems.append(f"successful write {reason!r} (v{version}) differs in the history")
    if len(history) != len(tally.wins):
        problems.append(
            f"history has {len(history)} entries for {len(tally.wins)} successful writes"
        )
    for prev, cur in itertools.pairwise(history):
        if cur["from_digest"] != prev["to_digest"]:
            problems.append(
                f"v{cur['version']} moves from {cur['from_digest']}, not from "
                f"v{prev['version']}'s {prev['to_digest']}"
            )
            break
    last = max(tally.wins) if tally.wins else None
    if last is None or final["version"] != last[0] or final["digest"] != last[2]:
        problems.append(f"final state {final} is not the last successful write {last}")
    landed_per_writer = Counter(int(r.split()[2]) for _, r, _ in tally.wins if r.startswith("land"))
    short = [i for i in range(writers) if landed_per_writer[i] < landed]
    if short:
        problems.append(f"writers that could not land {landed} writes: {short[:10]}")
    try:
        verify_chain(events_from_database(reg.database_url))
    except Exception as exc:  # noqa: BLE001 - the finding
        problems.append(f"audit chain does not verify: {exc}")
    events = [
        e
        for e in reg.admin.iter_audit(after=0)
        if e.get("action") in ("alias.set", "alias.rollback")
        and str(e.get("subject", "")).endswith("@race")
    ]
    if len(events) != len(tally.wins):
        problems.append(
            f"{len(events)} alias.set/alias.rollback audit events for {len(tally.wins)} writes"
        )
    return problems, granted_twice


def _all(n: int, target: Any) -> None:
    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(1800)


def run(
    out: Path,
    *,
    writers: int = 64,
    rounds: int = 20,
    landed: int = 3,
    databases: tuple[str, ...] = ("sqlite", "postgres"),
) -> dict[str, Any]:
    """Both phases on every database; writes and returns ``out/contention.json``."""
    from reliability._infra import each_database

    work = out / "contention"
    started = time.monotonic()
    results = each_database(
        databases,
        work,
        lambda kind, reg: run_one_database(
            kind, reg, work, writers=writers, rounds=rounds, landed=landed
        ),
    )
    summary = {
        "campaign": "contention",
        "seconds": round(time.monotonic() - started, 1),
        "databases": results,
        "new_findings": sum(len(r.get("problems", [])) for r in results),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "contention.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
