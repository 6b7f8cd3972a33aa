"""The console never misleads (issue 36 item 5, issue 39 items 1-4, issue 37 item 1): each
page state in a real browser against the shared registry — a published proposal, a partly
signed one after its signer rotated a key, a separation-of-duties warning, an unsigned then a
signed quarantine, and a rollout from its plan's proposal to its abort — every fact labelled
with who vouches for it. SQLite only: the pages read the same service functions over either
database (tests/ui/test_console.py runs the read rules on PostgreSQL)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from modelward.attest.keys import generate_private_key, public_key_pem, save_private_key
from tests.registry.conftest import (
    Publisher,
    Registry,
    make_bundle_dir,
    new_publisher,
    push_new,
)
from tests.ui.test_console import (
    _evaluate,
    _login,
    _no_injection,
    _push,
    _session,
    _shoot,
    browser,
    shots,
)

__all__ = ["browser", "shots"]

pytestmark = [pytest.mark.xdist_group("ui-console"), pytest.mark.sqlite_only]


def _policy(evaluator: str) -> str:
    return (
        "version: 1\ntrust_registered_signers: true\n"
        f"evidence: {{principals: [{evaluator}]}}\naliases:\n"
        "  - {pattern: prod, roles: [publisher, admin], protected: true, approvals: 2, "
        "gates: {min_deterministic_pass_rate: 0.9, max_critical_safety_failures: 0}}\n"
        "  - {pattern: live, roles: [publisher, reviewer], protected: true, approvals: 1}\n"
        "  - {pattern: '*', roles: [publisher, admin]}\n"
    )


@dataclass
class Council:
    reg: Registry
    pub: Publisher
    rev1: Publisher  # the evaluator too
    rev2: Publisher
    repo: str
    old: str
    new: str
    published: int  # prod -> old, signed by rev1 and rev2
    partly: int  # prod old -> new, signed by rev1 with the key she registered after
    key1: Path
    key2: Path


def _ok(done: object) -> str:
    assert done.returncode == 0, done.stderr  # type: ignore[attr-defined]
    return str(done.stdout)  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def council(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> Council:
    tmp = tmp_path_factory.mktemp("council")
    pub = new_publisher(registry)
    rev1, rev2 = new_publisher(registry, "reviewer"), new_publisher(registry, "reviewer")
    repo = registry.repo(pub, policy_yaml=_policy(rev1.name))
    root = make_bundle_dir(tmp / "bundle")
    old = _push(pub, repo, root, {"model_type": "llama", "max_model_len": 256})
    new = _push(pub, repo, root, {"model_type": "llama", "max_model_len": 128})
    key1, key2 = tmp / "rev1.key", tmp / "rev2.key"
    save_private_key(rev1.key, key1)
    save_private_key(rev2.key, key2)
    _evaluate(registry, rev1, key1, f"{repo}@{old}", tmp, None)
    _evaluate(registry, rev1, key1, f"{repo}@{new}", tmp, f"{repo}@{old}")
    first = json.loads(
        _ok(registry.cli("alias", "set", f"{repo}@prod", old, "--json", token=pub.actor.token))
    )
    published = int(first["pending"]["id"])
    for who, key in ((rev1, key1), (rev2, key2)):
        _ok(
            registry.cli(
                "approve",
                f"{repo}@{old}",
                "--alias",
                "prod",
                "--key",
                str(key),
                token=who.actor.token,
            )
        )
    second = registry.cli(
        "alias", "set", f"{repo}@prod", new, "--reason", "shorter context", "--json",
        token=pub.actor.token,
    )  # fmt: skip
    partly = int(json.loads(_ok(second))["pending"]["id"])
    # rev1 rotates: a new key, registered now, that prod's role does not name yet
    rotated = generate_private_key()
    pem = public_key_pem(rotated.public_key()).decode()
    rev1.actor.client.register_key(pem)
    key1 = tmp / "rev1-new.key"
    save_private_key(rotated, key1)
    _ok(
        registry.cli(
            "approve",
            f"{repo}@{new}",
            "--alias",
            "prod",
            "--key",
            str(key1),
            token=rev1.actor.token,
        )
    )
    return Council(registry, pub, rev1, rev2, repo, old, new, published, partly, key1, key2)


def _text(d: object, ident: str) -> str:
    from selenium.webdriver.common.by import By

    return str(d.find_element(By.ID, ident).text)  # type: ignore[attr-defined]


def _has(d: object, ident: str) -> bool:
    from selenium.webdriver.common.by import By

    return bool(d.find_elements(By.ID, ident))  # type: ignore[attr-defined]


def test_partly_signed_after_a_key_rotation_counts_people_and_flags_the_evaluator(
    council: Council, browser: object, shots: Path
) -> None:
    from selenium.webdriver.common.by import By

    c, d = council, browser
    _login(d, c.reg.url, c.rev2.actor.token)
    # the home page's pending list: the reason and the from-digest
    pending = _text(d, "pending")
    assert f"#{c.partly} {c.repo}@prod" in pending
    assert "shorter context" in pending
    assert c.old[:19] in pending
    d.get(f"{c.reg.url}/ui/proposals/{c.partly}")  # type: ignore[attr-defined]
    _no_injection(d)
    _shoot(d, shots, "proposal-partly-signed")
    # one person, whichever key she signed with: never under both lists
    assert _text(d, "signed-by").startswith(c.rev1.name)
    still = _text(d, "still")
    assert c.rev2.name in still
    assert c.rev1.name not in still
    assert "any 1 more" in still
    assert _text(d, "count").startswith("1 of 2")
    # the separation of duties: the evaluator whose evaluation opens the gates signed
    duties = _text(d, "duties")
    assert f"{c.rev1.name} (signed) is also the evaluator" in duties
    # links to the candidate and the bundle it replaces
    candidate = d.find_element(By.ID, "candidate-link").get_attribute("href")  # type: ignore[attr-defined]
    current = d.find_element(By.ID, "current-link").get_attribute("href")  # type: ignore[attr-defined]
    assert candidate.endswith(f"/ui/repos/{c.repo}/bundles/{c.new}")
    assert current.endswith(f"/ui/repos/{c.repo}/bundles/{c.old}")
    # who vouches: the signer's own check is the one that counts
    assert "verifies the proposal again on your machine" in _text(d, "signer-checks")
    assert "That check is the one that counts" in _text(d, "signer-checks")
    labels = {e.text for e in d.find_elements(By.CSS_SELECTOR, ".vouch")}  # type: ignore[attr-defined]
    assert any(t.startswith("the registry's word") for t in labels)
    assert any(t.startswith("recomputed by this page") for t in labels)
    assert (
        "approvals (registry approvals)"
        in _text(d, "move")
        + d.find_element(  # type: ignore[attr-defined]
            By.CSS_SELECTOR, "ul.checks"
        ).text
    )
    gates = _text(d, "gates")
    assert "-0.0" not in gates
    assert _text(d, "gates-verdict") == "promote"


def test_a_published_proposal_shows_it_is_published_and_judges_against_its_from_digest(
    council: Council, browser: object, shots: Path
) -> None:
    c, d = council, browser
    _login(d, c.reg.url, c.rev2.actor.token)
    d.get(f"{c.reg.url}/ui/proposals/{c.published}")  # type: ignore[attr-defined]
    _shoot(d, shots, "proposal-published")
    body = _text(d, "published")
    assert body.startswith("Published: TUF role")
    assert c.rev1.name in body
    assert c.rev2.name in body
    source = d.page_source  # type: ignore[attr-defined]
    assert "Sign it offline" not in source
    assert "Still to sign" not in source
    assert "not yet" not in source
    assert not _has(d, "approve-command")
    assert not _has(d, "still")
    # the candidate judged as it was decided, never against itself
    assert _text(d, "gates-verdict") == "promote"


def test_quarantine_banner_says_whether_the_quarantine_is_signed(
    council: Council, browser: object, shots: Path, tmp_path: Path
) -> None:
    c, d = council, browser
    _login(d, c.reg.url, c.rev2.actor.token)
    cases = (("held", ()), ("held-signed", ("--key", str(c.key2))))
    pushed = {alias: push_new(c.pub, c.repo, tmp_path) for alias, _ in cases}  # blobs shared
    for alias, signing in cases:
        held = pushed[alias]
        _ok(c.reg.cli("alias", "set", f"{c.repo}@{alias}", held, token=c.pub.actor.token))
        quarantine = ("quarantine", f"{c.repo}@{held}", "--reason", "leaks", *signing)
        _ok(c.reg.cli(*quarantine, token=c.rev2.actor.token))
        d.get(f"{c.reg.url}/ui/repos/{c.repo}/aliases/{alias}")  # type: ignore[attr-defined]
        _no_injection(d)
        _shoot(d, shots, f"alias-quarantine-{alias}")
        if signing:
            shown = _text(d, "quarantine-vouch")
            assert shown.startswith("Signed: the signed quarantine role names it"), shown
            assert c.rev2.name in shown
        else:
            assert _text(d, "quarantine-vouch").startswith("Not signed: only the registry's word")


def test_provenance_of_a_local_build_is_marked_self_asserted(council: Council) -> None:
    with _session(council.reg, council.rev2.actor.token) as client:
        page = client.get(f"/ui/repos/{council.repo}/bundles/{council.new}/attestations").text
    assert "https://modelward.dev/builders/local/v1" in page
    assert "self-asserted" in page
    assert 'class="ok">verified' not in page


def test_rollout_plan_sign_steps_abort_and_history(
    council: Council, browser: object, shots: Path, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    c, d = council, browser
    token = c.pub.actor.token
    stable, candidate = push_new(c.pub, c.repo, tmp_path), push_new(c.pub, c.repo, tmp_path)
    moved = json.loads(
        _ok(c.reg.cli("alias", "set", f"{c.repo}@live", stable, "--json", token=token))
    )
    _ok(
        c.reg.cli(
            "trust",
            "sign",
            str(moved["pending"]["id"]),
            "--key",
            str(c.key2),
            token=c.rev2.actor.token,
        )
    )
    analysis = tmp_path / "analysis.yaml"
    analysis.write_text("thresholds:\n  error_rate: {max: 0.05}\n")
    started = c.reg.cli(
        "rollout", "start", f"{c.repo}@live", "--to", candidate, "--steps", "5,100",
        "--analysis", str(analysis), "--no-fleet-yet", "--json", token=token,
    )  # fmt: skip
    plan = json.loads(_ok(started))
    proposal = int(plan["proposal"])
    _login(d, c.reg.url, c.rev2.actor.token)
    # the plan waits on the home page, and its page carries plan, diff and sign command
    assert f"#{proposal} {c.repo}@live (rollout plan)" in _text(d, "pending")
    d.get(f"{c.reg.url}/ui/proposals/{proposal}")  # type: ignore[attr-defined]
    _shoot(d, shots, "proposal-rollout-plan")
    assert _text(d, "plan-steps") == "5% → 100%"
    assert "error_rate" in _text(d, "plan-analysis")
    assert stable in _text(d, "plan")
    assert candidate in _text(d, "plan")
    assert _text(d, "diff-summary")
    command = _text(d, "approve-command")
    assert command == f"modelward trust sign {proposal} --key KEY"
    args = command.split()[1:]
    args[-1] = str(c.key2)
    _ok(c.reg.cli(*args, token=c.rev2.actor.token))
    _ok(c.reg.cli("rollout", "advance", f"{c.repo}@live", "--reason", "go", token=token))
    _ok(c.reg.cli("rollout", "abort", f"{c.repo}@live", "--reason", "p95 up", token=token))
    # the alias page lists it; its page: the signed plan, the steps, the abort
    d.get(f"{c.reg.url}/ui/repos/{c.repo}/aliases/live")  # type: ignore[attr-defined]
    assert plan["rollout_id"] in _text(d, "rollouts")
    d.find_element(By.CSS_SELECTOR, "a.rollout").click()  # type: ignore[attr-defined]
    _no_injection(d)
    _shoot(d, shots, "rollout")
    assert _text(d, "plan-vouch").startswith("Read from the signed bytes: signed: TUF role")
    steps = _text(d, "steps")
    assert "5%" in steps
    assert "aborted" in steps
    assert "p95 up" in _text(d, "abort")
    assert _text(d, "rollout-state-value").startswith("aborted")
    d.get(f"{c.reg.url}/ui/repos/{c.repo}")  # type: ignore[attr-defined]
    assert plan["rollout_id"] in _text(d, "rollouts")
    # audit filters match by prefix: rollout finds rollout.*
    with _session(c.reg, c.rev2.actor.token) as client:
        page = client.get("/ui/audit", params={"action": "rollout"}).text
    assert re.search(r">rollout\.start<", page)
    assert re.search(r">rollout\.abort", page)


def test_api_reference_is_served_without_anything_from_elsewhere(council: Council) -> None:
    for path in ("/docs", "/redoc"):
        moved = httpx.get(council.reg.url + path)
        assert moved.status_code == 307
        assert moved.headers["location"] == "/ui/api"
    page = httpx.get(f"{council.reg.url}/ui/api")
    assert page.status_code == 200
    assert "content-security-policy" in page.headers
    assert "<script>" not in page.text  # no inline script; nothing from elsewhere
    assert not re.search(r'(src|href)="(https?:)?//', page.text)
    assert "GET /v1/audit</code>" in page.text
    assert "GET /v1/repos/{org}/{name}/rollouts/{alias}" in page.text
