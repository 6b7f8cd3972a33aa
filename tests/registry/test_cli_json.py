"""``--json`` on the registry client commands: one JSON document on stdout, in the shape
docs/cli.md documents, checked with a JSON Schema; every message on stderr.

Through the real ``modelward`` CLI against a real ``modelward serve`` (one backend: the
shapes are the client's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests import forkserver
from tests.registry.conftest import Publisher, Registry, make_bundle_dir, new_publisher, unique

pytestmark = pytest.mark.parametrize("registry", ["sqlite"], indirect=True)

DIGEST = {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}
NULLABLE_STR = {"type": ["string", "null"]}


def _object(
    properties: dict[str, Any], *, optional: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Every property in ``properties`` required, those in ``optional`` allowed, no other."""
    return {
        "type": "object",
        "required": sorted(properties),
        "properties": {**properties, **(optional or {})},
        "additionalProperties": False,
    }


ALIAS_STATE = _object(
    {"alias": {"type": "string"}, "digest": DIGEST, "version": {"type": "integer", "minimum": 1}},
    # signed: its TUF role signs this digest; proposal: the TUF proposal a move made;
    # sign_with (push): the command that signs a move left unsigned, else null
    optional={
        "signed": {"type": "boolean"},
        "proposal": {"oneOf": [{"type": "null"}, {"type": "integer"}]},
        "sign_with": NULLABLE_STR,
        # a move that changed nothing (a retried push); its pending move signed just now
        "unchanged": {"type": "boolean"},
        "signed_now": {"type": "boolean"},
        # a move back to an earlier target; the promotion gates it skipped (a rollback to a
        # release the alias held under valid signatures: docs/operations.md)
        "rollback": {"type": "boolean"},
        "gates_skipped": {"type": "array", "items": {"type": "string"}},
    },
)
CHECK = _object(
    {"name": {"type": "string"}, "passed": {"type": "boolean"}, "message": {"type": "string"}}
)
SIGNER = _object({"name": {"type": "string"}, "kind": {"type": "string"}, "detail": {}})
DECISION = _object(
    {
        "allowed": {"type": "boolean"},
        "checks": {"type": "array", "items": CHECK},
        "signers": {"type": "array", "items": SIGNER},
    }
)
PUSH = _object(
    {
        "repository": {"type": "string"},
        "digest": DIGEST,
        "uploaded": {"type": "integer", "minimum": 0},
        "skipped": {"type": "integer", "minimum": 0},
        "bytes": {"type": "integer", "minimum": 0},
        "decision": DECISION,
        "alias": {"oneOf": [{"type": "null"}, ALIAS_STATE]},
        "ignored_attestations": {
            "type": "array",
            "items": _object(
                {"sha256": DIGEST, "file": NULLABLE_STR, "reason": {"type": "string"}}
            ),
        },
        "preflight": {"enum": ["passed", "skipped", "off"]},
    }
)
HISTORY = {
    "type": "array",
    "items": _object(
        {
            "version": {"type": "integer"},
            "from_digest": {"oneOf": [{"type": "null"}, DIGEST]},
            "to_digest": DIGEST,
            "actor": {"type": "string"},
            "at": {"type": "string"},
            "reason": NULLABLE_STR,
            "rollback": {"type": "boolean"},
            # the TUF role version that signed the move and its signers, or null
            "signed": {
                "oneOf": [
                    {"type": "null"},
                    _object(
                        {
                            "role": {"type": "string"},
                            "version": {"type": "integer"},
                            "signers": {
                                "type": "array",
                                "items": _object(
                                    {"keyid": {"type": "string"}, "principal": {"type": "string"}}
                                ),
                            },
                        }
                    ),
                ]
            },
        }
    ),
}
APPROVAL = _object(
    {
        "digest": DIGEST,
        "alias": {"type": "string"},
        "approvers": {"type": "array", "items": {"type": "string"}},
    },
    # a keyless approval: whether the move is signed, and the command that signs it (null
    # when it already is)
    optional={"signed": {"type": "boolean"}, "sign_with": {"type": ["string", "null"]}},
)
WITHDRAWAL = _object(
    {
        **{k: v for k, v in APPROVAL["properties"].items() if k in APPROVAL["required"]},
        "withdrawn": _object(
            {"approver": {"type": "string"}, "at": {"type": "string"}, "reason": {"type": "string"}}
        ),
        # the pending proposals whose move lost the withdrawn reviewer's signature
        "unsigned_proposals": {"type": "array", "items": {"type": "integer"}},
    }
)
QUARANTINE = _object(
    {
        "repository": {"type": "string"},
        "digest": DIGEST,
        "quarantined": {"const": True},
        "quarantine_reason": {"type": "string"},
        "quarantined_at": {"type": "string"},
        "tombstoned": {"type": "boolean"},
        "signed": {"type": "boolean"},
    }
)
EVENT = _object(
    {
        "seq": {"type": "integer", "minimum": 1},
        "at": {"type": "string"},
        "actor": {"type": "string"},
        "action": {"type": "string"},
        "subject": {"type": "string"},
        "details": {"type": "object"},
        "prev_hash": {"type": "string"},
        "hash": {"type": "string"},
    }
)
AUDIT_PAGE = _object(
    {
        "events": {"type": "array", "items": EVENT},
        "next_after": {"type": ["integer", "null"]},
    }
)
ATTESTATION = _object(
    {
        "id": {"type": "integer"},
        "kind": {"type": "string"},
        "predicate_type": {"type": "string"},
        "sha256": DIGEST,
        "signers": {"type": "array"},
        "attached_by": NULLABLE_STR,
        "attached_at": {"type": "string"},
        "retracted": {"type": "boolean"},
        "retracted_by": NULLABLE_STR,
        "retracted_at": NULLABLE_STR,
        "retraction_reason": NULLABLE_STR,
    },
    optional={"data": {"type": "string"}},
)  # list: the attestation's bytes, base64
ATTACHED = {
    **ATTESTATION,
    "required": sorted([*ATTESTATION["required"], "file"]),
    "properties": {**ATTESTATION["properties"], "file": {"type": "string"}},
}
BUNDLE = _object(
    {
        "repository": {"type": "string"},
        "digest": DIGEST,
        "manifest": {"type": ["object", "null"]},
        "quarantined": {"type": "boolean"},
        "quarantine_reason": NULLABLE_STR,
        "quarantined_at": NULLABLE_STR,
        "tombstoned": {"type": "boolean"},
        "created_by": NULLABLE_STR,
        "created_at": {"type": "string"},
        "decision": DECISION,
        "attestations": {"type": "array", "items": ATTESTATION},
    }
)
REPO = _object(
    {
        "name": {"type": "string"},
        "org": {"type": "string"},
        "publishers": {"type": "array", "items": {"type": "string"}},
        "policy_yaml": NULLABLE_STR,
        "created_at": {"type": "string"},
        "private": {"type": "boolean"},
        "readers": {"type": "array", "items": {"type": "string"}},
    }
)
KEY = _object({"keyid": {"type": "string"}})
KEYS = {
    "type": "array",
    "items": _object(
        {
            "keyid": {"type": "string"},
            "principal": {"type": "string"},
            "public_key_pem": {"type": "string"},
            "revoked": {"type": "boolean"},
        }
    ),
}


def run_json(registry: Registry, schema: dict[str, Any], *args: str, token: str) -> Any:
    """Run ``modelward ARGS --json``: exit 0, stdout one document valid under ``schema``."""
    out = registry.cli(*args, "--json", token=token)
    assert out.returncode == 0, f"{args}: {out.stderr}"
    document = json.loads(out.stdout)  # the whole of stdout, nothing else
    jsonschema.validate(document, schema)
    return document


def _key_file(pub: Publisher, tmp_path: Path) -> Path:
    from modelward.attest.keys import save_private_key

    path = tmp_path / unique("k") / "publisher.key"
    path.parent.mkdir()
    save_private_key(pub.key, path)
    return path


def test_push_json_is_one_document_with_messages_on_stderr(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    root = make_bundle_dir(tmp_path / "b")
    stranger = tmp_path / "stranger.dsse.json"  # signed by nobody the registry knows
    from modelward.attest.dsse import sign_envelope
    from modelward.attest.keys import generate_private_key
    from modelward.attest.manifest import build_bundle
    from modelward.attest.statement import PredicateType, make_statement
    from tests.registry.conftest import provenance_predicate

    statement = make_statement(
        "b", build_bundle(root).manifest.digest, PredicateType.PROVENANCE, provenance_predicate()
    )
    stranger.write_bytes(sign_envelope(statement, [generate_private_key()]))
    out = registry.cli(
        "push",
        str(root),
        repo,
        "--sign",
        "--key",
        str(_key_file(pub, tmp_path)),
        "--attestation",
        str(stranger),
        "--alias",
        "dev",
        "--json",
        token=pub.actor.token,
    )
    assert out.returncode == 0, out.stderr
    pushed = json.loads(out.stdout)
    jsonschema.validate(pushed, PUSH)
    assert {k: pushed["alias"][k] for k in ("alias", "digest", "version")} == {
        "alias": "dev",
        "digest": pushed["digest"],
        "version": 1,
    }
    assert pushed["alias"]["signed"] is True  # --key signed the provenance and the move
    assert pushed["preflight"] == "passed"
    assert pushed["decision"]["allowed"] is True
    assert [i["file"] for i in pushed["ignored_attestations"]] == [str(stranger)]
    assert "warning: attestation" in out.stderr  # the message, on stderr only


def test_alias_commands_json(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    tok = pub.actor.token
    d1 = pub.actor.client.push(make_bundle_dir(tmp_path / "1"), repo, sign=pub.sign).digest
    d2 = pub.actor.client.push(make_bundle_dir(tmp_path / "2"), repo, sign=pub.sign).digest

    moved = run_json(registry, ALIAS_STATE, "alias", "set", f"{repo}@beta", d1, token=tok)
    assert (moved["digest"], moved["version"]) == (d1, 1)
    run_json(registry, ALIAS_STATE, "alias", "set", f"{repo}@beta", d2, "--reason", "r2", token=tok)
    got = run_json(registry, ALIAS_STATE, "alias", "get", f"{repo}@beta", token=tok)
    assert got == {"alias": "beta", "digest": d2, "version": 2, "signed": False}
    back = run_json(registry, ALIAS_STATE, "alias", "rollback", f"{repo}@beta", token=tok)
    assert (back["digest"], back["version"]) == (d1, 3)
    history = run_json(registry, HISTORY, "alias", "history", f"{repo}@beta", token=tok)
    assert [h["rollback"] for h in history] == [False, False, True]


def test_approve_quarantine_and_bundle_show_json(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = pub.actor.client.push(make_bundle_dir(tmp_path / "b"), repo, sign=pub.sign).digest
    reviewer = registry.actor("reviewer")
    ref = f"{repo}@{digest}"

    approved = run_json(registry, APPROVAL, "approve", ref, "--alias", "prod", token=reviewer.token)
    assert approved["approvers"] == [reviewer.name]
    withdrawn = run_json(
        registry,
        WITHDRAWAL,
        "approve",
        ref,
        "--alias",
        "prod",
        "--withdraw",
        "--reason",
        "regression",
        token=reviewer.token,
    )
    assert withdrawn["approvers"] == []
    shown = run_json(registry, BUNDLE, "bundle", "show", ref, token=pub.actor.token)
    assert shown["manifest"]["layers"]
    held = run_json(
        registry, QUARANTINE, "quarantine", ref, "--reason", "CVE-1", token=reviewer.token
    )
    assert (held["digest"], held["quarantine_reason"]) == (digest, "CVE-1")
    withheld = run_json(registry, BUNDLE, "bundle", "show", ref, token=pub.actor.token)
    assert (withheld["manifest"], withheld["quarantined"]) == (None, True)


def test_audit_log_json_is_one_page(registry: Registry) -> None:
    registry.actor("reader")  # at least three events, whatever ran before
    page = run_json(
        registry, AUDIT_PAGE, "audit", "log", "--limit", "2", token=registry.server.admin_token
    )
    assert len(page["events"]) == 2
    assert page["next_after"] == page["events"][-1]["seq"]
    rest = run_json(
        registry,
        AUDIT_PAGE,
        "audit",
        "log",
        "--after",
        str(page["next_after"]),
        "--limit",
        "1",
        token=registry.server.admin_token,
    )
    assert rest["events"][0]["seq"] == page["next_after"] + 1


CHECKPOINT = _object(
    {
        "origin": {"type": "string"},
        "size": {"type": "integer"},
        "root": {"type": "string"},
        "verified_by": NULLABLE_STR,
    }
)
AUDIT_VERIFIED = _object(
    {
        "ok": {"const": True},
        "events": {"type": "integer", "minimum": 1},
        "checkpoints": {"type": "array", "items": CHECKPOINT},
        "grew_since": {"oneOf": [{"type": "null"}, CHECKPOINT]},
    }
)


def test_audit_verify_json(registry: Registry) -> None:
    report = run_json(
        registry, AUDIT_VERIFIED, "audit", "verify", token=registry.server.admin_token
    )
    assert report["checkpoints"][0]["size"] == report["events"]


def test_attestation_commands_json(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = pub.actor.client.push(make_bundle_dir(tmp_path / "b"), repo, sign=pub.sign).digest
    ref = f"{repo}@{digest}"
    again = tmp_path / "again.dsse.json"
    again.write_bytes(pub.sign_digest(digest))
    added = run_json(
        registry,
        {"type": "array", "items": ATTACHED},
        "attestation",
        "add",
        ref,
        str(again),
        token=pub.actor.token,
    )
    assert [a["file"] for a in added] == [str(again)]
    listed = run_json(
        registry,
        {"type": "array", "items": ATTESTATION},
        "attestation",
        "list",
        ref,
        token=pub.actor.token,
    )
    assert len(listed) == 2
    retracted = run_json(
        registry,
        ATTESTATION,
        "attestation",
        "retract",
        ref,
        str(added[0]["id"]),
        "--reason",
        "superseded",
        token=pub.actor.token,
    )
    assert retracted["retracted"] is True


def test_repo_and_key_commands_json(registry: Registry, tmp_path: Path) -> None:
    from modelward.attest.keys import generate_private_key, public_key_pem

    admin = registry.server.admin_token
    name = f"{unique('o')}/{unique('m')}"
    created = run_json(registry, REPO, "repo", "create", name, token=admin)
    assert created["name"] == name
    pub = registry.actor("publisher")
    added = run_json(registry, REPO, "repo", "add-publisher", name, pub.name, token=admin)
    assert pub.name in added["publishers"]
    pem = tmp_path / "k.pub"
    pem.write_bytes(public_key_pem(generate_private_key().public_key()))
    registered = run_json(registry, KEY, "key", "register", str(pem), token=pub.token)
    listed = run_json(registry, KEYS, "key", "list", token=pub.token)
    assert registered["keyid"] in {k["keyid"] for k in listed}


def test_refusals_leave_stdout_empty_under_json(registry: Registry) -> None:
    """A script reading stdout never mistakes an error for a document."""
    out = registry.cli("alias", "get", f"{unique('o')}/{unique('m')}@prod", "--json")
    assert out.returncode == 1
    assert out.stdout == ""
    assert "error:" in out.stderr


def test_json_output_is_plain_json_not_terminal_markup(registry: Registry) -> None:
    """No colour codes even when asked for colour: the document parses byte for byte."""
    import os

    env = {
        **os.environ,
        "MODELWARD_URL": registry.url,
        "MODELWARD_TOKEN": registry.server.admin_token,
        "FORCE_COLOR": "1",
    }
    out = forkserver.run(["audit", "log", "--limit", "1", "--json"], env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "\x1b[" not in out.stdout
    jsonschema.validate(json.loads(out.stdout), AUDIT_PAGE)
