"""The registry client's messages and exit codes, each through the real ``modelward`` CLI
(docs/cli.md): a malformed reference is a usage error naming the argument and the form; a
connection error names the URL; ``https://`` against plain HTTP says so; a login URL ending
in ``/v1`` is normalized with a note; ``quarantine`` prints the digest and state; ``--help``
shows real metavars.
"""

from __future__ import annotations

import base64
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.inprocess import run_modelward
from tests.registry.conftest import (
    Registry,
    free_port,
    make_bundle_dir,
    new_publisher,
)

DIGEST = "sha256:" + "ab" * 32


def modelward(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    return run_modelward(args, full)


def _nowhere() -> dict[str, str]:
    """A registry URL nothing listens on: a usage error must be found before any request."""
    return {"MODELWARD_URL": f"http://127.0.0.1:{free_port()}", "MODELWARD_TOKEN": "t"}


@pytest.mark.parametrize(
    ("args", "argument", "form"),
    [
        (["alias", "get", "acme/tiny-llama@"], "REPO@ALIAS", "REPO@ALIAS"),
        (["alias", "get", "acme"], "REPO@ALIAS", "REPO@ALIAS"),
        (["alias", "get", "@x"], "REPO@ALIAS", "REPO@ALIAS"),
        (["alias", "history", "acme/tiny-llama@" + DIGEST], "REPO@ALIAS", "REPO@ALIAS"),
        (["alias", "set", "acme/tiny-llama@prod", "sha256:abc"], "DIGEST", "sha256:"),
        (["approve", "acme/tiny-llama@prod", "--alias", "prod"], "REPO@DIGEST", "REPO@sha256:"),
        (["quarantine", "acme", "--reason", "x"], "REPO@DIGEST", "REPO@sha256:"),
        (["bundle", "show", "acme/tiny-llama@"], "REPO@REF", "REPO@ALIAS or REPO@sha256:"),
        (["attestation", "list", "Acme/X@prod"], "REPO@REF", "REPO@ALIAS or REPO@sha256:"),
        (["repo", "create", "acme"], "ORG/NAME", "ORG/NAME"),
    ],
    ids=[
        "empty-alias",
        "no-at",
        "no-repo",
        "digest-for-alias",
        "short-digest",
        "alias-for-digest",
        "quarantine-no-at",
        "show-empty",
        "uppercase-repo",
        "repo-no-slash",
    ],
)
def test_malformed_reference_is_a_usage_error(args: list[str], argument: str, form: str) -> None:
    out = modelward(*args, env=_nowhere())
    assert out.returncode == 2, out.stderr
    assert f"Invalid value for '{argument}'" in out.stderr
    assert form in out.stderr


def test_push_to_a_malformed_repository_is_a_usage_error(tmp_path: Path) -> None:
    root = make_bundle_dir(tmp_path / "b")
    out = modelward("push", str(root), "acme@prod", env=_nowhere())
    assert out.returncode == 2
    assert "ORG/NAME" in out.stderr


def test_connection_refused_names_the_url() -> None:
    env = _nowhere()
    out = modelward("alias", "get", "acme/tiny-llama@prod", env=env)
    assert out.returncode == 3  # the environment (docs/cli.md#exit-codes)
    assert f"cannot connect to the registry at {env['MODELWARD_URL']}" in out.stderr


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)
def test_https_against_plain_http_says_to_use_http(registry: Registry) -> None:
    secure = registry.url.replace("http://", "https://")
    out = modelward(
        "alias",
        "get",
        "acme/tiny-llama@prod",
        env={"MODELWARD_URL": secure, "MODELWARD_TOKEN": "t"},
    )
    assert out.returncode == 3  # cannot reach the registry: the environment
    assert f"the server at {secure} speaks plain HTTP" in out.stderr
    assert f"use {registry.url}" in out.stderr


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)
def test_login_url_ending_in_v1_is_normalized_with_a_note(
    registry: Registry, tmp_path: Path
) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path), "MODELWARD_URL": "", "MODELWARD_TOKEN": ""}
    out = modelward("login", f"{registry.url}/v1/", "--token", registry.server.admin_token, env=env)
    assert out.returncode == 0, out.stderr
    assert f"note: using {registry.url}" in out.stderr
    saved = tomllib.loads((tmp_path / "modelward" / "config.toml").read_text())
    assert saved["url"] == registry.url
    # and the saved login works
    audit = modelward("audit", "log", "--limit", "1", env=env)
    assert audit.returncode == 0, audit.stderr


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)
def test_modelward_url_ending_in_v1_works_too(registry: Registry) -> None:
    out = modelward(
        "audit",
        "log",
        "--limit",
        "1",
        "--json",
        env={"MODELWARD_URL": f"{registry.url}/v1", "MODELWARD_TOKEN": registry.server.admin_token},
    )
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("url", ["ftp://127.0.0.1:8700", "127.0.0.1:8700", "http://"])
def test_login_refuses_what_is_not_a_registry_url(url: str, tmp_path: Path) -> None:
    out = modelward("login", url, "--token", "t", env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert out.returncode == 2
    assert "expected http://HOST:PORT" in out.stderr
    assert not (tmp_path / "modelward" / "config.toml").exists()


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)
def test_quarantine_prints_digest_and_state_not_the_manifest(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    pushed = pub.actor.client.push(make_bundle_dir(tmp_path / "b"), repo, sign=pub.sign)
    manifest = pub.actor.client.get_manifest(repo, pushed.digest)
    reviewer = registry.actor("reviewer")
    out = registry.cli(
        "quarantine", f"{repo}@{pushed.digest}", "--reason", "CVE-1", token=reviewer.token
    )
    assert out.returncode == 0, out.stderr
    assert f"quarantined {repo}@{pushed.digest}" in out.stdout
    assert "CVE-1" in out.stdout
    assert base64.b64encode(manifest).decode()[:40] not in out.stdout
    assert "manifest" not in out.stdout


COMMANDS = [
    ["login"],
    ["push"],
    ["approve"],
    ["quarantine"],
    ["alias", "get"],
    ["alias", "set"],
    ["alias", "history"],
    ["alias", "rollback"],
    ["audit", "log"],
    ["audit", "verify"],
    ["audit", "checkpoint"],
    ["audit", "key"],
    ["repo", "create"],
    ["repo", "add-publisher"],
    ["bundle", "show"],
    ["key", "register"],
    ["key", "list"],
    ["key", "revoke"],
    ["attestation", "add"],
    ["attestation", "list"],
    ["attestation", "retract"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=["-".join(c) for c in COMMANDS])
def test_help_shows_real_metavars(command: list[str]) -> None:
    out = modelward(*command, "--help", env={"COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    for typer_type in ("<bool>", "<list[", "<path>", "<str>", "<int", "{"):
        options = out.stdout.split("Options", 1)[-1]
        assert typer_type not in options, f"{' '.join(command)} --help:\n{out.stdout}"
