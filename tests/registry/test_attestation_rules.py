"""Who may attach what, and undoing it: one test per attack, against a real ``modelward serve``.

One server per module (helpers in test_registry_attacks.py: repositories acme/a for pub_a and
admin2, acme/b for pub_b). Here the serving worker (reader) and rev1 (reviewer) also have
registered keys, so their statements verify: every refusal below is the attach rule
(registry.domains.auth.authz), never a bad signature. Each test asserts the status,
the JSON error shape, that nothing changed, and the audit event.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelward.attest.statement import PredicateType
from tests.inprocess import run_modelward
from tests.registry.conftest import Registry, new_publisher, push_new
from tests.registry.test_registry_attacks import (
    Reg,
    _env,
    _pem,
    alias_put,
    assert_denied,
    error,
    open_registry,
    provenance,
    push,
    sha,
    statement,
)

OMS_PREDICATE = "https://model_signing/signature/v1.0"
CUSTOM_PREDICATE = "https://example.com/custom-claim/v1"


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reg]:
    from modelward.attest.keys import generate_private_key

    with open_registry(tmp_path_factory.mktemp("attestation-rules")) as registry:
        for name in ("worker", "rev1"):
            actor = registry.actors[name]
            actor.key = generate_private_key("ed25519")
            body = {"public_key_pem": _pem(actor.key), "principal": name}
            r = registry.admin.post("/v1/keys", json=body)
            assert r.status_code == 201, r.text
        yield registry


def url(digest: str, repo: str = "acme/a") -> str:
    return f"/v1/repos/{repo}/bundles/{digest}/attestations"


def signed(reg: Reg, who: str, digest: str, predicate_type: str) -> bytes:
    """A statement of ``predicate_type`` about ``digest``, signed by ``who``'s registered key."""
    if predicate_type == PredicateType.PROVENANCE:
        return provenance(reg.actors[who].key, digest)
    predicate = {"fingerprint_id": "f", "outputs": [], "note": os.urandom(8).hex()}
    return statement(reg.actors[who].key, digest, predicate_type, predicate)


def attach(reg: Reg, who: str, digest: str, data: bytes, repo: str = "acme/a") -> dict[str, Any]:
    r = reg.actors[who].client.post(url(digest, repo), content=data)
    assert r.status_code == 201, r.text
    result: dict[str, Any] = r.json()
    return result


def retract(reg: Reg, who: str, digest: str, att_id: int, reason: str = "wrong") -> Any:
    client = reg.admin if who == "admin" else reg.actors[who].client
    return client.request("DELETE", f"{url(digest)}/{att_id}", json={"reason": reason})


def listing(reg: Reg, digest: str, repo: str = "acme/a", **params: str) -> list[dict[str, Any]]:
    r = reg.admin.get(url(digest, repo), params=params)
    assert r.status_code == 200, r.text
    result: list[dict[str, Any]] = r.json()
    return result


def events_since(reg: Reg, seq: int, action: str) -> list[dict[str, Any]]:
    return [e for e in reg.audit() if e["seq"] > seq and e["action"] == action]


# -- who may attach what ---------------------------------------------------------------------
def test_reader_attaching_provenance_is_refused_403(reg: Reg) -> None:
    """A serving worker's token and its own registered key must not vouch for a build."""
    bundle = push(reg, "pub_a")
    before = listing(reg, bundle.digest)
    since = reg.last_seq()
    forged = signed(reg, "worker", bundle.digest, PredicateType.PROVENANCE)
    err = error(
        reg.actors["worker"].client.post(url(bundle.digest), content=forged), 403, "forbidden"
    )
    assert "worker (reader)" in err["message"]
    assert PredicateType.PROVENANCE in err["message"]
    assert "publishers of the repository" in err["message"]
    assert err["detail"]["predicate_type"] == PredicateType.PROVENANCE
    assert listing(reg, bundle.digest) == before
    assert_denied(reg, since, 403, "forbidden", actor="worker")


def test_publisher_of_another_repo_attaching_is_refused(reg: Reg) -> None:
    bundle = push(reg, "pub_a")
    before = listing(reg, bundle.digest)
    since = reg.last_seq()
    pub_b = reg.actors["pub_b"].client
    for data in (
        provenance(reg.actors["pub_b"].key, bundle.digest),
        statement(reg.actors["pub_b"].key, bundle.digest, CUSTOM_PREDICATE, {}),
        b"{}",  # refused before anything is verified: 403, not 422
    ):
        err = error(pub_b.post(url(bundle.digest), content=data), 403, "forbidden")
        assert "pub_b (publisher)" in err["message"]
        assert "acme/a" in err["message"]
    assert listing(reg, bundle.digest) == before
    assert_denied(reg, since, 403, "forbidden", actor="pub_b")


def test_publisher_attaching_baseline_is_refused(reg: Reg) -> None:
    """A publisher forging the serving worker's evidence for its own bundle."""
    bundle = push(reg, "pub_a")
    before = listing(reg, bundle.digest)
    since = reg.last_seq()
    for predicate_type in (PredicateType.BASELINE, PredicateType.REPLAY):
        forged = signed(reg, "pub_a", bundle.digest, predicate_type)
        r = reg.actors["pub_a"].client.post(url(bundle.digest), content=forged)
        err = error(r, 403, "forbidden")
        assert predicate_type in err["message"]
        assert "readers (serving workers) and admins" in err["message"]
    assert listing(reg, bundle.digest) == before
    assert_denied(reg, since, 403, "forbidden", actor="pub_a")


def test_publisher_or_reader_attaching_approval_or_evaluation_is_refused(reg: Reg) -> None:
    bundle = push(reg, "pub_a")
    before = listing(reg, bundle.digest)
    since = reg.last_seq()
    for who in ("pub_a", "worker"):
        for predicate_type in (PredicateType.APPROVAL, PredicateType.EVALUATION):
            data = signed(reg, who, bundle.digest, predicate_type)
            err = error(
                reg.actors[who].client.post(url(bundle.digest), content=data), 403, "forbidden"
            )
            assert "reviewers and admins" in err["message"]
    assert listing(reg, bundle.digest) == before
    assert_denied(reg, since, 403, "forbidden", actor="worker")


def test_unknown_predicate_type_fails_closed_to_publishers(reg: Reg) -> None:
    bundle = push(reg, "pub_a")
    since = reg.last_seq()
    for who in ("worker", "rev1"):
        data = signed(reg, who, bundle.digest, CUSTOM_PREDICATE)
        err = error(reg.actors[who].client.post(url(bundle.digest), content=data), 403, "forbidden")
        assert CUSTOM_PREDICATE in err["message"]
    assert_denied(reg, since, 403, "forbidden", actor="rev1")
    attach(reg, "pub_a", bundle.digest, signed(reg, "pub_a", bundle.digest, CUSTOM_PREDICATE))


def test_reposting_attached_bytes_does_not_bypass_the_rule(reg: Reg) -> None:
    """The same bytes already attached answer 200 only to those who may attach them."""
    bundle = push(reg, "pub_a")
    mine = listing(reg, bundle.digest)[0]
    data = base64.b64decode(mine["data"])
    since = reg.last_seq()
    error(reg.actors["worker"].client.post(url(bundle.digest), content=data), 403, "forbidden")
    assert_denied(reg, since, 403, "forbidden", actor="worker")
    r = reg.actors["pub_a"].client.post(url(bundle.digest), content=data)
    assert r.status_code == 200, r.text
    assert r.json()["id"] == mine["id"]


def test_each_role_attaches_its_own_evidence(reg: Reg) -> None:
    """The other side of the table: what each role may attach is attached and audited."""
    bundle = push(reg, "pub_a")
    since = reg.last_seq()
    allowed = [
        ("worker", PredicateType.BASELINE),
        ("worker", PredicateType.REPLAY),
        ("rev1", PredicateType.APPROVAL),
        ("rev1", PredicateType.EVALUATION),
        ("admin2", PredicateType.APPROVAL),
        ("admin2", PredicateType.BASELINE),
        ("admin2", PredicateType.PROVENANCE),
        ("pub_a", PredicateType.PROVENANCE),
    ]
    for who, predicate_type in allowed:
        summary = attach(reg, who, bundle.digest, signed(reg, who, bundle.digest, predicate_type))
        assert summary["predicate_type"] == predicate_type
        assert summary["attached_by"] == who
        assert summary["retracted"] is False
    attached = events_since(reg, since, "attestation.attach")
    assert [(e["actor"], e["details"]["predicate_type"]) for e in attached] == allowed


# -- retraction ------------------------------------------------------------------------------
def test_retraction_is_audited_and_keeps_the_bytes(reg: Reg) -> None:
    bundle = push(reg, "pub_a")
    data = signed(reg, "worker", bundle.digest, PredicateType.BASELINE)
    att = attach(reg, "worker", bundle.digest, data)
    since = reg.last_seq()
    r = retract(reg, "worker", bundle.digest, att["id"], reason="wrong fingerprint")
    assert r.status_code == 200, r.text
    assert r.json()["retracted"] is True
    assert r.json()["retracted_by"] == "worker"
    [event] = events_since(reg, since, "attestation.retract")
    assert event["actor"] == "worker"
    assert event["subject"] == f"acme/a@{bundle.digest}"
    assert event["details"]["id"] == att["id"]
    assert event["details"]["sha256"] == sha(data)
    assert event["details"]["reason"] == "wrong fingerprint"
    [kept] = [
        a for a in listing(reg, bundle.digest, include_retracted="true") if a["id"] == att["id"]
    ]
    assert base64.b64decode(kept["data"]) == data
    assert kept["sha256"] == sha(data)
    assert kept["retracted"] is True
    assert kept["retracted_by"] == "worker"
    assert kept["retraction_reason"] == "wrong fingerprint"
    assert kept["retracted_at"]


def test_only_the_attacher_or_an_admin_may_retract(reg: Reg) -> None:
    bundle = push(reg, "pub_a")
    baseline = attach(
        reg, "worker", bundle.digest, signed(reg, "worker", bundle.digest, PredicateType.BASELINE)
    )
    pushed = next(a for a in listing(reg, bundle.digest) if a["attached_by"] == "pub_a")
    since = reg.last_seq()
    for who in ("pub_a", "pub_b", "rev1"):  # the repository's own publisher included
        err = error(retract(reg, who, bundle.digest, baseline["id"]), 403, "forbidden")
        assert "only worker, who attached it, or an admin" in err["message"]
    error(retract(reg, "worker", bundle.digest, pushed["id"]), 403, "forbidden")
    assert all(not a["retracted"] for a in listing(reg, bundle.digest, include_retracted="true"))
    assert_denied(reg, since, 403, "forbidden", actor="pub_a")
    assert_denied(reg, since, 403, "forbidden", actor="worker")
    assert not events_since(reg, since, "attestation.retract")
    r = retract(reg, "admin2", bundle.digest, baseline["id"])
    assert r.status_code == 200, r.text
    assert r.json()["retracted_by"] == "admin2"
    r = retract(reg, "pub_a", bundle.digest, pushed["id"])  # what it pushed, it may retract
    assert r.status_code == 200, r.text


def test_retracted_attestation_is_not_listed_by_default(reg: Reg) -> None:
    bundle = push(reg, "pub_a")
    att = attach(
        reg, "worker", bundle.digest, signed(reg, "worker", bundle.digest, PredicateType.BASELINE)
    )
    assert retract(reg, "worker", bundle.digest, att["id"]).status_code == 200
    for client in (reg.admin, reg.actors["worker"].client, reg.actors["pub_a"].client):
        shown = client.get(url(bundle.digest)).json()
        assert att["id"] not in [a["id"] for a in shown]
        assert [a["predicate_type"] for a in shown] == [PredicateType.PROVENANCE]
    forensic = reg.actors["rev1"].client.get(
        url(bundle.digest), params={"include_retracted": "true"}
    )
    assert forensic.status_code == 200, forensic.text
    assert att["id"] in [a["id"] for a in forensic.json() if a["retracted"]]
    since = reg.last_seq()
    for who in ("worker", "pub_a"):  # forensics is for reviewers and admins
        r = reg.actors[who].client.get(url(bundle.digest), params={"include_retracted": "true"})
        error(r, 403, "forbidden")
    assert_denied(reg, since, 403, "forbidden", actor="worker")


def test_retracted_provenance_no_longer_lets_the_bundle_be_aliased(reg: Reg) -> None:
    """The default policy requires provenance: once it is retracted, an alias move must
    re-judge the bundle without it."""
    bundle = push(reg, "pub_a")
    [pushed] = listing(reg, bundle.digest)
    assert retract(reg, "pub_a", bundle.digest, pushed["id"]).status_code == 200
    since = reg.last_seq()
    r = alias_put(reg.actors["pub_a"].client, "acme/a", f"r{os.urandom(4).hex()}", bundle.digest)
    error(r, 422, "policy_denied")
    assert_denied(reg, since, 422, "policy_denied", actor="pub_a")


def test_reattaching_retracted_bytes_makes_a_new_row(reg: Reg) -> None:
    bundle = push(reg, "pub_a")
    data = signed(reg, "worker", bundle.digest, PredicateType.REPLAY)
    first = attach(reg, "worker", bundle.digest, data)
    assert retract(reg, "worker", bundle.digest, first["id"]).status_code == 200
    second = attach(reg, "worker", bundle.digest, data)  # 201: a new attachment, audited
    assert second["id"] != first["id"]
    rows = [
        a for a in listing(reg, bundle.digest, include_retracted="true") if a["sha256"] == sha(data)
    ]
    assert [(a["id"], a["retracted"]) for a in rows] == [(first["id"], True), (second["id"], False)]


def test_retraction_needs_a_reason_and_happens_once(reg: Reg) -> None:
    bundle = push(reg, "pub_a")
    att = attach(
        reg, "worker", bundle.digest, signed(reg, "worker", bundle.digest, PredicateType.BASELINE)
    )
    worker = reg.actors["worker"].client
    path = f"{url(bundle.digest)}/{att['id']}"
    error(worker.request("DELETE", path), 422, "invalid_request")
    error(worker.request("DELETE", path, json={"reason": ""}), 422, "invalid_request")
    error(worker.request("DELETE", path, json={"reason": "   "}), 400, "bad_request")
    error(worker.request("DELETE", path, json={"reason": "x" * 2001}), 422, "invalid_request")
    assert retract(reg, "worker", bundle.digest, att["id"], "first").status_code == 200
    since = reg.last_seq()
    err = error(retract(reg, "worker", bundle.digest, att["id"], "again"), 409, "conflict")
    assert err["detail"]["retraction_reason"] == "first"
    assert not events_since(reg, since, "attestation.retract")


def test_retracting_through_another_bundles_url_is_404(reg: Reg) -> None:
    """An attestation id is only found under the bundle (and repository) it is attached to."""
    mine, other = push(reg, "pub_a"), push(reg, "pub_b", repo="acme/b")
    [theirs] = listing(reg, other.digest, "acme/b")
    r = reg.actors["pub_b"].client.request(
        "DELETE", f"{url(mine.digest)}/{theirs['id']}", json={"reason": "sneaky"}
    )
    error(r, 404, "not_found")
    error(retract(reg, "admin", mine.digest, 2**31 - 1), 404, "not_found")
    error(retract(reg, "admin", mine.digest, 2**31), 422, "invalid_request")
    assert listing(reg, other.digest, "acme/b") == [theirs]


# -- the CLI ---------------------------------------------------------------------------------
def _cli(reg: Reg, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = _env() | {
        "MODELWARD_URL": reg.url,
        "MODELWARD_TOKEN": token,
        "XDG_CONFIG_HOME": str(reg.tmp / "xdg-config"),
        "XDG_CACHE_HOME": str(reg.tmp / "xdg-cache"),
    }
    return run_modelward(args, env)


def test_cli_attestation_add_list_retract_round_trip(reg: Reg, tmp_path: Path) -> None:
    bundle = push(reg, "pub_a")
    alias = f"cli{os.urandom(4).hex()}"
    assert alias_put(reg.actors["pub_a"].client, "acme/a", alias, bundle.digest).is_success
    files = []
    for predicate_type in (PredicateType.BASELINE, PredicateType.REPLAY):
        path = tmp_path / f"{predicate_type.rsplit('/', 2)[-2]}.json"
        path.write_bytes(signed(reg, "worker", bundle.digest, predicate_type))
        files.append(str(path))
    worker = reg.actors["worker"].token
    ref = f"acme/a@{alias}"

    added = _cli(reg, worker, "attestation", "add", ref, *files)
    assert added.returncode == 0, added.stderr
    assert len(added.stdout.splitlines()) == 2
    assert "determinism-baseline" in added.stdout
    assert "by=worker" in added.stdout

    listed = _cli(reg, worker, "attestation", "list", ref, "--json")
    assert listed.returncode == 0, listed.stderr
    items = json.loads(listed.stdout)
    by_type = {a["predicate_type"]: a for a in items}
    assert set(by_type) == {PredicateType.PROVENANCE, PredicateType.BASELINE, PredicateType.REPLAY}
    baseline_id = by_type[PredicateType.BASELINE]["id"]

    refused = _cli(
        reg,
        worker,
        "attestation",
        "add",
        ref,
        str(tmp_path / "baseline.json"),
        str(tmp_path / "forged.json"),
    )
    assert refused.returncode == 2  # forged.json does not exist: nothing is sent
    (tmp_path / "forged.json").write_bytes(
        signed(reg, "worker", bundle.digest, PredicateType.PROVENANCE)
    )
    refused = _cli(reg, worker, "attestation", "add", ref, str(tmp_path / "forged.json"))
    assert refused.returncode == 1
    assert "forged.json" in refused.stderr
    assert "may not attach" in refused.stderr

    by_digest = f"acme/a@{bundle.digest}"
    gone = _cli(
        reg, worker, "attestation", "retract", by_digest, str(baseline_id), "--reason", "bad run"
    )
    assert gone.returncode == 0, gone.stderr
    assert "RETRACTED by worker" in gone.stdout
    assert "bad run" in gone.stdout

    lines = _cli(reg, worker, "attestation", "list", ref).stdout.splitlines()
    assert len(lines) == 2
    assert all(line.endswith("live") for line in lines)
    assert not any(line.startswith(f"#{baseline_id} ") for line in lines)

    denied = _cli(reg, worker, "attestation", "list", ref, "--include-retracted")
    assert denied.returncode == 1
    assert "may not list retracted" in denied.stderr
    forensic = _cli(reg, reg.boot_token, "attestation", "list", ref, "--include-retracted")
    assert forensic.returncode == 0, forensic.stderr
    [line] = [x for x in forensic.stdout.splitlines() if x.startswith(f"#{baseline_id} ")]
    assert "RETRACTED by worker" in line
    assert "bad run" in line

    again = _cli(reg, worker, "attestation", "retract", ref, str(baseline_id), "--reason", "x")
    assert again.returncode == 1
    assert "already retracted" in again.stderr


# -- the client, on each database ------------------------------------------------------------
def test_client_retracts_and_lists_on_each_database(registry: Registry, tmp_path: Path) -> None:
    """The same round trip through RegistryClient on the shared SQLite and PostgreSQL servers
    (conftest ``registry``): retraction columns written and read back on both."""
    from modelward.client.api import ConflictError, ForbiddenError

    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    [pushed] = pub.actor.client.list_attestations(repo, digest)
    reviewer = registry.actor("reviewer")
    with pytest.raises(ForbiddenError):
        reviewer.client.retract_attestation(repo, digest, pushed["id"], "not mine")
    with pytest.raises(ForbiddenError):
        pub.actor.client.list_attestations_with_retracted(repo, digest)
    done = pub.actor.client.retract_attestation(repo, digest, pushed["id"], "rebuilt")
    assert (done["retracted"], done["retracted_by"], done["retraction_reason"]) == (
        True,
        pub.name,
        "rebuilt",
    )
    with pytest.raises(ConflictError):
        registry.admin.retract_attestation(repo, digest, pushed["id"], "again")
    assert pub.actor.client.list_attestations(repo, digest) == []
    [kept] = reviewer.client.list_attestations_with_retracted(repo, digest)
    assert kept["id"] == pushed["id"]
    assert kept["data"] == pushed["data"]
    assert kept["retracted_at"].endswith("Z")
