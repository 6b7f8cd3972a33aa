"""Release records (docs/release.md) through the real CLI against a real registry (SQLite).

One module-scoped registry runs the story once: a protected ``prod`` (two reviewers'
approvals, a critical-failure gate) is promoted to release 1, then release 2, then rolled
back. ``modelward release record`` exports the signed record of a version;
``modelward release verify`` re-checks it offline against the pinned TUF root, and refuses
it after any one byte changes, or when re-signed around changed contents.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from modelward.attest.keys import generate_private_key, public_key_pem, save_private_key
from tests.attest.test_evaluation import HEADER, cases, jsonl
from tests.registry.conftest import (
    Publisher,
    Registry,
    new_publisher,
    push_new,
    start_registry,
    unique,
)

OFFLINE = {"MODELWARD_URL": "http://127.0.0.1:9"}  # verify never reaches a registry


@dataclass
class Story:
    reg: Registry
    tmp: Path
    repo: str
    pub: Publisher
    rev1: Publisher
    rev2: Publisher
    keys: dict[str, Path]
    root: Path
    d1: str
    d2: str

    def cli(
        self, who: Publisher, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self.reg.cli(*args, token=who.actor.token, env=env)

    def record(self, *args: str, who: Publisher | None = None) -> tuple[Path, dict[str, Any]]:
        out = self.tmp / f"{unique('rec')}.json"
        done = self.cli(
            who or self.rev1,
            "release",
            "record",
            *args,
            "--key",
            str(self.keys[(who or self.rev1).name]),
            "--out",
            str(out),
            "--json",
        )
        assert done.returncode == 0, done.stderr
        return out, json.loads(done.stdout)

    def verify(self, path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.reg.cli(
            "release", "verify", str(path), "--trust-root", str(self.root), *extra, env=OFFLINE
        )


def _key_file(who: Publisher, base: Path) -> Path:
    path = base / f"{who.name}.key"
    save_private_key(who.key, path)
    return path


def _policy(evaluator: str) -> str:
    return "\n".join(
        [
            "version: 1",
            "trust_registered_signers: true",
            f"evidence: {{principals: [{evaluator}]}}",
            "aliases:",
            "  - {pattern: prod, roles: [publisher], protected: true, approvals: 2, "
            "gates: {max_critical_safety_failures: 0}}",
            "  - {pattern: '*', roles: [publisher]}",
            "",
        ]
    )


def _move(story: Story, digest: str, *args: str) -> None:
    moved = story.cli(story.pub, "alias", *args, f"{story.repo}@prod", digest, "--json")
    assert moved.returncode == 0, moved.stderr
    for reviewer in (story.rev1, story.rev2):
        signed = story.cli(
            reviewer,
            "approve",
            f"{story.repo}@{digest}",
            "--alias",
            "prod",
            "--key",
            str(story.keys[reviewer.name]),
            "--json",
        )
        assert signed.returncode == 0, signed.stderr
    assert json.loads(signed.stdout)["state"] == "published"


def _evaluate(story: Story, digest: str, baseline: str | None) -> None:
    results = story.tmp / f"{unique('results')}.jsonl"
    results.write_bytes(jsonl(HEADER, cases("billing", "human", (10, 0, 0, 0))))
    extra = ("--baseline", f"{story.repo}@{baseline}") if baseline else ()
    attached = story.cli(
        story.rev1,
        "eval",
        "attach",
        f"{story.repo}@{digest}",
        "--results",
        str(results),
        "--key",
        str(story.keys[story.rev1.name]),
        *extra,
    )
    assert attached.returncode == 0, attached.stderr


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    tmp = tmp_path_factory.mktemp("release")
    reg = start_registry("sqlite", tmp / "registry", None)
    try:
        pub = new_publisher(reg)
        rev1, rev2 = new_publisher(reg, "reviewer"), new_publisher(reg, "reviewer")
        repo = reg.repo(pub, policy_yaml=_policy(rev1.name))
        keys = {p.name: _key_file(p, tmp) for p in (pub, rev1, rev2)}
        d1, d2 = push_new(pub, repo, tmp), push_new(pub, repo, tmp)
        root = tmp / "root.json"
        assert reg.cli("trust", "root", "--out", str(root)).returncode == 0
        story = Story(reg, tmp, repo, pub, rev1, rev2, keys, root, d1, d2)
        _evaluate(story, d1, None)
        _move(story, d1, "set")  # version 1: release 1
        _evaluate(story, d2, d1)
        _move(story, d2, "set", "--reason", "release 2")  # version 2: release 2
        _evaluate(story, d1, d2)
        _move(story, d1, "rollback", "--reason", "release 2 regressed billing")  # version 3
        yield story
    finally:
        reg.close()
        reg.server.stop()


def _payload(path: Path) -> dict[str, Any]:
    envelope = json.loads(path.read_bytes())
    statement: dict[str, Any] = json.loads(base64.b64decode(envelope["payload"]))
    return statement


def _resign(story: Story, path: Path, change: Any, key: Any = None) -> Path:
    """The record with its statement changed by ``change`` and signed again with the same
    key (or ``key``): what someone holding a signing key, but not the TUF keys, could make."""
    from modelward.attest.keys import load_private_key
    from modelward.attest.release import write_record

    statement = _payload(path)
    change(statement["predicate"])
    key = key or load_private_key(story.keys[story.rev1.name])
    out = story.tmp / f"{unique('forged')}.json"
    out.write_bytes(write_record(json.dumps(statement).encode(), [key]))
    return out


def test_record_of_a_promoted_alias_verifies_offline(story: Story) -> None:
    md, html = story.tmp / "rec.md", story.tmp / "rec.html"
    path, answer = story.record(f"{story.repo}@prod", "--markdown", str(md), "--html", str(html))
    assert (answer["version"], answer["digest"], answer["evaluations"]) == (3, story.d1, 2)
    verified = story.verify(path, "--json")
    assert verified.returncode == 0, verified.stderr
    result = json.loads(verified.stdout)
    assert (result["valid"], result["digest"], result["version"]) == (True, story.d1, 3)
    plain = story.verify(path)
    assert plain.returncode == 0, plain.stderr
    assert f"valid: {story.repo}@prod version 3 is {story.d1}" in plain.stdout

    predicate = _payload(path)["predicate"]
    assert predicate["bundle"]["manifest"]["digest"] == story.d1
    assert predicate["bundle"]["inputs"]["weights"] == ["model.safetensors"]
    assert predicate["policy"]["text"] == _policy(story.rev1.name)
    assert {d["verdict"] for d in predicate["gates"]["decisions"]} == {"promote"}
    signers = {s["principal"] for s in predicate["approvals"]["signatures"]}
    assert signers == {story.rev1.name, story.rev2.name}
    actions = {e["action"] for e in predicate["audit"]["events"]}
    assert {"alias.rollback", "tuf.sign", "tuf.publish"} <= actions
    assert predicate["audit"]["checkpoint"] is not None
    text = md.read_text()
    assert story.d1 in text
    assert "## Approvals" in text
    page = html.read_text()
    assert story.d1 in page
    assert predicate["bundle"]["manifest"]["data"] not in page  # no embedded bytes
    assert "<script" not in page


# Where one changed byte is caught (docs/release.md#modelward-release-verify): a changed
# payload byte may break the canonical base64 (1), the statement or its TUF metadata (2), or
# only the signature (3), depending on which byte of the statement it lands on.
FIRST_FAILING_CHECK = {
    "signature": ("check 3 (signature): envelope:",),
    "keyid": ("check 3 (signature): envelope.signatures: the signature by key",),
    "payload-start": ("check 1 (file)", "check 2 (tuf)", "check 3 (signature)"),
    "payload-middle": ("check 1 (file)", "check 2 (tuf)", "check 3 (signature)"),
    "payload-end": ("check 1 (file)", "check 2 (tuf)", "check 3 (signature)"),
    "structure": ("check 1 (file): file: not in canonical form",),  # keys out of order
    "newline": ("check 1 (file): file:",),
}


@pytest.mark.parametrize("where", list(FIRST_FAILING_CHECK))
def test_one_byte_changed_fails_verification(story: Story, where: str) -> None:
    path, _ = story.record(f"{story.repo}@prod")
    data = bytearray(path.read_bytes())
    envelope = json.loads(data)
    payload_at = data.index(envelope["payload"].encode())
    positions = {
        "signature": data.index(envelope["signatures"][0]["sig"].encode()) + 5,
        "keyid": data.index(envelope["signatures"][0]["keyid"].encode()) + 3,
        "payload-start": payload_at + 2,
        "payload-middle": payload_at + len(envelope["payload"]) // 2,
        "payload-end": payload_at + len(envelope["payload"]) - 3,
        "structure": data.index(b'"payloadType"') + 1,
        "newline": len(data) - 1,
    }
    at = positions[where]
    data[at] = ord("A") if data[at] != ord("A") else ord("B")
    path.write_bytes(bytes(data))
    refused = story.verify(path)
    assert refused.returncode == 1, refused.stdout
    assert "error:" in refused.stderr
    assert any(check in refused.stderr for check in FIRST_FAILING_CHECK[where]), refused.stderr


def test_every_single_byte_change_is_refused(story: Story) -> None:
    """In process, over positions spread through the whole file."""
    from modelward.attest.release import ReleaseRecordInvalid, verify_record

    path, _ = story.record(f"{story.repo}@prod")
    data = path.read_bytes()
    root = story.root.read_bytes()
    verify_record(data, root)
    for at in range(0, len(data), max(1, len(data) // 97)):
        changed = bytearray(data)
        changed[at] ^= 0x01
        with pytest.raises(ReleaseRecordInvalid):
            verify_record(bytes(changed), root)


def test_resigned_record_with_changed_tuf_metadata_fails_the_tuf_check(story: Story) -> None:
    path, _ = story.record(f"{story.repo}@prod")

    def drop_last(predicate: dict[str, Any]) -> None:
        del predicate["tuf"]["role_versions"][-1]  # the signed version that made move 3

    refused = story.verify(_resign(story, path, drop_last))
    assert refused.returncode == 1
    assert "check 2 (tuf): record.version:" in refused.stderr
    assert f"not the subject {story.d1}" in refused.stderr


def test_record_hiding_a_role_version_that_made_a_move_is_refused(story: Story) -> None:
    """The signed history is read from every role version, 1 on: a record that leaves out
    the version of release 2 (so that release 1 would seem never to have ended) is refused
    before any move is counted."""
    path, _ = story.record(f"{story.repo}@prod")

    def hide(predicate: dict[str, Any]) -> None:
        del predicate["tuf"]["role_versions"][1]

    refused = story.verify(_resign(story, path, hide))
    assert refused.returncode == 1
    assert "check 2 (tuf): tuf.role_versions[1]:" in refused.stderr
    assert "where version 2 was expected" in refused.stderr


def test_resigned_record_with_changed_embedded_bytes_fails_the_digest_check(story: Story) -> None:
    path, _ = story.record(f"{story.repo}@prod")

    def edit_policy(predicate: dict[str, Any]) -> None:
        predicate["policy"]["text"] = predicate["policy"]["text"].replace(
            "approvals: 2", "approvals: 0"
        )

    refused = story.verify(_resign(story, path, edit_policy))
    assert refused.returncode == 1
    assert "check 5 (digests): policy.sha256" in refused.stderr


def test_older_version_after_a_rollback_carries_the_rollback_reason(story: Story) -> None:
    path, answer = story.record(f"{story.repo}@prod", "--version", "2")
    assert (answer["digest"], answer["version"]) == (story.d2, 2)
    assert answer["rollback"]["reason"] == "release 2 regressed billing"
    predicate = _payload(path)["predicate"]
    assert [h["move"] for h in predicate["history"]] == [2, 3]
    assert [h["to_digest"] for h in predicate["history"]] == [story.d2, story.d1]
    rows = predicate["registry_history"]
    assert rows["signed"] is False
    assert [h["rollback"] for h in rows["entries"]] == [False, True]
    verified = story.verify(path)
    assert verified.returncode == 0, verified.stderr
    assert f"version 2 is {story.d2}" in verified.stdout
    first, _ = story.record(f"{story.repo}@prod", "--version", "1")
    assert story.verify(first).returncode == 0


def test_record_signed_by_a_key_the_chain_does_not_know(story: Story) -> None:
    """``release record`` refuses the key before writing (issue 21 item 5); a file signed
    with it anyway (in process) is refused by ``release verify`` unless the key is given."""
    from modelward.attest.keys import keyid
    from modelward.attest.release import write_record

    stranger = generate_private_key()
    key = story.tmp / "stranger.key"
    save_private_key(stranger, key)
    out = story.tmp / "stranger-record.json"
    made = story.cli(
        story.rev1, "release", "record", f"{story.repo}@prod", "--key", str(key), "--out", str(out)
    )
    assert made.returncode == 2, made.stderr
    assert f"key {keyid(stranger.public_key())} is not a key of TUF role" in made.stderr
    assert f"{story.repo.replace('/', ':')}@prod" in made.stderr
    assert not out.exists()
    path, _ = story.record(f"{story.repo}@prod")
    out.write_bytes(
        write_record(base64.b64decode(json.loads(path.read_bytes())["payload"]), [stranger])
    )
    refused = story.verify(out)
    assert refused.returncode == 1
    assert (
        "check 3 (signature): envelope.signatures: no signature by a key of the "
        "top-level targets or of" in refused.stderr
    )
    pem = story.tmp / "stranger.pem"
    pem.write_bytes(public_key_pem(stranger.public_key()))
    assert story.verify(out, "--public-key", str(pem)).returncode == 0


def test_signing_key_smuggled_into_the_embedded_tuf_metadata_is_refused(story: Story) -> None:
    """The keys that may sign a record come from TUF metadata verified from the pinned root,
    never from the record's own: a stranger who adds their key to the embedded top-level
    targets (as a key of the alias's role) and signs fails the TUF check first."""
    from tuf.api.metadata import Metadata, Targets

    from modelward.attest.tuf import tuf_key

    path, _ = story.record(f"{story.repo}@prod")
    stranger = generate_private_key()

    def smuggle(predicate: dict[str, Any]) -> None:
        entry = predicate["tuf"]["targets"][-1]
        md = Metadata[Targets].from_bytes(base64.b64decode(entry["data"]))
        md.signed.add_key(tuf_key(stranger.public_key()), predicate["tuf"]["role"]["name"])
        data = md.to_bytes()
        entry.update(
            data=base64.b64encode(data).decode(),
            size=len(data),
            sha256="sha256:" + hashlib.sha256(data).hexdigest(),
        )

    refused = story.verify(_resign(story, path, smuggle, key=stranger))
    assert refused.returncode == 1
    assert "check 2 (tuf): tuf.targets[0]: not signed by the targets keys" in refused.stderr


def test_a_stranger_signature_beside_a_trusted_one_is_ignored_and_noted(story: Story) -> None:
    from modelward.attest.keys import keyid, load_private_key
    from modelward.attest.release import verify_record, write_record

    path, _ = story.record(f"{story.repo}@prod")
    payload = base64.b64decode(json.loads(path.read_bytes())["payload"])
    reviewer = load_private_key(story.keys[story.rev1.name])
    both = write_record(payload, [reviewer, generate_private_key()])
    verified = verify_record(both, story.root.read_bytes())
    assert verified.signers == (keyid(reviewer.public_key()),)
    assert any("by a key this verifier does not trust" in n for n in verified.notes)


def test_another_base64_spelling_of_the_same_signature_is_refused(story: Story) -> None:
    """Base64 decoders accept other padding bits for the same bytes: the signature still
    verifies, so only the canonical-form check can show the changed byte."""
    from modelward.attest.release import ReleaseRecordInvalid, verify_record

    path, _ = story.record(f"{story.repo}@prod")
    data = path.read_bytes()
    sig = json.loads(data)["signatures"][0]["sig"]
    assert sig.endswith("==")  # Ed25519: 64 bytes, 4 unused bits in the last character
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    respelled = sig[:-3] + alphabet[alphabet.index(sig[-3]) ^ 1] + "=="
    assert base64.b64decode(respelled) == base64.b64decode(sig)
    with pytest.raises(ReleaseRecordInvalid) as refused:
        verify_record(data.replace(sig.encode(), respelled.encode()), story.root.read_bytes())
    assert (refused.value.check, refused.value.field) == (1, "envelope.signatures[0].sig")


def test_unknown_alias_is_refused_by_name(story: Story) -> None:
    done = story.cli(
        story.rev1,
        "release",
        "record",
        f"{story.repo}@nosuch",
        "--key",
        str(story.keys[story.rev1.name]),
        "--out",
        str(story.tmp / "x.json"),
    )
    assert done.returncode == 1
    assert f"{story.repo}@nosuch: no such alias" in done.stderr
    assert not (story.tmp / "x.json").exists()


def test_version_out_of_range_is_refused_naming_the_range(story: Story) -> None:
    done = story.cli(
        story.rev1,
        "release",
        "record",
        f"{story.repo}@prod",
        "--version",
        "9",
        "--key",
        str(story.keys[story.rev1.name]),
        "--out",
        str(story.tmp / "y.json"),
    )
    assert done.returncode == 1
    assert "--version 9 is out of range (the alias's signed history" in done.stderr
    assert "has moves 1 to 3;" in done.stderr
    assert not (story.tmp / "y.json").exists()


def test_unreadable_record_file_is_a_usage_error_naming_it(story: Story) -> None:
    missing = story.tmp / "missing.json"
    done = story.verify(missing)
    assert done.returncode == 2
    assert f"record {missing}: cannot read" in done.stderr


def test_root_of_another_registry_is_refused(story: Story, tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from tuf.api.metadata import Metadata, Root

    from modelward.attest.tuf import tuf_key, tuf_signer

    path, _ = story.record(f"{story.repo}@prod")
    key = generate_private_key()
    root = Root(expires=datetime.now(UTC) + timedelta(days=1))
    for role in ("root", "targets", "snapshot", "timestamp"):
        root.add_key(tuf_key(key.public_key()), role)
    md = Metadata(root)
    md.sign(tuf_signer(key))
    other = tmp_path / "other-root.json"
    other.write_bytes(md.to_bytes())
    done = story.reg.cli("release", "verify", str(path), "--trust-root", str(other), env=OFFLINE)
    assert done.returncode == 1
    assert "check 2 (tuf): tuf.targets[0]: not signed by the targets keys" in done.stderr
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{}")
    done = story.reg.cli("release", "verify", str(path), "--trust-root", str(garbage), env=OFFLINE)
    assert done.returncode == 2
    assert f"--trust-root {garbage}: not TUF root metadata" in done.stderr


def test_public_surface_of_attest_release() -> None:
    import modelward.attest.release as release

    assert sorted(release.__all__) == [
        "CHECKS",
        "PREDICATE_TYPE",
        "PinnedRootError",
        "RecordKeyRefused",
        "RecordLimits",
        "ReleaseRecordInvalid",
        "SignedPlan",
        "TEMPLATES_DIR",
        "VerifiedRecord",
        "build_predicate",
        "classify_files",
        "gate_decisions",
        "later_plans",
        "make_record_statement",
        "render_html",
        "render_markdown",
        "rollout_lines",
        "shown",
        "signed_moves",
        "signed_plans",
        "signed_steps",
        "verify_record",
        "verify_record_key",
        "write_record",
    ]
    assert release.CHECKS == {
        1: "file",
        2: "tuf",
        3: "signature",
        4: "envelopes",
        5: "digests",
        6: "rollouts",
    }


def test_record_signed_by_the_registry_online_alias_key_is_refused(
    story: Story, tmp_path: Path
) -> None:
    """The registry's online key may sign an ``online: true`` alias, never a whole record:
    a compromised registry would vouch for its own evidence, approvals and audit log."""
    repo = story.reg.repo(
        story.pub,
        policy_yaml=(
            "version: 1\ntrust_registered_signers: true\naliases:\n"
            "  - {pattern: live, roles: [publisher], online: true}\n"
        ),
    )
    digest = push_new(story.pub, repo, tmp_path)
    moved = story.cli(story.pub, "alias", "set", f"{repo}@live", digest, "--json")
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout)["signed"] is True
    online_key = story.tmp / "registry" / "data" / "tuf-keys" / "aliases.key"
    assert online_key.exists()
    out = tmp_path / "live.release.json"
    made = story.reg.cli(
        "release", "record", f"{repo}@live", "--key", str(online_key), "--out", str(out)
    )
    assert made.returncode == 2, made.stderr
    assert f"is not a key of TUF role {repo.replace('/', ':')}@online" in made.stderr
    assert not out.exists()


def test_a_move_recorded_unsigned_between_two_signed_ones_is_not_a_version(
    story: Story, tmp_path: Path
) -> None:
    """v1 -> d1 signed, v2 -> d2 and v3 -> d1 the registry's word only: the signed role made
    one move, so the alias's signed history has one version; --version 3 is out of range."""
    key = str(story.keys[story.pub.name])
    ref = f"{story.repo}@beta"
    for digest, signed in ((story.d1, True), (story.d2, False), (story.d1, False)):
        moved = story.cli(
            story.pub, "alias", "set", ref, digest, "--json", *(("--key", key) if signed else ())
        )
        assert moved.returncode == 0, moved.stderr
    made = story.reg.cli(
        "release",
        "record",
        ref,
        "--version",
        "3",
        "--key",
        key,
        "--out",
        str(tmp_path / "beta.json"),
    )
    assert made.returncode == 1
    assert "--version 3 is out of range" in made.stderr
    assert "has moves 1 to 1;" in made.stderr
    assert not (tmp_path / "beta.json").exists()
