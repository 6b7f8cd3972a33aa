"""Every ```console block of docs/oci.md runs, as written, with the real clients (skopeo,
curl, modelward) against a real ``modelward serve``; the runner and the conventions are the
guides' (tests/docs/console.py).

The setup, as the quick start assumes it: alice, a publisher and owner of the org ``acme``
(her token in ``$ALICE_TOKEN``), her key at ``~/.config/modelward/alice.key`` (registered),
the tiny Llama at ``./tiny-llama``, pushed with her provenance as
``acme/tiny-llama@staging``, and that provenance in ``./provenance.dsse.json``. skopeo
reads ``~/.config/containers/policy.json`` first: the test writes the default policy a Debian
install ships there (``insecureAcceptAnything``), so the run does not depend on
/etc/containers. ``127.0.0.1:8700`` in the page means the test's registry.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.docs.console import parse_console_blocks, run_session
from tests.docs.test_guide_console_blocks import REPO_ROOT, Story, problems
from tests.registry.conftest import start_registry

OCI_MD = REPO_ROOT / "docs" / "oci.md"
PAGE_HOST = "127.0.0.1:8700"


def _setup(story: Story) -> Path:
    alice = story.user_dir("alice")
    story.tokens["alice"] = story.reg.actor("publisher", "alice").token
    admin = story.reg.server.admin_token
    story.cli("host", "org", "create", "acme", "--owner", "alice", token=admin)
    shutil.copytree(story.tiny_model, alice / "tiny-llama")
    home = alice / "home"
    key = home / ".config" / "modelward" / "alice.key"
    key.parent.mkdir(parents=True, exist_ok=True)
    token = story.tokens["alice"]
    story.cli("alice", "key", "generate", "--out", str(key), token=token)
    story.cli("alice", "key", "register", f"{key}.pub", token=token)
    story.cli("alice", "repo", "create", "acme/tiny-llama", token=token)
    story.cli(
        "alice",
        "bundle",
        "sign",
        "./tiny-llama",
        "--key",
        str(key),
        "--out",
        "provenance.dsse.json",
        token=token,
    )
    story.cli(
        "alice",
        "push",
        "./tiny-llama",
        "acme/tiny-llama",
        "--attestation",
        "provenance.dsse.json",
        "--alias",
        "staging",
        token=token,
    )
    policy = home / ".config" / "containers" / "policy.json"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text(json.dumps({"default": [{"type": "insecureAcceptAnything"}]}))
    return alice


def test_oci_md_console_blocks_say_what_the_code_does(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_master: Path
) -> None:
    for tool in ("skopeo", "curl"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: `make oci-tools` installs it (docs/oci.md#tests)")
    base = tmp_path_factory.mktemp("oci-md")
    reg = start_registry("sqlite", base / "registry", None)
    try:
        story = Story(reg, base, tiny_model_master)
        alice = _setup(story)
        commands = parse_console_blocks(OCI_MD.read_text(encoding="utf-8"), "oci.md")
        assert [c for c in commands if c.runs], "docs/oci.md has no console block"
        results = run_session(
            commands,
            cwd=alice,
            env=story.env("alice"),
            record_dir=base / "records",
            substitutions={PAGE_HOST: reg.url.removeprefix("http://")},
        )
    finally:
        reg.close()
        reg.server.stop()
    found = problems(results)
    assert not found, "docs/oci.md is not what the code does:\n\n" + "\n\n".join(found[:3])
