"""``/metrics``: the domain gauges (issue 22 item 7; registry/domain_metrics.py), against a
real registry (``modelward serve`` on loopback, SQLite) with a GC window of 2 seconds and
``metrics_public`` on: anonymous scrapes get the HTTP metrics only, a token adds the
gauges. Every value is checked against what the registry itself answers elsewhere."""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.registry.conftest import Registry, new_publisher, push_new, start_registry

DOMAIN = (
    "modelward_tuf_expiry_seconds",
    "modelward_tuf_pending_proposals",
    "modelward_quarantined_digests",
    "modelward_storage_bytes",
    "modelward_gc_reclaimed_bytes",
)


@pytest.fixture
def public_metrics(tmp_path: Path) -> Iterator[Registry]:
    reg = start_registry(
        "sqlite",
        tmp_path,
        None,
        extra_env={"MODELWARD_GC_WINDOW_SECONDS": "2", "MODELWARD_METRICS_PUBLIC": "true"},
    )
    try:
        yield reg
    finally:
        reg.close()
        reg.server.stop()


def _scrape(reg: Registry, token: str | None) -> dict[str, dict[tuple[str, ...], float]]:
    """Every sample by name, then by its label values."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    answer = httpx.get(f"{reg.url}/metrics", headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    samples: dict[str, dict[tuple[str, ...], float]] = {}
    for family in text_string_to_metric_families(answer.text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.values()))] = s.value
    return samples


def _one(samples: dict[str, dict[tuple[str, ...], float]], name: str) -> float:
    (value,) = samples[name].values()
    return value


def _gc(reg: Registry) -> dict[str, int]:
    out = reg.cli("admin", "gc", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    report: dict[str, int] = json.loads(out.stdout)
    return report


def test_domain_gauges_need_a_token_and_match_the_registry(
    public_metrics: Registry, tmp_path: Path
) -> None:
    reg = public_metrics
    reader = reg.actor("reader")
    # (0) anonymous: HTTP metrics only, even with metrics_public
    anonymous = _scrape(reg, None)
    assert "modelward_http_requests_total" in anonymous
    assert not [n for n in anonymous if n.startswith(DOMAIN)]
    bad = httpx.get(f"{reg.url}/metrics", headers={"authorization": "Bearer nope"}, timeout=60)
    assert bad.status_code == 401
    before = _scrape(reg, reader.token)
    assert _one(before, "modelward_quarantined_digests") == 0
    assert _one(before, "modelward_tuf_pending_proposals") == 0
    assert _one(before, "modelward_gc_reclaimed_bytes_total") == 0
    # (1) TUF expiry: each role's seconds left, as its expiry in /v1/tuf/status says
    started = datetime.now(UTC)
    samples = _scrape(reg, reader.token)
    ended = datetime.now(UTC)
    expiry = samples["modelward_tuf_expiry_seconds"]
    roles = reg.admin.tuf_status()["roles"]
    assert {"root", "targets", "snapshot", "timestamp"} <= {r["role"] for r in roles}
    for role in roles:
        expires = datetime.fromisoformat(role["expires"].replace("Z", "+00:00"))
        left = expiry[(role["role"],)]
        assert (expires - ended).total_seconds() <= left <= (expires - started).total_seconds()
    # (2)-(4): a push, then a quarantine proposed and not signed yet
    pub = new_publisher(reg)
    reviewer = new_publisher(reg, "reviewer")
    repo = reg.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    other = push_new(pub, repo, tmp_path)
    reviewer.actor.client.quarantine(repo, other, "suspicious merges")
    samples = _scrape(reg, reader.token)
    assert _one(samples, "modelward_quarantined_digests") == 1
    pending = reg.admin.tuf_status()["pending_proposals"]
    assert _one(samples, "modelward_tuf_pending_proposals") == pending >= 1
    manifests = [json.loads(reg.admin.get_manifest(repo, d)) for d in (digest, other)]
    blobs = {b["digest"]: b["size"] for m in manifests for b in [m["config"], *m["layers"]]}
    assert samples["modelward_storage_bytes"][(repo,)] == sum(blobs.values())
    # (5) GC: an orphan blob is reclaimed; the total is what the runs reported, kept in the
    # database across a restart
    data = secrets.token_bytes(4096)
    with reg.client(pub.actor.token) as client:
        client.put_blob("sha256:" + hashlib.sha256(data).hexdigest(), data, repository=repo)
    reclaimed = 0
    deadline = time.monotonic() + 120
    while reclaimed < len(data):
        assert time.monotonic() < deadline, "GC never collected the orphan"
        report = _gc(reg)
        reclaimed += report["blob_bytes"] + report["upload_bytes"] + report["stray_bytes"]
        time.sleep(1)
    dry = reg.cli("admin", "gc", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert _one(_scrape(reg, reader.token), "modelward_gc_reclaimed_bytes_total") == reclaimed
    reg.server.restart()
    assert _one(_scrape(reg, reader.token), "modelward_gc_reclaimed_bytes_total") == reclaimed
