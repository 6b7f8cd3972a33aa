"""A reader cannot make the registry judge the same bundle again and again (issue 30, item 7).

The attack: a reader loops ``alias set --dry-run`` or ``GET .../gates`` on a large bundle;
each request re-scanned every file and re-hashed it for an OMS signature, and each dry run
added an audit event. Bundles are immutable: the registry keeps the evidence per bundle,
attestations and trust (registry/domains/_verdict_cache.py), computes one key once however
many ask at the same time, never serves it once the trust changed, and audits a repeated
dry run once. Observed through ``/metrics`` (``modelward_bundle_evidence_total``) of a real
``modelward serve``.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.registry.conftest import Registry, new_publisher, push_new


def _evidence(registry: Registry) -> dict[str, int]:
    text = httpx.get(
        f"{registry.url}/metrics",
        headers={"Authorization": f"Bearer {registry.server.admin_token}"},
        timeout=30,
    ).text
    found = re.findall(
        r'^modelward_bundle_evidence_total\{result="(\w+)"\} ([0-9.e+]+)$', text, re.M
    )
    return {result: int(float(value)) for result, value in found}


def _delta(before: dict[str, int], after: dict[str, int], result: str) -> int:
    return after.get(result, 0) - before.get(result, 0)


@pytest.mark.sqlite_only
def test_a_readers_repeated_dry_runs_and_gates_do_not_judge_the_bundle_again(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)  # the push judged it: its evidence is kept
    reader = registry.actor("reader")
    before = _evidence(registry)
    assert before, "the registry exports no modelward_bundle_evidence counter"
    answers = [reader.client.dry_run_alias(repo, "dev", digest) for _ in range(5)]
    answers += [reader.client.dry_run_alias(repo, f"dev{i}", digest) for i in range(3)]
    for _ in range(3):
        reader.client.bundle_gates(repo, digest)
    after = _evidence(registry)
    assert all(a["allowed"] is False for a in answers)  # a reader may not move it
    assert _delta(before, after, "computed") == 0
    assert _delta(before, after, "hit") >= 8
    # the same dry run with the same outcome is audited once, not once per request
    events = [
        e
        for e in registry.admin.iter_audit()
        if e["action"] == "alias.dry_run" and e["actor"] == reader.name
    ]
    assert sorted(e["subject"] for e in events) == sorted(
        f"{repo}@{alias}" for alias in ("dev", "dev0", "dev1", "dev2")
    )


@pytest.mark.sqlite_only
def test_concurrent_dry_runs_of_a_bundle_not_yet_judged_compute_its_evidence_once(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    new_publisher(registry)  # a key registered: the trust changed, every verdict is new
    reader = registry.actor("reader")
    before = _evidence(registry)
    with ThreadPoolExecutor(6) as pool:
        answers = list(
            pool.map(lambda i: reader.client.dry_run_alias(repo, f"c{i % 2}", digest), range(6))
        )
    after = _evidence(registry)
    assert len({str(a["checks"]) for a in answers}) == 2  # one answer per alias
    assert _delta(before, after, "computed") == 1


def test_a_revoked_key_is_never_answered_from_kept_evidence(
    registry: Registry, tmp_path: Path
) -> None:
    """The kept evidence is keyed on the trust: once the publisher's key is revoked, its
    provenance no longer counts, on SQLite and PostgreSQL."""
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    assert pub.actor.client.dry_run_alias(repo, "dev", digest)["allowed"] is True
    registry.admin.revoke_key(pub.keyid)
    again = pub.actor.client.dry_run_alias(repo, "dev", digest)
    assert again["allowed"] is False, again
