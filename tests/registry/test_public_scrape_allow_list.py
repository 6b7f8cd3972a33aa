"""Issue 38 item 6: with ``metrics_public``, an anonymous ``/metrics`` scrape is an
allow-list (``registry.app.PUBLIC_METRICS``: the HTTP metrics), against a real ``modelward
serve`` on loopback. The TUF metadata mirror's gauges (added after the rule was written) and
what the registry did not compute again leaked to anonymous scrapes; a token still gets them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from modelward.registry.app import PUBLIC_METRICS
from tests.registry.conftest import Registry, start_registry

PRIVATE = (
    "modelward_tuf_mirror_write_failures",
    "modelward_tuf_mirror_failing",
    "modelward_bundle_evidence",
    "modelward_dry_runs_unaudited",
    "modelward_tuf_expiry_seconds",
    "modelward_quarantined_digests",
)


@pytest.fixture(scope="module")
def public_metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    base: Path = tmp_path_factory.mktemp("public-scrape")
    reg = start_registry("sqlite", base, None, extra_env={"MODELWARD_METRICS_PUBLIC": "true"})
    try:
        yield reg
    finally:
        reg.close()
        reg.server.stop()


def _families(reg: Registry, token: str | None) -> set[str]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    answer = httpx.get(f"{reg.url}/metrics", headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    # the text format shows a counter's ``_created`` samples as a family of their own
    families = text_string_to_metric_families(answer.text)
    return {family.name.removesuffix("_created") for family in families}


def test_an_anonymous_scrape_gets_only_the_listed_metrics_not_the_mirror_gauges(
    public_metrics: Registry,
) -> None:
    reg = public_metrics
    httpx.get(f"{reg.url}/v1/tuf/status", timeout=60)  # at least one request counted
    anonymous = _families(reg, None)
    assert "modelward_http_requests" in anonymous
    assert anonymous <= PUBLIC_METRICS, anonymous - PUBLIC_METRICS
    with_token = _families(reg, reg.actor("reader").token)
    assert set(PRIVATE) <= with_token, set(PRIVATE) - with_token
