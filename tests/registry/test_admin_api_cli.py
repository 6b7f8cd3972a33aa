"""Admin over the API, the admin commands' refusals, alias-move refusals that name their cause,
and ``serve`` on a busy port: through the real ``modelward`` CLI against a real server.

Direct database access (``--data-dir`` / ``--database-url``) for bootstrap and recovery is
tested in test_server_smoke.py (test_admin_cli_creates_principal_and_token).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelward.client.api import UnauthorizedError
from tests.inprocess import run_modelward
from tests.registry.conftest import (
    Registry,
    free_port,
    start_registry,
    unique,
)

DIGEST = "sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    registry = start_registry("sqlite", tmp_path_factory.mktemp("admin-api"), None)
    try:
        yield registry
    finally:
        registry.close()
        registry.server.stop()


def _bare(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``modelward ARGS`` in ``cwd`` with no login: no config file, no MODELWARD_* settings."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MODELWARD_")}
    clean["XDG_CONFIG_HOME"] = str(cwd / "no-config")
    clean.update(env)
    return run_modelward(args, clean, cwd=cwd)


def _audited(reg: Registry, action: str, subject: str) -> list[dict[str, object]]:
    return [e for e in reg.admin.iter_audit() if e["action"] == action and e["subject"] == subject]


# -- admin over the API --------------------------------------------------------------------
def test_admin_creates_principal_and_token_over_the_api(reg: Registry) -> None:
    name = unique("dave")
    made = reg.cli("admin", "principal", "create", name, "--role", "reader", check=True)
    assert made.stdout.strip() == f"created principal {name} (reader)"
    listed = reg.cli("admin", "principal", "list", check=True).stdout.splitlines()
    assert f"{name}\treader" in listed
    as_json = json.loads(reg.cli("admin", "principal", "list", "--json", check=True).stdout)
    assert {"name": name, "role": "reader"}.items() <= next(
        p for p in as_json["principals"] if p["name"] == name
    ).items()
    lines = reg.cli("admin", "token", "create", name, check=True).stdout.strip().splitlines()
    token_id, token = lines[0].removeprefix("token id: "), lines[-1]
    with reg.client(token) as client:
        assert client.whoami() == {"principal": name, "role": "reader"}
        assert reg.cli("admin", "token", "revoke", token_id, check=True).returncode == 0
        with pytest.raises(UnauthorizedError, match=token_id):
            client.whoami()
    # audited under the admin who called the API, not as local-admin
    assert [e["actor"] for e in _audited(reg, "principal.create", name)] == ["admin"]
    assert [e["actor"] for e in _audited(reg, "token.revoke", token_id)] == ["admin"]


def test_admin_token_create_json_is_one_document(reg: Registry) -> None:
    name = unique("erin")
    reg.cli("admin", "principal", "create", name, "--role", "reviewer", check=True)
    doc = json.loads(reg.cli("admin", "token", "create", name, "--json", check=True).stdout)
    assert doc["principal"] == name
    with reg.client(doc["token"]) as client:
        assert client.whoami()["role"] == "reviewer"


def test_admin_commands_refuse_a_non_admin_token(reg: Registry) -> None:
    publisher = reg.actor("publisher")
    name = unique("mallory")
    out = reg.cli("admin", "principal", "create", name, "--role", "admin", token=publisher.token)
    assert out.returncode == 1
    assert "403" in out.stderr
    assert "admin's token" in out.stderr
    assert name not in reg.cli("admin", "principal", "list", check=True).stdout
    out = reg.cli("admin", "token", "create", publisher.name, token=publisher.token)
    assert out.returncode == 1
    assert "mwt_" not in out.stdout


def test_key_register_for_another_principal_as_admin(reg: Registry, tmp_path: Path) -> None:
    from modelward.attest.keys import generate_private_key, public_key_pem

    alice = reg.actor("publisher")
    pem = tmp_path / "alice.pub"
    pem.write_bytes(public_key_pem(generate_private_key().public_key()))
    out = reg.cli("key", "register", str(pem), "--principal", alice.name, "--json", check=True)
    keyid = json.loads(out.stdout)["keyid"]
    owners = {k["keyid"]: k["principal"] for k in alice.client.list_keys()}
    assert owners[keyid] == alice.name
    # a publisher may not register a key for someone else
    other = reg.actor("publisher")
    pem2 = tmp_path / "other.pub"
    pem2.write_bytes(public_key_pem(generate_private_key().public_key()))
    refused = reg.cli("key", "register", str(pem2), "--principal", other.name, token=alice.token)
    assert refused.returncode == 1
    assert "403" in refused.stderr


# -- without a login or a database flag ----------------------------------------------------
def test_admin_without_login_or_database_flag_says_what_to_do_and_creates_nothing(
    tmp_path: Path,
) -> None:
    out = _bare(["admin", "principal", "create", "dave", "--role", "reader"], tmp_path)
    assert out.returncode == 1
    assert "modelward login" in out.stderr
    assert "--data-dir" in out.stderr
    assert "db upgrade" not in out.stderr  # the wrong advice of the reported bug
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no ./.modelward left behind


def test_admin_on_a_data_dir_without_a_registry_names_it_and_creates_nothing(
    tmp_path: Path,
) -> None:
    for args in (
        ["principal", "create", "dave", "--role", "reader"],
        ["principal", "list"],
        ["token", "create", "dave"],
        ["token", "revoke", "0123"],
    ):
        out = _bare(["admin", *args, "--data-dir", "elsewhere"], tmp_path)
        assert out.returncode == 1, out.stderr
        assert str(tmp_path / "elsewhere" / "registry.db") in out.stderr
        assert "nothing was created" in out.stderr
        assert "modelward db upgrade --data-dir elsewhere" in out.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_admin_on_an_empty_database_says_it_is_no_registry(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    url = f"sqlite:///{empty}"
    out = _bare(
        ["admin", "principal", "create", "dave", "--role", "reader", "--database-url", url],
        tmp_path,
    )
    assert out.returncode == 1
    assert f"the database {url}" in out.stderr
    assert "has no modelward schema" in out.stderr
    assert empty.stat().st_size == 0


def test_admin_with_an_unparsable_database_url_is_a_usage_error(tmp_path: Path) -> None:
    out = _bare(["admin", "principal", "list", "--database-url", "not a url:secret"], tmp_path)
    assert out.returncode == 2
    assert "invalid database URL (from --database-url)" in out.stderr
    assert "secret" not in out.stderr + out.stdout


# -- alias-move refusals name their cause --------------------------------------------------
def test_alias_move_refusal_says_the_publisher_publishes_elsewhere(reg: Registry) -> None:
    bob = reg.actor("publisher")
    reg.repo(bob)  # bob publishes to another repository
    repo = reg.repo()
    out = reg.cli("alias", "set", f"{repo}@prod", DIGEST, token=bob.token)
    assert out.returncode == 1
    said = " ".join(out.stderr.split())
    assert f"{bob.name} (publisher) may not move {repo}@prod" in said
    assert f"{bob.name} is not a publisher of {repo}" in said
    assert "'prod'" in said
    assert f"modelward repo add-publisher {repo} {bob.name}" in said


def test_alias_move_refusal_says_which_roles_the_rule_allows(reg: Registry) -> None:
    reader = reg.actor("reader")
    repo = reg.repo()
    out = reg.cli("alias", "set", f"{repo}@prod", DIGEST, token=reader.token)
    assert out.returncode == 1
    said = " ".join(out.stderr.split())
    assert f"{reader.name} (reader) may not move {repo}@prod" in said
    assert f"allows only publishers of {repo} and admins" in said
    assert f"names neither {reader.name} nor role reader" in said


# -- serve on a busy port ------------------------------------------------------------------
def test_serve_on_a_busy_port_exits_3_before_printing_its_url(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", port))
        busy.listen()
        out = _bare(
            ["serve", "--host", "127.0.0.1", "--port", str(port), "--data-dir", "data"], tmp_path
        )
    assert out.returncode == 3
    assert "modelward registry at" not in out.stdout
    assert f"127.0.0.1:{port}" in out.stderr
    assert "already in use" in out.stderr
    assert not (tmp_path / "data").exists()  # nothing created, no database, no token
