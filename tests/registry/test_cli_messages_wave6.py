"""Issue 39 item 5: words that misled a reviewer, each run through the real command.

- the console's login page names a command that exists (``modelward admin token create``);
- ``quarantine lift`` says the bundle is no longer quarantined and that no alias moved, never
  ``-> None``;
- ``audit verify --key garbage`` says what a verifier key looks like and which file of the
  registry it comes from;
- a malformed ``eval attach --results`` file and ``--version`` are in the exit-code table
  test (tests/registry/test_exit_codes.py).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx
import pytest

from modelward.attest.keys import save_private_key
from modelward.cli import COMMANDS
from tests import forkserver
from tests.registry.conftest import Registry, new_publisher, push_new

pytestmark = pytest.mark.sqlite_only


def _commands(words: list[str]) -> bool:
    """Whether ``modelward WORDS... --help`` names a real command (exit 0)."""
    done = forkserver.run([*words, "--help"], dict(os.environ), timeout=60)
    return done.returncode == 0


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)
def test_login_page_names_a_command_that_exists(registry: Registry) -> None:
    page = httpx.get(f"{registry.url}/ui/login", timeout=30).text
    named = re.findall(r"<code>modelward ([a-z -]+?)(?: [A-Z]+)?</code>", page)
    assert named, page
    assert "principal token" not in page
    for command in named:
        words = command.split()
        assert words[0] in COMMANDS, command
        assert _commands(words), f"the login page names `modelward {command}`, which fails"
    assert "modelward admin token create NAME" in page


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)
def test_quarantine_lift_says_what_is_true_not_none(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    rev = new_publisher(registry, "reviewer")
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    ref = f"{repo}@{digest}"
    key = tmp_path / "rev.key"
    save_private_key(rev.key, key)
    root = tmp_path / "root.json"  # the signer's pinned root (signing verifies from it)
    registry.cli("trust", "root", "--out", str(root), check=True)
    env = {"MODELWARD_TRUST_ROOT": str(root)}
    registry.cli("quarantine", ref, "--reason", "bad weights", "--key", str(key),
                 token=rev.actor.token, check=True, env=env)  # fmt: skip
    proposed = registry.cli("quarantine", "lift", ref, "--reason", "false alarm",
                            token=rev.actor.token, check=True, env=env)  # fmt: skip
    assert "None" not in proposed.stdout + proposed.stderr
    assert "still in force" in proposed.stderr
    pending = registry.cli("trust", "pending", token=rev.actor.token, check=True).stdout
    assert f"lift the quarantine of {digest}" in pending, pending
    assert "-> None" not in pending
    lifted = registry.cli("quarantine", "lift", ref, "--reason", "false alarm", "--key",
                          str(key), token=rev.actor.token, check=True, env=env)  # fmt: skip
    said = lifted.stdout + lifted.stderr
    assert "None" not in said, said
    assert f"{ref} is no longer quarantined" in lifted.stdout, said
    assert "no alias was moved" in lifted.stdout, said


def test_audit_verify_key_garbage_says_what_a_verifier_key_is(tmp_path: Path) -> None:
    done = forkserver.run(
        ["audit", "verify", "--key", "garbage"], dict(os.environ), timeout=60, cwd=tmp_path
    )
    assert done.returncode == 2, done.stderr
    assert "...+...+..." not in done.stderr
    assert "--key 'garbage' is not a checkpoint verifier key" in done.stderr
    assert "NAME+ID+KEY" in done.stderr
    assert "Ed25519" in done.stderr
    # where the key comes from: the registry's key file, printed by `audit key`
    assert "audit-checkpoint.key" in done.stderr
    assert "modelward audit key" in done.stderr


def test_version_is_the_installed_package_version() -> None:
    from importlib.metadata import version

    done = forkserver.run(["--version"], dict(os.environ), timeout=60)
    assert (done.returncode, done.stdout) == (0, f"modelward {version('modelward')}\n")
    listed = forkserver.run(["--help"], dict(os.environ), timeout=60)
    assert "--version" in listed.stdout
