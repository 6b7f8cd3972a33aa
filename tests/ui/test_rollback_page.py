"""The console's rollback page (issue 37 item 5: "one CLI command and one console page"):
for an alias, the releases it held under valid signatures and can go back to (a
quarantined one listed as refused, the target now left out) and the exact command. Over
HTTP against a real ``serve``: log in with a token, read the page's HTML."""

from __future__ import annotations

import html
import re
from pathlib import Path

import httpx

from tests.registry.conftest import Registry, new_publisher, push_new
from tests.rollouts.fleet_reports import POLICY


def _console(reg: Registry, token: str) -> httpx.Client:
    http = httpx.Client(base_url=reg.url, timeout=60)
    form = http.get("/ui/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None, form.text
    done = http.post("/ui/login", data={"csrf": csrf.group(1), "token": token})
    assert done.status_code == 303, done.text
    return http


def test_rollback_page_lists_the_signed_earlier_releases_and_the_command(
    registry: Registry, tmp_path: Path
) -> None:
    publisher = new_publisher(registry)
    repo = registry.repo(publisher, policy_yaml=POLICY)
    client = publisher.actor.client
    d1, d2, d3 = (push_new(publisher, repo, tmp_path) for _ in range(3))
    for digest in (d1, d2, d3):  # online: each move signed at once
        client.set_alias(repo, "prod", digest)
    registry.admin.quarantine(repo, d1, "a finding")
    http = _console(registry, publisher.actor.token)
    try:
        alias_page = http.get(f"/ui/repos/{repo}/aliases/prod")
        assert f'href="/ui/repos/{repo}/aliases/prod/rollback"' in alias_page.text
        page = http.get(f"/ui/repos/{repo}/aliases/prod/rollback")
    finally:
        http.close()
    assert page.status_code == 200, page.text
    text = html.unescape(page.text)
    rows = re.findall(r'<tr class="rollback-release">(.*?)</tr>', text, re.S)
    assert len(rows) == 2, rows  # d2 and d1; d3 is the target now
    assert d2 in rows[0]  # newest held first
    assert d1 in rows[1]
    command = f"modelward alias rollback {repo}@prod {d2} --reason REASON [--key KEY]"
    assert command in rows[0]
    assert "quarantined: refused" in rows[1]
    assert "alias rollback" not in rows[1]
    assert d3 in text.split('id="rollback-current"')[1].split("</dl>")[0]
    assert "do not apply" in text
    assert "modelward trust sign ID --key KEY" in text
