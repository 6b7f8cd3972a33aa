"""``modelward bundle show|delete``, ``approve`` and ``quarantine [lift]``: a bundle's record,
the reviews it collects for protected aliases, taking it out of service and back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer import _click as click
from typer.core import TyperGroup

from modelward.cli.common import err_console, fail
from modelward.cli.remote import (
    AnyRef,
    AsJson,
    DigestRef,
    PassphraseEnvOpt,
    emit,
    registry_client,
    reported,
)
from modelward.client.config import parse_reference
from modelward.client.errors import ConflictError

if TYPE_CHECKING:  # httpx loads with the client, inside the commands that send requests
    from modelward.client.api import RegistryClient

__all__ = ["approve", "bundle_delete", "bundle_show", "quarantine", "quarantine_app"]


def _bundle_state(record: Any) -> str:
    if record.get("tombstoned"):
        return "tombstoned"
    if record.get("quarantined"):
        return f"quarantined ({record.get('quarantine_reason')}, {record.get('quarantined_at')})"
    return "live"


def _bundle_lines(repo: str) -> Callable[[Any], str]:
    def lines(record: Any) -> str:
        from modelward.attest.manifest import FILEPATH_ANNOTATION

        out = [
            f"{repo}@{record.get('digest')}",
            f"  state:        {_bundle_state(record)}",
            f"  pushed by:    {record.get('created_by')} at {record.get('created_at')}",
        ]
        decision = record.get("decision") or {}
        signers = ", ".join(str(s.get("name")) for s in decision.get("signers") or []) or "-"
        out.append(f"  signers:      {signers}")
        manifest = record.get("manifest")
        if manifest is None:
            out.append("  files:        (manifest withheld: quarantined)")
        else:
            layers = manifest.get("layers") or []
            size = sum(int(layer.get("size", 0)) for layer in layers)
            out.append(f"  files:        {len(layers)} ({size} bytes)")
            for layer in layers:
                path = (layer.get("annotations") or {}).get(FILEPATH_ANNOTATION, "?")
                out.append(f"    {layer.get('digest')}  {layer.get('size'):>12}  {path}")
        atts = record.get("attestations") or []
        out.append(f"  attestations: {len(atts)}")
        from modelward.cli.attestation import describe

        out += [f"    {describe(a)}" for a in atts]
        return "\n".join(out)

    return lines


def bundle_show(ref: AnyRef, as_json: AsJson = False) -> None:
    """Show a bundle: digest, quarantine/tombstone state, manifest, attestations."""
    r = parse_reference(ref)
    with reported(), registry_client() as client:
        digest = client.resolve(r)
        record = dict(client.get_bundle(r.repo, digest))
        manifest_b64 = record.pop("manifest", None)
        record["manifest"] = None  # withheld: a quarantined digest, for publishers and readers
        if isinstance(manifest_b64, str):
            import base64

            record["manifest"] = json.loads(base64.b64decode(manifest_b64))
        record["attestations"] = [
            {k: v for k, v in a.items() if k != "data"}
            for a in client.list_attestations(r.repo, digest)
        ]
    record["repository"] = r.repo
    emit(record, as_json, _bundle_lines(r.repo))


def _approval_line(repo: str) -> Callable[[Any], str]:
    def line(answer: Any) -> str:
        approvers = ", ".join(answer.get("approvers") or []) or "none"
        verb = "your approval withdrawn" if answer.get("withdrawn") else "approved"
        unsigned = answer.get("unsigned_proposals") or []
        taken = (
            f"; your signature taken off pending proposal(s) {', '.join(map(str, unsigned))}"
            if unsigned
            else ""
        )
        return (
            f"{repo}@{answer.get('digest')} for {answer.get('alias')}: {verb}{taken}; "
            f"approvers: {approvers}"
        )

    return line


def approve(
    ref: DigestRef,
    *,
    alias: Annotated[str, typer.Option(metavar="ALIAS", help="The alias this approval is for")],
    withdraw: Annotated[
        bool, typer.Option("--withdraw", help="Withdraw your own approval instead (needs --reason)")
    ] = False,
    reason: Annotated[
        str | None,
        typer.Option(metavar="TEXT", help="Why the approval is withdrawn (recorded)"),
    ] = None,
    key: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Sign the pending move with your key: the approval workers verify (docs/tuf.md)",
        ),
    ] = None,
    passphrase_env: PassphraseEnvOpt = None,
    as_json: AsJson = False,
) -> None:
    """Approve a bundle for a protected alias (reviewers; not the publisher), or withdraw
    your own approval with --withdraw --reason: it no longer counts."""
    if reason is not None and not withdraw:
        fail("--reason is recorded only with --withdraw", code=2)
    r = parse_reference(ref, require="digest")
    if key is not None and not withdraw:
        _approve_signed(
            r.repo, str(r.digest), alias, key, passphrase_env=passphrase_env, as_json=as_json
        )
        return
    if withdraw:
        if reason is None or not reason.strip():
            fail("--withdraw needs --reason TEXT", code=2)
        with reported(), registry_client() as client:
            answer = client.withdraw_approval(r.repo, str(r.digest), alias, reason)
        emit(answer, as_json, _approval_line(r.repo))
        return
    with reported(), registry_client() as client:
        answer = client.approve(r.repo, str(r.digest), alias)
        current = _alias_now(client, r.repo, alias)
    if current is not None and current.get("digest") == r.digest and current.get("signed"):
        # a late approval: the move is signed already, workers see it; nothing to sign
        answer["signed"], answer["sign_with"] = True, None
        emit(answer, as_json, _approval_line(r.repo))
        return
    # a keyless approval counts on the registry only: nothing signed says it to workers
    answer["signed"] = False
    answer["sign_with"] = f"modelward approve {r.repo}@{r.digest} --alias {alias} --key KEY"
    err_console.print(
        f"warning: approved on the registry's word only: no TUF signature, so {r.repo}@"
        f"{alias} stays UNSIGNED for workers resolving through TUF once it moves; sign the "
        f"pending move with: {answer['sign_with']}",
        markup=False,
    )
    emit(answer, as_json, _approval_line(r.repo))


def _alias_now(client: RegistryClient, repo: str, alias: str) -> dict[str, Any] | None:
    """``repo@alias`` as the registry shows it, None when it does not exist."""
    from modelward.client.errors import NotFoundError

    try:
        return dict(client.get_alias(repo, alias))
    except NotFoundError:
        return None


def _approve_signed(
    repo: str, digest: str, alias: str, key: Path, *, passphrase_env: str | None, as_json: bool
) -> None:
    """``approve --key``: sign the pending proposal moving ``repo@alias`` to ``digest``."""
    from modelward.cli.trust import find_pending, load_key, sign_proposal

    private = load_key(key, passphrase_env)
    target = f"{repo}/aliases/{alias}"
    with reported(), registry_client() as client:
        pending = find_pending(client, repo=repo, alias=alias, target=target, digest=digest)
        if pending is None:
            current = _alias_now(client, repo, alias)
            if current is not None and current.get("digest") == digest:
                # a late approval: the threshold was met before this signature came
                signed = bool(current.get("signed"))
                emit(
                    {"repository": repo, "alias": alias, "digest": digest, "already": True,
                     "signed": signed},
                    as_json,
                    lambda _: f"{repo}@{alias} already points to {digest}"
                    + (" (signed)" if signed else " (not signed yet)")
                    + ": nothing to approve",
                )  # fmt: skip
                return
            fail(
                f"no pending proposal moves {repo}@{alias} to {digest}",
                hint=f"the publisher proposes it: modelward alias set {repo}@{alias} {digest}",
            )
        answer = sign_proposal(
            client, int(pending["id"]), private, expect_target=target, expect_digest=digest
        )
    from modelward.cli.trust import signed_line

    emit(answer, as_json, signed_line)


def quarantine(
    ref: DigestRef,
    reason: Annotated[
        str, typer.Option(metavar="TEXT", help="Why (recorded and shown to loaders)")
    ],
    key: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Sign the quarantine with your key, so workers "
            "verifying through TUF refuse the bundle too",
        ),
    ] = None,
    passphrase_env: PassphraseEnvOpt = None,
    as_json: AsJson = False,
) -> None:
    """Quarantine a bundle: unloadable everywhere, unassignable to aliases."""
    from modelward.cli.trust import find_pending, load_key, sign_proposal

    r = parse_reference(ref, require="digest")
    private = load_key(key, passphrase_env) if key is not None else None
    target = "quarantine/" + str(r.digest).removeprefix("sha256:")
    with reported(), registry_client() as client:
        try:
            record = client.quarantine(r.repo, str(r.digest), reason)
            proposal = record.get("proposal")
        except ConflictError:
            # already quarantined on the registry's word: sign its pending proposal
            pending = (
                find_pending(client, repo=None, alias=None, target=target, digest=str(r.digest))
                if private is not None
                else None
            )
            if pending is None:
                raise
            record, proposal = dict(client.get_bundle(r.repo, str(r.digest))), pending["id"]
        signed = None
        if private is not None and proposal is not None:
            signed = sign_proposal(
                client, int(proposal), private, expect_target=target, expect_digest=str(r.digest)
            )
    shown = {
        "repository": r.repo,
        "digest": record.get("digest"),
        "quarantined": record.get("quarantined"),
        "quarantine_reason": record.get("quarantine_reason"),
        "quarantined_at": record.get("quarantined_at"),
        "tombstoned": record.get("tombstoned"),
        "signed": signed is not None and signed.get("state") == "published",
    }
    emit(
        shown,
        as_json,
        lambda q: (
            f"quarantined {q['repository']}@{q['digest']} at {q['quarantined_at']}: "
            f"{q['quarantine_reason']}\nno worker will load it and no alias can point at it"
        ),
    )


def bundle_delete(
    ref: DigestRef,
    *,
    reason: Annotated[str, typer.Option(metavar="TEXT", help="Why (recorded in the audit log)")],
    as_json: AsJson = False,
) -> None:
    """Delete (tombstone) a bundle (admins; with a reason, audited)."""
    if not reason.strip():
        fail("--reason must not be blank", code=2)
    r = parse_reference(ref, require="digest")
    with reported(), registry_client() as client:
        client.tombstone(r.repo, str(r.digest), reason)
        record = dict(client.get_bundle(r.repo, str(r.digest)))
    shown = {
        "repository": r.repo,
        "digest": str(r.digest),
        "tombstoned": bool(record.get("tombstoned")),
        "reason": reason,
    }
    emit(shown, as_json, lambda d: f"deleted {d['repository']}@{d['digest']}: {d['reason']}")


class _DefaultSet(TyperGroup):
    """``quarantine REF --reason`` stays ``quarantine set REF --reason``: a first argument
    that names no subcommand (a reference never does) goes to ``set``."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["set", *args]
        return super().resolve_command(ctx, args)


quarantine_app = typer.Typer(
    name="quarantine",
    cls=_DefaultSet,
    help="Quarantine a bundle (quarantine [set] REF --reason), or lift a quarantine.",
    no_args_is_help=True,
)
quarantine_app.command("set")(quarantine)


@quarantine_app.command("lift")
def quarantine_lift(
    ref: DigestRef,
    *,
    reason: Annotated[str, typer.Option(metavar="TEXT", help="Why it is lifted (recorded)")],
    key: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Sign the lift with your key: a signed quarantine ends only once a reviewer "
            "signs its lift",
        ),
    ] = None,
    passphrase_env: PassphraseEnvOpt = None,
    as_json: AsJson = False,
) -> None:
    """Lift a bundle's quarantine (reviewers): proposed for a reviewer to sign when workers
    saw it signed; refused while an alias points at the bundle."""
    from modelward.cli.trust import load_key, sign_proposal

    if not reason.strip():
        fail("--reason must not be blank", code=2)
    r = parse_reference(ref, require="digest")
    private = load_key(key, passphrase_env) if key is not None else None
    target = "quarantine/" + str(r.digest).removeprefix("sha256:")
    with reported(), registry_client() as client:
        answer = dict(client.lift_quarantine(r.repo, str(r.digest), reason))
        proposal = answer.get("proposal")
        if private is not None and proposal is not None:
            signed = sign_proposal(
                client, int(proposal), private, expect_target=target, expect_digest=None
            )
            answer["lifted"] = signed.get("state") == "published"
    answer["repository"] = r.repo

    def line(a: dict[str, Any]) -> str:
        where = f"{a['repository']}@{a['digest']}"
        if a.get("lifted"):
            return (
                f"{where} is no longer quarantined ({a['reason']}); no alias was moved: a lift "
                "never puts a bundle back on an alias (`modelward alias set` does)"
            )
        return (
            f"proposed lifting the quarantine of {where} (proposal {a['proposal']}): it holds "
            f"until a reviewer signs: modelward quarantine lift {where} --reason TEXT --key KEY "
            f"(or modelward trust sign {a['proposal']} --key KEY)"
        )

    emit(answer, as_json, line)
    if not answer.get("lifted"):
        err_console.print(
            "warning: the quarantine is still in force: the lift needs a reviewer's signature",
            markup=False,
        )
