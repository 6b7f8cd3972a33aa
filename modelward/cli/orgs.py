"""``modelward org create|show|list|set``, ``modelward org owner add|remove`` and
``modelward org member add|remove|list`` over HTTP.

An org's owners create repositories ``org/*``; its floor is the least every repository policy
in it must require of protected aliases (docs/registry.md#orgs). Creating and changing orgs
and owners is for admins; anybody with a token may read them. An org's members read its
private repositories (docs/registry.md#private-repositories); its owners and admins manage
them and ``org set --private-by-default``. A refusal prints the server's message with exit 1
(a floor that existing repositories do not meet lists them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from modelward.attest._yaml import StrictYAMLError, load_strict_yaml
from modelward.cli.common import fail
from modelward.cli.registry_keys import Force, who_may_sign_previewed
from modelward.cli.remote import registry_client, reported

__all__ = ["describe_org", "org_app", "register_orgs"]

org_app = typer.Typer(
    name="org",
    help="Orgs: who may create repositories ORG/*, and the policy floor they must meet.",
    no_args_is_help=True,
)
owner_app = typer.Typer(name="owner", help="An org's owners (admins).", no_args_is_help=True)
org_app.add_typer(owner_app)
member_app = typer.Typer(
    name="member",
    help="An org's members: they read its private repositories (its owners and admins manage "
    "them).",
    no_args_is_help=True,
)
org_app.add_typer(member_app)

OrgArg = Annotated[str, typer.Argument(help="Org name (the ORG of ORG/NAME)")]
AsJson = Annotated[bool, typer.Option("--json", help="One JSON document on stdout")]


def _floor_entry(text: str) -> dict[str, Any]:
    pattern, sep, approvals = text.rpartition(":")
    if not sep or not pattern or not approvals.isascii() or not approvals.isdigit():
        fail(f"--protect {text!r}: expected PATTERN:APPROVALS, e.g. prod:2")
    if len(approvals) > 3:
        fail(f"--protect {text!r}: too many approvals")
    return {"pattern": pattern, "approvals": int(approvals)}


def _read_floor(path: Path) -> dict[str, Any]:
    try:
        doc = load_strict_yaml(path.read_bytes())
    except (OSError, StrictYAMLError) as exc:
        fail(f"{path}: {exc}")
    if not isinstance(doc, dict):
        fail(f"{path}: a floor is a mapping: aliases: [{{pattern: prod, approvals: 2}}]")
    return doc


def describe_org(org: dict[str, Any]) -> str:
    """Human lines: name, owners, floor, repository count."""
    floor = org.get("floor")
    entries = []
    for entry in (floor or {}).get("aliases", []):
        extra = ", baseline" if entry.get("require_baseline") else ""
        entries.append(f"{entry['pattern']} (protected, >= {entry['approvals']} approvals{extra})")
    return "\n".join(
        [
            str(org.get("name")),
            f"  owners: {', '.join(org.get('owners') or []) or '(none: admins only)'}",
            f"  floor: {'; '.join(entries) or '(none)'}",
            f"  repositories: {org.get('repositories')}",
            f"  new repositories: {'private' if org.get('private_by_default') else 'public'}",
        ]
    )


def _show(value: Any, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(value, indent=2, sort_keys=True))
    elif isinstance(value, list):
        typer.echo("\n".join(describe_org(v) for v in value) if value else "(no orgs)")
    else:
        typer.echo(describe_org(value))


@org_app.command("create")
def create(
    org: OrgArg,
    *,
    owner: Annotated[
        list[str] | None,
        typer.Option("--owner", help="An owner (a publisher); repeat; replaces the owners"),
    ] = None,
    protect: Annotated[
        list[str] | None,
        typer.Option("--protect", help="PATTERN:APPROVALS of the floor, e.g. prod:2; repeat"),
    ] = None,
    floor: Annotated[
        Path | None,
        typer.Option(
            "--floor",
            exists=True,
            dir_okay=False,
            help="The floor as YAML/JSON: aliases: [{pattern, approvals, require_baseline}]",
        ),
    ] = None,
    no_floor: Annotated[bool, typer.Option("--no-floor", help="Remove the floor")] = False,
    as_json: AsJson = False,
) -> None:
    """Create an org, or update an existing one (admins). Options left out keep their value."""
    if sum(bool(x) for x in (protect, floor, no_floor)) > 1:
        fail("give one of --protect, --floor or --no-floor")
    doc: dict[str, Any] | None = None
    if floor is not None:
        doc = _read_floor(floor)
    elif protect:
        doc = {"aliases": [_floor_entry(p) for p in protect]}
    with reported(), registry_client() as client:
        answer = client.put_org(org, owners=owner, floor=doc, remove_floor=no_floor)
    _show(answer, as_json)


@org_app.command("show")
def show(org: OrgArg, as_json: AsJson = False) -> None:
    """Show an org: owners, floor, number of repositories."""
    with reported(), registry_client() as client:
        answer = client.get_org(org)
    _show(answer, as_json)


@org_app.command("list")
def list_(as_json: AsJson = False) -> None:
    """List every org."""
    with reported(), registry_client() as client:
        answer = client.list_orgs()
    _show(answer, as_json)


@owner_app.command("add")
def owner_add(
    org: OrgArg, principal: Annotated[str, typer.Argument(help="A publisher (or an admin)")]
) -> None:
    """Make a principal an owner of the org (admins)."""
    with reported(), registry_client() as client:
        answer = client.add_org_owner(org, principal)
    _show(answer, False)


@owner_app.command("remove")
def owner_remove(org: OrgArg, principal: Annotated[str, typer.Argument(help="An owner")]) -> None:
    """Remove an owner (admins); the repositories it created stay, and it stays their
    publisher."""
    with reported(), registry_client() as client:
        answer = client.remove_org_owner(org, principal)
    _show(answer, False)


@org_app.command("set")
def set_(
    org: OrgArg,
    *,
    private_by_default: Annotated[
        bool,
        typer.Option(
            "--private-by-default/--public-by-default",
            help="Whether the org's new repositories are private",
        ),
    ],
    as_json: AsJson = False,
) -> None:
    """Set whether the org's new repositories are private (its owners and admins)."""
    with reported(), registry_client() as client:
        answer = client.set_org_private_by_default(org, private=private_by_default)
    _show(answer, as_json)


def _members_lines(answer: dict[str, Any]) -> str:
    owners = ", ".join(answer.get("owners") or []) or "(none)"
    members = ", ".join(answer.get("members") or []) or "(none)"
    return f"{answer.get('org')}\n  owners: {owners}\n  members: {members}"


def _show_members(answer: Any, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(answer, indent=2, sort_keys=True))
    else:
        typer.echo(_members_lines(answer))


@member_app.command("add")
def member_add(
    org: OrgArg,
    principal: Annotated[str, typer.Argument(help="The principal who may read its repositories")],
    as_json: AsJson = False,
) -> None:
    """Make a principal a member of the org: it reads its private repositories."""
    with reported(), registry_client() as client:
        answer = client.add_org_member(org, principal)
    _show_members(answer, as_json)


@member_app.command("remove")
def member_remove(
    org: OrgArg,
    principal: Annotated[str, typer.Argument(help="A member")],
    force: Force = False,
    as_json: AsJson = False,
) -> None:
    """Take a principal off the org's members. Like every change of who may sign, first
    shows what it would leave short of its threshold; with any, nothing is changed
    without --force."""
    with reported(), registry_client() as client:
        who_may_sign_previewed(
            client,
            "remove_member",
            {"org": org, "principal": principal},
            force=force,
            what=f"{principal} is still a member of {org}",
        )
        answer = client.remove_org_member(org, principal, force=force)
    _show_members(answer, as_json)


@member_app.command("list")
def member_list(org: OrgArg, as_json: AsJson = False) -> None:
    """List the org's owners and members (its owners and admins)."""
    with reported(), registry_client() as client:
        answer = client.org_members(org)
    _show_members(answer, as_json)


def register_orgs(app: typer.Typer) -> None:
    """Add ``modelward org`` to the root app."""
    app.add_typer(org_app)
