"""Issue 28 finding 9: unsigned tags are visible without a client printing a ``Warning``
header: ``/metrics`` counts each repository's aliases no signed TUF target names
(``modelward_unsigned_aliases{repository}``, registry/domain_metrics.py), the same ones
``alias list`` marks ``UNSIGNED``; against a real ``serve`` (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.registry.conftest import Registry, new_publisher, push_new

GAUGE = "modelward_unsigned_aliases"


def _unsigned_gauge(reg: Registry, token: str) -> dict[str, float]:
    answer = httpx.get(
        f"{reg.url}/metrics", headers={"authorization": f"Bearer {token}"}, timeout=60
    )
    assert answer.status_code == 200, answer.text
    return {
        s.labels["repository"]: s.value
        for family in text_string_to_metric_families(answer.text)
        for s in family.samples
        if s.name == GAUGE
    }


def test_the_unsigned_alias_gauge_counts_what_alias_list_marks_unsigned(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    push_new(pub, repo, tmp_path, alias="dev")  # moved on the registry's word: no key signed
    push_new(pub, repo, tmp_path, alias="nightly")
    listed = json.loads(registry.cli("alias", "list", repo, "--json", check=True).stdout)
    unsigned = [a["alias"] for a in listed["aliases"] if not a["signed"]]
    assert unsigned == ["dev", "nightly"]
    gauge = _unsigned_gauge(registry, registry.server.admin_token)
    assert gauge[repo] == len(unsigned)
    # a repository without aliases has no sample; a reader sees the same counts
    empty = registry.repo(pub)
    reader = registry.actor("reader")
    assert empty not in _unsigned_gauge(registry, reader.token)
    assert _unsigned_gauge(registry, reader.token)[repo] == len(unsigned)
    # anonymous scrapes never see it (it names repositories)
    anonymous = httpx.get(f"{registry.url}/metrics", timeout=60)
    assert GAUGE not in anonymous.text
