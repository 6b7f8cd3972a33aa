"""32 concurrent writers racing compare-and-swap on one alias: no lost update (SQLite, Postgres)."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

from modelward.client.api import ConflictError, NotFoundError
from tests.registry.conftest import Registry, new_publisher, push_new

WRITERS = 32
ROUNDS = 2


def test_32_writers_race_cas_no_lost_update(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digests = [push_new(pub, repo, tmp_path) for _ in range(3)]
    clients = [registry.client(pub.actor.token) for _ in range(WRITERS)]
    barrier = threading.Barrier(WRITERS)
    wins: list[tuple[int, str]] = []
    losses: list[ConflictError] = []
    other: list[BaseException] = []
    lock = threading.Lock()

    def writer(i: int) -> None:
        client = clients[i]
        for _ in range(ROUNDS):
            try:
                state = client.get_alias(repo, "race")
                version, current = int(state["version"]), state["digest"]
            except NotFoundError:
                version, current = 0, None
            # always a real move: a digest other than the one just read
            target = next(d for d in digests[i % len(digests) :] + digests if d != current)
            barrier.wait(timeout=60)
            try:
                result = client.set_alias(
                    repo, "race", target, expected_version=version, reason=f"writer {i}"
                )
            except ConflictError as exc:
                with lock:
                    losses.append(exc)
            except BaseException as exc:  # surfaced below
                with lock:
                    other.append(exc)
            else:
                with lock:
                    wins.append((int(result["version"]), f"writer {i}"))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not other, other[:3]
    assert len(wins) + len(losses) == WRITERS * ROUNDS
    # each round has exactly one winner per version read; no version granted twice
    versions = [v for v, _ in wins]
    assert len(versions) == len(set(versions)), "two writers got the same version: a lost update"
    assert wins, "nobody won"
    for exc in losses:
        assert exc.current is not None
        assert exc.current["version"] >= 1
    history = pub.actor.client.alias_history(repo, "race")
    assert [h["version"] for h in history] == list(range(1, len(history) + 1))
    # exactly the successful writes are in the history, in version order, chained
    assert sorted(versions) == [h["version"] for h in history]
    assert sorted(wins) == sorted((h["version"], h["reason"]) for h in history)
    for prev, cur in itertools.pairwise(history):
        assert cur["from_digest"] == prev["to_digest"]
    final = pub.actor.client.get_alias(repo, "race")
    assert final["version"] == history[-1]["version"]
    assert final["digest"] == history[-1]["to_digest"]
    for c in clients:
        c.close()
