"""``modelward repo create|add-publisher|remove-publisher|private|public|grant|revoke``: make
repositories and say who publishes to them and who reads them (docs/registry.md#private-
repositories)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from modelward.cli.common import fail, read_bounded
from modelward.cli.registry_keys import Force, who_may_sign_previewed
from modelward.cli.remote import AsJson, RepoArg, emit, registry_client, reported

if TYPE_CHECKING:  # httpx loads with the client, inside the commands that send requests
    pass

__all__ = [
    "repo_add_publisher",
    "repo_app",
    "repo_create",
    "repo_grant",
    "repo_private",
    "repo_public",
    "repo_remove_publisher",
    "repo_revoke",
]

repo_app = typer.Typer(name="repo", help="Manage repositories.", no_args_is_help=True)


def _repo_lines(repo: Any) -> str:
    publishers = ", ".join(repo.get("publishers") or []) or "(none)"
    own = "its own" if repo.get("policy_yaml") else "the registry's default"
    lines = (
        f"{repo.get('name')}\n  publishers: {publishers}\n  policy: {own}\n"
        f"  created: {repo.get('created_at')}"
    )
    if repo.get("private"):
        readers = ", ".join(repo.get("readers") or []) or "(none)"
        lines += f"\n  private: read by its org's owners and members, its publishers, {readers}"
    return lines


def _repo_json(repo: Any) -> dict[str, Any]:
    keep = ("name", "org", "publishers", "policy_yaml", "created_at", "private", "readers")
    return {k: repo.get(k) for k in keep}


def _policy_text(path: Path) -> str:
    """The policy file ``path`` as text, refused (exit 2) by its size before a byte is read
    when it is larger than the registry accepts (``attest.policy.MAX_POLICY_BYTES``)."""
    from modelward.attest.policy import MAX_POLICY_BYTES

    try:
        size = path.stat().st_size
    except OSError as exc:
        fail(f"--policy {path}: cannot read: {exc.strerror or exc}", code=2)
    if size > MAX_POLICY_BYTES:
        fail(
            f"--policy {path}: {size} bytes, larger than the {MAX_POLICY_BYTES} bytes the "
            "registry accepts for a policy; nothing was sent",
            code=2,
        )
    data = read_bounded(path, "--policy", MAX_POLICY_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"--policy {path}: not UTF-8 text (byte {exc.start})", code=2)


@repo_app.command("create")
def repo_create(
    name: RepoArg,
    policy: Annotated[
        Path | None,
        typer.Option(metavar="FILE", exists=True, dir_okay=False, help="Its own policy (YAML)"),
    ] = None,
    private: Annotated[
        bool | None,
        typer.Option(
            "--private/--public",
            help="Readable only by its readers (default: the org's private-by-default)",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Create a repository (optionally with its own policy file)."""
    text = _policy_text(policy) if policy else None
    with reported(), registry_client() as client:
        created = client.create_repo(name, text, private=private)
    emit(_repo_json(created), as_json, _repo_lines)


@repo_app.command("add-publisher")
def repo_add_publisher(
    name: RepoArg,
    principal: Annotated[
        str, typer.Argument(metavar="PRINCIPAL", help="The principal who may publish to it")
    ],
    as_json: AsJson = False,
) -> None:
    """Let a principal publish to a repository (admins only)."""
    with reported(), registry_client() as client:
        repo = client.add_publisher(name, principal)
    emit(_repo_json(repo), as_json, _repo_lines)


@repo_app.command("remove-publisher")
def repo_remove_publisher(
    name: RepoArg,
    principal: Annotated[
        str, typer.Argument(metavar="PRINCIPAL", help="The principal who may no longer publish")
    ],
    force: Force = False,
    as_json: AsJson = False,
) -> None:
    """Stop a principal publishing to a repository (admins only). First shows which signed
    aliases and rollout plans that would leave short of their threshold; with any,
    nothing is changed without --force."""
    with reported(), registry_client() as client:
        who_may_sign_previewed(
            client,
            "remove_publisher",
            {"repository": name, "principal": principal},
            force=force,
            what=f"{principal} still publishes to {name}",
        )
        repo = client.remove_publisher(name, principal, force=force)
    emit(_repo_json(repo), as_json, _repo_lines)


@repo_app.command("private")
def repo_private(name: RepoArg, as_json: AsJson = False) -> None:
    """Make a repository private: readable only by admins, reviewers, its org's owners and
    members, its publishers and the principals granted read (its org's owners, admins)."""
    with reported(), registry_client() as client:
        repo = client.set_repo_visibility(name, private=True)
    emit(_repo_json(repo), as_json, _repo_lines)


@repo_app.command("public")
def repo_public(name: RepoArg, as_json: AsJson = False) -> None:
    """Make a repository public: readable by every principal (its org's owners, admins)."""
    with reported(), registry_client() as client:
        repo = client.set_repo_visibility(name, private=False)
    emit(_repo_json(repo), as_json, _repo_lines)


@repo_app.command("grant")
def repo_grant(
    name: RepoArg,
    principal: Annotated[
        str, typer.Argument(metavar="PRINCIPAL", help="The principal who may read it")
    ],
    as_json: AsJson = False,
) -> None:
    """Grant a principal read on a (private) repository (its org's owners, admins)."""
    with reported(), registry_client() as client:
        repo = client.grant_read(name, principal)
    emit(_repo_json(repo), as_json, _repo_lines)


@repo_app.command("revoke")
def repo_revoke(
    name: RepoArg,
    principal: Annotated[
        str, typer.Argument(metavar="PRINCIPAL", help="The principal whose grant is taken back")
    ],
    as_json: AsJson = False,
) -> None:
    """Take back a principal's read grant on a repository (its org's owners, admins)."""
    with reported(), registry_client() as client:
        repo = client.revoke_read(name, principal)
    emit(_repo_json(repo), as_json, _repo_lines)
