"""Issue 28 finding 7: the same "did you mean" from every command that takes a reference, and
no message cut off at a colon; through the real CLI against a real ``serve``.

``pull acme/tiny-llama@prdo`` blamed TUF alone (``no signed target names this alias``) while
``release record …@prdo`` answered ``did you mean acme/tiny-llama@prod?``. The commands that
resolve through TUF keep their refusal and add the registry's suggestion
(``client.suggest``); the registry commands print the registry's 404, which carries it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelward.attest.dsse import sign_envelope
from modelward.attest.keys import generate_private_key, public_key_pem, save_private_key
from modelward.attest.statement import PredicateType, make_statement
from tests.registry.conftest import (
    Registry,
    new_publisher,
    provenance_predicate,
    push_new,
)

pytestmark = pytest.mark.sqlite_only  # CLI wording: one backend

TYPO = "stagign"


def cut_off(stderr: str) -> list[str]:
    """Lines that end at a colon with nothing after them (a message cut mid-sentence): a
    colon that introduces indented lines is a list, not a cut."""
    lines = stderr.splitlines()
    return [
        line
        for i, line in enumerate(lines)
        if line.rstrip().endswith(":")
        and not (i + 1 < len(lines) and lines[i + 1].startswith((" ", "\t")))
    ]


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)
def test_every_reference_command_suggests_the_alias_meant(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    push_new(pub, repo, tmp_path, alias="staging")
    typo = f"{repo}@{TYPO}"
    meant = f"did you mean {repo}@staging?"
    key = tmp_path / "k.key"
    save_private_key(pub.key, key)
    pem = tmp_path / "k.pub"
    pem.write_bytes(public_key_pem(pub.key.public_key()))
    root = tmp_path / "root.json"
    registry.cli("trust", "root", "--out", str(root), check=True)
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"prompt": "hi"}\n')
    trust = ["--public-key", str(pem), "--trust-root", str(root)]
    cache = ["--cache-dir", str(tmp_path / "cache")]
    commands = {
        "pull": ["pull", typo, *trust, *cache],
        "verify": ["verify", typo, "--trust-root", str(root), *cache],
        "baseline show": ["baseline", "show", typo, *trust],
        "replay": ["replay", str(requests), "--bundle", typo, *trust, *cache],
        "boot": ["boot", typo, *trust, *cache],
        "alias get": ["alias", "get", typo],
        "alias history": ["alias", "history", typo],
        "bundle show": ["bundle", "show", typo],
        "bundle export": ["bundle", "export", typo, "--oci-layout", str(tmp_path / "oci")],
        "attestation list": ["attestation", "list", typo],
        "release record": ["release", "record", typo, "--key", str(key), "--out",
                           str(tmp_path / "record.json")],
    }  # fmt: skip
    wrong = []
    for name, args in commands.items():
        out = registry.cli(*args, token=pub.actor.token)
        problems = []
        if out.returncode == 0:
            problems.append("exit 0")
        if meant not in out.stderr:
            problems.append(f"no {meant!r}")
        if "Traceback" in out.stderr:
            problems.append("a traceback")
        if cut_off(out.stderr):
            problems.append(f"cut off: {cut_off(out.stderr)}")
        if problems:
            wrong.append(f"{name}: {'; '.join(problems)}\n  {out.stderr.strip()[-500:]}")
    assert not wrong, "\n".join(wrong)
    # the TUF refusal stands: the suggestion is added to it, never resolved in its place
    pulled = registry.cli(*commands["pull"], token=pub.actor.token)
    assert pulled.returncode == 1
    assert "no signed target names this alias" in pulled.stderr


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)
def test_an_untrusted_attestation_note_is_a_whole_sentence(
    registry: Registry, tmp_path: Path
) -> None:
    """``note: attestation N ignored: DSSE envelope has no signature by a trusted key:``
    ended at the colon; it names the keys that signed and the keys trusted."""
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path, alias="staging")
    # a second key of the publisher's: the registry trusts it (registered), the worker not
    stranger = generate_private_key()
    pub.actor.client.register_key(public_key_pem(stranger.public_key()).decode())
    statement = make_statement(
        "bundle", digest, PredicateType.PROVENANCE, provenance_predicate(None)
    )
    envelope = tmp_path / "stranger.dsse.json"
    envelope.write_bytes(sign_envelope(statement, [stranger]))
    added = registry.cli("attestation", "add", f"{repo}@{digest}", str(envelope),
                         token=pub.actor.token)  # fmt: skip
    assert added.returncode == 0, added.stderr
    pem = tmp_path / "k.pub"
    pem.write_bytes(public_key_pem(pub.key.public_key()))
    root = tmp_path / "root.json"
    registry.cli("trust", "root", "--out", str(root), check=True)
    out = registry.cli(
        "pull", f"{repo}@{digest}", "--public-key", str(pem), "--trust-root", str(root),
        "--cache-dir", str(tmp_path / "cache"), "--json", token=pub.actor.token,
    )  # fmt: skip
    notes = [line for line in out.stderr.splitlines() if "no signature by a trusted key" in line]
    assert out.returncode == 0, out.stderr
    assert notes, out.stderr
    for line in notes:
        assert not line.rstrip().endswith(":"), line
        assert "signed by keyid" in line
        assert "trusted:" in line
    assert json.loads(out.stdout)["digest"] == digest
    assert not cut_off(out.stderr), out.stderr
