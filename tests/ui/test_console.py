"""The reviewer console in a real browser (Debian's chromium and chromium-driver through
Selenium; nothing downloads a browser) against a real registry: the reviewer's journey,
hostile names escaped, the CSP header, the CSRF refusal, the API's read rules by URL.

Screenshots of every page at 1280 and 390 pixels wide go to $MODELWARD_UI_SCREENSHOTS (a
temporary directory otherwise); they are not committed."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from modelward.attest.keys import save_private_key
from tests.attest.test_evaluation import HEADER, cases, jsonl
from tests.registry.conftest import (
    Actor,
    Publisher,
    Registry,
    make_bundle_dir,
    new_publisher,
)

# one browser and one scene per database for the module: its tests share one xdist worker.
# The browser and command-line tests run on SQLite; the sessions, CSRF and read-rule tests
# on PostgreSQL too (the sessions are rows in the registry's database).
pytestmark = pytest.mark.xdist_group("ui-console")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
RLO = "\u202e"
HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(2)>' + RLO + "gnp.exe"
HOSTILE_CASE = '"><img src=x onerror=alert(3)>'


def _policy(evaluator: str) -> str:
    return (
        "version: 1\ntrust_registered_signers: true\n"
        f"evidence: {{principals: [{evaluator}]}}\naliases:\n"
        "  - {pattern: prod, roles: [publisher, admin], protected: true, approvals: 1, "
        "gates: {min_deterministic_pass_rate: 0.9, max_critical_safety_failures: 0}}\n"
        "  - {pattern: '*', roles: [publisher, admin]}\n"
    )


CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
)


@dataclass
class Scene:
    reg: Registry
    pub: Publisher
    rev: Publisher
    reader: Actor
    repo: str
    old: str
    new: str
    proposal: int
    key: Path


def _push(pub: Publisher, repo: str, root: Path, config: dict[str, object]) -> str:
    (root / "config.json").write_text(json.dumps(config, indent=1))
    return pub.actor.client.push(root, repo, sign=pub.sign).digest


def _evaluate(
    reg: Registry, rev: Publisher, key: Path, ref: str, tmp: Path, baseline: str | None
) -> None:
    """A passing evaluation by the reviewer (the policy's evaluator), hostile case names."""
    results = tmp / f"results-{ref.rsplit(':', 1)[-1][:12]}.jsonl"
    results.write_bytes(
        jsonl(HEADER, cases("billing", "deterministic", (198, 1, 0, 1), prefix=HOSTILE_CASE))
    )
    extra = ("--baseline", baseline) if baseline else ()
    attached = reg.cli(
        "eval",
        "attach",
        ref,
        "--results",
        str(results),
        "--key",
        str(key),
        *extra,
        token=rev.actor.token,
    )
    assert attached.returncode == 0, attached.stderr


@pytest.fixture(scope="module")
def scene(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> Scene:
    tmp = tmp_path_factory.mktemp("ui")
    pub = new_publisher(registry)
    rev = new_publisher(registry, "reviewer")
    reader = registry.actor("reader")
    repo = registry.repo(pub, policy_yaml=_policy(rev.name))
    root = make_bundle_dir(tmp / "bundle")
    old = _push(pub, repo, root, {"model_type": "llama", "max_model_len": 256, "seed": 0})
    (root / f"notes-{HOSTILE.replace('/', '_').replace(RLO, '')}.txt").write_text("hostile name\n")
    (root / ("n" * 200 + ".txt")).write_text("long name\n")
    new = _push(
        pub,
        repo,
        root,
        {"model_type": "llama", "max_model_len": 512, "seed": 7, "note": HOSTILE + "x" * 10_000},
    )
    key = tmp / "rev.key"
    save_private_key(rev.key, key)
    _evaluate(registry, rev, key, f"{repo}@{old}", tmp, None)
    _evaluate(registry, rev, key, f"{repo}@{new}", tmp, f"{repo}@{old}")
    # release 1 on prod: proposed by the publisher, signed by the reviewer
    first = registry.cli("alias", "set", f"{repo}@prod", old, token=pub.actor.token)
    assert first.returncode == 0, first.stderr
    signed = registry.cli(
        "approve", f"{repo}@{old}", "--alias", "prod", "--key", str(key), token=rev.actor.token
    )
    assert signed.returncode == 0, signed.stderr
    # release 2: proposed, waiting for the reviewer
    proposed = registry.cli(
        "alias", "set", f"{repo}@prod", new, "--reason", HOSTILE, "--json", token=pub.actor.token
    )
    assert proposed.returncode == 0, proposed.stderr
    pending = json.loads(proposed.stdout)["pending"]
    return Scene(registry, pub, rev, reader, repo, old, new, int(pending["id"]), key)


@pytest.fixture(scope="module")
def shots() -> Path:
    where = os.environ.get("MODELWARD_UI_SCREENSHOTS") or tempfile.mkdtemp(prefix="ui-shots-")
    path = Path(where)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    if not Path(CHROMEDRIVER).exists() or not Path(CHROMIUM).exists():
        pytest.skip("chromium and chromium-driver are not installed (make oci-tools)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_window_size(1280, 900)
    try:
        yield driver
    finally:
        driver.quit()


def _login(driver: object, url: str, token: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.delete_all_cookies()  # type: ignore[attr-defined]
    driver.get(f"{url}/ui/login")  # type: ignore[attr-defined]
    driver.find_element(By.ID, "token").send_keys(token)  # type: ignore[attr-defined]
    driver.find_element(By.ID, "login").click()  # type: ignore[attr-defined]
    WebDriverWait(driver, 30).until(lambda d: d.current_url.endswith("/ui/"))


def _shoot(driver: object, shots: Path, name: str) -> None:
    for width in (1280, 390):
        driver.set_window_size(width, 900)  # type: ignore[attr-defined]
        height = driver.execute_script("return document.body.scrollHeight")  # type: ignore[attr-defined]
        driver.set_window_size(width, min(int(height) + 120, 6000))  # type: ignore[attr-defined]
        driver.save_screenshot(str(shots / f"{name}-{width}.png"))  # type: ignore[attr-defined]
    driver.set_window_size(1280, 900)  # type: ignore[attr-defined]


def _no_injection(driver: object) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        alert = driver.switch_to.alert  # type: ignore[attr-defined]
    except NoAlertPresentException:
        return
    raise AssertionError(f"a script ran: {alert.text}")


@pytest.mark.sqlite_only
def test_reviewer_journey_sign_then_quarantine(scene: Scene, browser: object, shots: Path) -> None:
    from selenium.webdriver.common.by import By

    d = browser
    url = scene.reg.url
    _login(d, url, scene.rev.actor.token)
    _shoot(d, shots, "home")
    d.find_element(By.CSS_SELECTOR, f"a[href='/ui/proposals/{scene.proposal}']").click()  # type: ignore[attr-defined]
    _no_injection(d)
    body = d.find_element(By.TAG_NAME, "body").text  # type: ignore[attr-defined]
    summary = d.find_element(By.ID, "diff-summary").text  # type: ignore[attr-defined]
    assert summary == "2 added, 0 removed, 1 changed, 1 unchanged"
    assert '- "max_model_len": 256,' in body
    assert '+ "max_model_len": 512,' in body
    assert '+ "seed": 7,' in body
    assert d.find_element(By.ID, "gates-verdict").text == "promote"  # type: ignore[attr-defined]
    gates = d.find_element(By.ID, "gates").text  # type: ignore[attr-defined]
    assert "min_deterministic_pass_rate" in gates
    assert "max_critical_safety_failures" in gates
    command = d.find_element(By.ID, "approve-command").text  # type: ignore[attr-defined]
    assert command == f"modelward approve {scene.repo}@{scene.new} --alias prod --key KEY"
    d.find_element(By.CSS_SELECTOR, "button.copy").click()  # type: ignore[attr-defined]
    _shoot(d, shots, "proposal")

    args = command.split()[1:]
    args[-1] = str(scene.key)
    signed = scene.reg.cli(*args, token=scene.rev.actor.token)
    assert signed.returncode == 0, signed.stderr
    assert "published" in signed.stdout

    d.get(f"{url}/ui/repos/{scene.repo}/aliases/prod")  # type: ignore[attr-defined]
    assert d.find_element(By.ID, "signed").text.startswith("signed")  # type: ignore[attr-defined]
    assert scene.new in d.find_element(By.ID, "alias-state").text  # type: ignore[attr-defined]
    assert scene.rev.name in d.find_element(By.ID, "history").text  # type: ignore[attr-defined]

    held = scene.reg.cli(
        "quarantine", f"{scene.repo}@{scene.new}", "--reason", HOSTILE, token=scene.rev.actor.token
    )
    assert held.returncode == 0, held.stderr
    d.refresh()  # type: ignore[attr-defined]
    _no_injection(d)
    assert "QUARANTINED" in d.find_element(By.ID, "quarantined").text  # type: ignore[attr-defined]
    _shoot(d, shots, "alias")
    d.get(f"{url}/ui/repos/{scene.repo}")  # type: ignore[attr-defined]
    assert "quarantined" in d.find_element(By.TAG_NAME, "table").text  # type: ignore[attr-defined]
    _shoot(d, shots, "repo")


@pytest.mark.sqlite_only
def test_hostile_names_are_escaped(scene: Scene, browser: object, shots: Path) -> None:
    from selenium.webdriver.common.by import By

    d = browser
    _login(d, scene.reg.url, scene.rev.actor.token)
    for path, name in (
        (f"/ui/repos/{scene.repo}/bundles/{scene.new}", "bundle"),
        (f"/ui/repos/{scene.repo}/bundles/{scene.new}/attestations", "attestations"),
        (f"/ui/repos/{scene.repo}/aliases/prod", "alias-hostile"),
        (f"/ui/proposals/{scene.proposal}", "proposal-signed"),
        ("/ui/audit?action=alias.set", "audit"),
    ):
        d.get(scene.reg.url + path)  # type: ignore[attr-defined]
        _no_injection(d)
        assert not d.find_elements(By.CSS_SELECTOR, "main img, main script")  # type: ignore[attr-defined]
        source = d.page_source  # type: ignore[attr-defined]
        assert "<script>alert" not in source
        _shoot(d, shots, name)
    d.get(f"{scene.reg.url}/ui/repos/{scene.repo}/bundles/{scene.old}")  # type: ignore[attr-defined]
    assert "safe" in d.find_element(By.ID, "files").text  # type: ignore[attr-defined]
    d.get(f"{scene.reg.url}/ui/audit?action=tuf.sign")  # type: ignore[attr-defined]
    assert "tuf.sign" in d.find_element(By.ID, "events").text  # type: ignore[attr-defined]
    assert "Checkpoint signature checks" in d.find_element(By.ID, "checkpoint").text  # type: ignore[attr-defined]


@contextlib.contextmanager
def _session(reg: Registry, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=reg.url, follow_redirects=False) as client:
        yield _logged_in(client, token)


def _logged_in(client: httpx.Client, token: str) -> httpx.Client:
    form = client.get("/ui/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None
    done = client.post("/ui/login", data={"token": token, "csrf": csrf.group(1)})
    assert done.status_code == 303, done.text
    cookie = done.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert "Path=/ui" in cookie
    return client


def _recent_audit(reg: Registry) -> str:
    """The newest 500 audit events as JSON text (the session's registry is shared)."""
    admin = {"authorization": f"Bearer {reg.server.admin_token}"}
    size = httpx.get(f"{reg.url}/v1/audit/checkpoint", headers=admin).json()["tree_size"]
    params = {"after": max(0, int(size) - 500), "limit": 1000}
    return httpx.get(f"{reg.url}/v1/audit", headers=admin, params=params).text


@pytest.mark.sqlite_only
def test_every_console_answer_has_the_csp(scene: Scene) -> None:
    with _session(scene.reg, scene.rev.actor.token) as client:
        for path in (
            "/ui/login",
            "/ui/",
            f"/ui/repos/{scene.repo}",
            "/ui/static/console.css",
            "/ui/repos/no/such",
        ):
            answer = client.get(path)
            assert answer.headers["content-security-policy"] == CSP, path
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert answer.headers["referrer-policy"] == "no-referrer"
        page = client.get("/ui/").text
        assert "<style" not in page
        assert "style=" not in page
        assert "<script>" not in page


def test_csrf_refused_and_audited(scene: Scene) -> None:
    with _session(scene.reg, scene.rev.actor.token) as client:
        refused = client.post("/ui/logout", data={"csrf": "forged"})
        assert refused.status_code == 403
        assert "CSRF" in refused.text
        assert client.get("/ui/").status_code == 200  # still logged in
        assert "csrf_refused" in _recent_audit(scene.reg)
        token = re.search(r'name="csrf" value="([^"]+)"', client.get("/ui/").text)
        assert token is not None
        assert client.post("/ui/logout", data={"csrf": token.group(1)}).status_code == 303
        assert client.get("/ui/").headers["location"] == "/ui/login"  # ended server-side


def test_login_without_its_form_token_is_refused(scene: Scene) -> None:
    answer = httpx.post(f"{scene.reg.url}/ui/login", data={"token": scene.rev.actor.token})
    assert answer.status_code == 403
    assert "set-cookie" not in answer.headers


def test_a_wrong_token_shows_the_form_again_and_is_audited(scene: Scene) -> None:
    with httpx.Client(base_url=scene.reg.url) as client:
        form = client.get("/ui/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        wrong = "mwt_0123456789abcdef_" + "x" * 43
        answer = client.post("/ui/login", data={"token": wrong, "csrf": csrf.group(1)})
    assert answer.status_code == 401
    assert "unknown token" in answer.text
    assert "mw_session" not in answer.headers.get("set-cookie", "")
    assert "POST /ui/login" in _recent_audit(scene.reg)


def test_revoking_the_token_ends_the_console_session(scene: Scene) -> None:
    made = scene.reg.admin.create_token(scene.reader.name)
    with _session(scene.reg, str(made["token"])) as client:
        assert client.get("/ui/").status_code == 200
        scene.reg.admin.revoke_token(str(made["id"]))
        assert client.get("/ui/").headers["location"] == "/ui/login"


def test_a_reader_cannot_reach_what_the_api_refuses_it(scene: Scene, tmp_path: Path) -> None:
    held = scene.pub.actor.client.push(
        make_bundle_dir(tmp_path / "held" / "bundle"), scene.repo, sign=scene.pub.sign
    ).digest
    quarantined = scene.reg.cli("quarantine", f"{scene.repo}@{held}", "--reason", "test")
    assert quarantined.returncode == 0, quarantined.stderr
    auth = {"authorization": f"Bearer {scene.reader.token}"}
    with _session(scene.reg, scene.reader.token) as client:
        # the audit log: reviewers and admins, in the API and on the page
        assert httpx.get(f"{scene.reg.url}/v1/audit", headers=auth).status_code == 403
        assert client.get("/ui/audit").status_code == 403
        # a quarantined bundle's manifest and attestations: withheld from readers
        api = httpx.get(f"{scene.reg.url}/v1/repos/{scene.repo}/bundles/{held}", headers=auth)
        assert api.json()["manifest"] is None
        page = client.get(f"/ui/repos/{scene.repo}/bundles/{held}")
        assert page.status_code == 200
        assert "withheld" in page.text
        assert "config.json" not in page.text
        assert client.get(f"/ui/repos/{scene.repo}/bundles/{held}/attestations").status_code == 409
        # an unknown repository: the API's 404
        assert client.get("/ui/repos/no/such").status_code == 404


@pytest.mark.sqlite_only
def test_bundle_diff_and_attestation_show_on_the_command_line(scene: Scene) -> None:
    token = scene.rev.actor.token
    diff = scene.reg.cli(
        "bundle",
        "diff",
        f"{scene.repo}@{scene.old}",
        f"{scene.repo}@{scene.new}",
        "--json",
        token=token,
    )
    assert diff.returncode == 0, diff.stderr
    answer = json.loads(diff.stdout)
    assert (answer["old"], answer["new"]) == (scene.old, scene.new)
    assert [c["path"] for c in answer["changed"]] == ["config.json"]
    assert len(answer["added"]) == 2
    lines = answer["text_diffs"][0]["lines"]
    assert '- "max_model_len": 256,' in lines
    assert '+ "seed": 7,' in lines
    human = scene.reg.cli(
        "bundle", "diff", f"{scene.repo}@{scene.old}", f"{scene.repo}@{scene.new}", token=token
    )
    assert "2 added, 0 removed, 1 changed, 1 unchanged" in human.stdout

    shown = scene.reg.cli("attestation", "show", f"{scene.repo}@{scene.old}", "--json", token=token)
    assert shown.returncode == 0, shown.stderr
    items = json.loads(shown.stdout)
    assert [i["predicate_type"] for i in items] == [
        "https://slsa.dev/provenance/v1",
        "https://modelward.dev/evaluation/v1",
    ]
    item = items[0]
    assert item["subjects"] == [f"bundle sha256:{scene.old.removeprefix('sha256:')}"]
    assert item["statement"]["predicateType"] == "https://slsa.dev/provenance/v1"
    assert "data" not in item
    text = scene.reg.cli("attestation", "show", f"{scene.repo}@{scene.old}", token=token)
    assert f"signer:    @{scene.pub.name}  key {scene.pub.keyid}" in text.stdout


@pytest.mark.sqlite_only
def test_release_record_html_is_the_console_template(
    scene: Scene, browser: object, shots: Path, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    page = tmp_path / "prod.html"
    made = scene.reg.cli(
        "release",
        "record",
        f"{scene.repo}@prod",
        "--version",
        "1",
        "--key",
        str(scene.key),
        "--out",
        str(tmp_path / "prod.release.json"),
        "--html",
        str(page),
        token=scene.rev.actor.token,
    )
    assert made.returncode == 0, made.stderr
    text = page.read_text()
    assert "<script" not in text
    assert 'href="/ui/static' not in text  # standalone: the stylesheet is embedded
    browser.get(page.as_uri())  # type: ignore[attr-defined]
    _no_injection(browser)
    heading = browser.find_element(By.TAG_NAME, "h1").text  # type: ignore[attr-defined]
    assert heading == f"Release record: {scene.repo}@prod v1"
    assert scene.old in browser.find_element(By.TAG_NAME, "main").text  # type: ignore[attr-defined]
    _shoot(browser, shots, "release-record")
    assert "min_deterministic_pass_rate" in text  # the gates' figures, not only a digest

    # the same body in the console: an unsigned view, with the command that signs it
    _login(browser, scene.reg.url, scene.rev.actor.token)
    browser.get(f"{scene.reg.url}/ui/repos/{scene.repo}/aliases/prod/release?version=1")  # type: ignore[attr-defined]
    _no_injection(browser)
    heading = browser.find_element(By.TAG_NAME, "h1").text  # type: ignore[attr-defined]
    assert heading == f"Release record: {scene.repo}@prod v1", browser.page_source  # type: ignore[attr-defined]
    command = browser.find_element(By.ID, "record-command").text  # type: ignore[attr-defined]
    assert command.startswith(f"modelward release record {scene.repo}@prod --version 1 --key KEY")
    assert "min_deterministic_pass_rate" in browser.page_source  # type: ignore[attr-defined]
    _shoot(browser, shots, "release-console")
    with _session(scene.reg, scene.reader.token) as client:
        assert client.get(f"/ui/repos/{scene.repo}/aliases/prod/release").status_code == 403
