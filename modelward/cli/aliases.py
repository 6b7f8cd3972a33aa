"""``modelward alias get|set|history|rollback``: read and move aliases (REPO@ALIAS).

A protected alias short of approvals becomes a proposal its reviewers sign (docs/tuf.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from modelward.cli.common import err_console
from modelward.cli.remote import (
    AliasRef,
    AsJson,
    PassphraseEnvOpt,
    emit,
    registry_client,
    reported,
    valid_digest,
)
from modelward.client.config import parse_reference

if TYPE_CHECKING:  # httpx loads with the client, inside the commands that send requests
    from modelward.client.api import RegistryClient

__all__ = [
    "alias_app",
    "alias_get",
    "alias_history",
    "alias_line",
    "alias_rollback",
    "alias_set",
    "sign_move",
    "unchanged_line",
    "warn_unsigned",
]

alias_app = typer.Typer(
    name="alias", help="Read and move aliases (REPO@ALIAS).", no_args_is_help=True
)


def alias_line(repo: str) -> Callable[[Any], str]:
    def line(state: Any) -> str:
        pending = state.get("pending")
        if pending:
            from modelward.cli.trust import describe

            return (
                f"proposed {describe(pending)}\nreviewers sign it with: modelward approve "
                f"{repo}@{pending.get('to_digest')} --alias {state.get('alias')} --key KEY"
            )
        if not state.get("digest"):
            return f"{repo}@{state.get('alias')} is not set (v{state.get('version', 0)})"
        if state.get("unchanged"):
            return unchanged_line(repo, state)
        unsigned = (
            ""
            if state.get("signed", True)
            else (
                "  UNSIGNED: the registry's word only; workers resolving through TUF do not see it "
                "(`modelward alias pending`)"
            )
        )
        return (
            f"{repo}@{state.get('alias')} -> {state.get('digest')} "
            f"(v{state.get('version')}){unsigned}"
        )

    return line


def unchanged_line(repo: str, state: Any) -> str:
    """A move that changed nothing (a retried push, ``alias set`` to the current target)."""
    ref = f"{repo}@{state.get('alias')}"
    if state.get("signed_now"):
        return f"{ref} already points to {state.get('digest')}; its move is signed now"
    if state.get("signed", True):
        return f"{ref} already points to {state.get('digest')}; nothing to sign"
    return (
        f"{ref} already points to {state.get('digest')} (v{state.get('version')}); nothing "
        "moved, but it is UNSIGNED: workers resolving through TUF do not see it"
    )


@alias_app.command("get")
def alias_get(ref: AliasRef, as_json: AsJson = False) -> None:
    """Show the digest and version an alias points at."""
    r = parse_reference(ref, require="alias")
    with reported(), registry_client() as client:
        state = client.get_alias(r.repo, str(r.alias))
    emit(state, as_json, alias_line(r.repo))


@alias_app.command("set")
def alias_set(
    ref: AliasRef,
    digest: Annotated[
        str, typer.Argument(metavar="DIGEST", help="sha256:<hex>", callback=valid_digest)
    ],
    *,
    reason: Annotated[
        str | None, typer.Option(metavar="TEXT", help="Recorded in the history")
    ] = None,
    expected_version: Annotated[
        int | None,
        typer.Option(metavar="N", help="Compare-and-swap on this version (default: read it now)"),
    ] = None,
    key: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Sign the move with your key (publishers' aliases)"),
    ] = None,
    passphrase_env: PassphraseEnvOpt = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Evaluate every check of the move and report each; move and propose nothing "
            "(exit 1 when the move would be refused)",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Move an alias to a digest (compare-and-swap on its version); a protected alias short
    of approvals becomes a proposal its reviewers sign."""
    from modelward.cli.trust import load_key

    r = parse_reference(ref, require="alias")
    if dry_run:
        if key is not None or expected_version is not None:
            raise typer.BadParameter(
                "a dry run moves nothing: it takes neither --key nor --expected-version",
                param_hint="--dry-run",
            )
        with reported(as_json), registry_client() as client:
            report = client.dry_run_alias(r.repo, str(r.alias), digest)
        emit(report, as_json, _dry_run_lines)
        if not report.get("allowed"):
            raise typer.Exit(1)
        return
    private = load_key(key, passphrase_env) if key is not None else None
    with reported(as_json), registry_client() as client:
        state = client.set_alias(
            r.repo,
            str(r.alias),
            digest,
            expected_version=expected_version,
            reason=reason,
            propose=True,
        )
        sign_move(client, state, r.repo, str(r.alias), private)
    emit(state, as_json, alias_line(r.repo))


def _dry_run_lines(report: Any) -> str:
    """A dry run's checks, one line each, and its verdict."""
    lines = [
        f"{'ok  ' if c.get('passed') else 'skip' if c.get('skipped') else 'FAIL'} "
        f"({c.get('step')}) {c.get('check')}: "
        f"{c.get('message')}"
        for c in report.get("checks", [])
    ]
    ref = f"{report.get('repository')}@{report.get('alias')}"
    verdict = "would move" if report.get("allowed") else "would be refused"
    lines.append(f"dry run: {ref} -> {report.get('digest')} {verdict}; nothing moved")
    return "\n".join(lines)


def sign_move(
    client: RegistryClient, state: dict[str, Any], repo: str, alias: str, private: Any
) -> None:
    """With ``--key``: sign the proposal a move made (an alias the publishers' keys sign)."""
    from modelward.cli.trust import sign_proposal

    proposal = state.get("proposal")
    if private is None or proposal is None or state.get("signed"):
        return
    signed = sign_proposal(
        client,
        int(proposal),
        private,
        expect_target=f"{repo}/aliases/{alias}",
        expect_digest=state.get("digest"),
    )
    state["signed"] = signed.get("state") == "published" or bool(signed.get("unchanged"))
    if state.get("unchanged") and signed.get("state") == "published":
        state["signed_now"] = True  # the alias did not move; its pending move is signed now


def _history_lines(repo: str, alias: str) -> Callable[[Any], str]:
    def lines(moves: Any) -> str:
        out = []
        for m in moves:
            kind = "rollback" if m.get("rollback") else "move"
            why = f"  ({m['reason']})" if m.get("reason") else ""
            out.append(
                f"v{m.get('version')}  {m.get('at')}  {m.get('actor')}  {kind}  "
                f"{m.get('from_digest') or '(unset)'} -> {m.get('to_digest')}{why}"
            )
            out.append(f"    {_signed_by(m.get('signed'))}")
        return "\n".join(out) or f"{repo}@{alias} never moved"

    return lines


def _signed_by(signed: Any) -> str:
    """Who signed one move (``alias history``): the signers of the TUF role version that
    named its target, or that none did."""
    if not signed:
        return "unsigned: no signed TUF version names this move"
    who = ", ".join(
        f"{s.get('principal')} (key {str(s.get('keyid'))[:16]})"
        for s in signed.get("signers") or []
    )
    where = f"{signed.get('role')} v{signed.get('version')}"
    return f"signed by {who or 'no key that verifies'} in {where}"


@alias_app.command("history")
def alias_history(ref: AliasRef, as_json: AsJson = False) -> None:
    """Every move of an alias: version, from -> to, who, when, why, rollback, and who
    signed it (the signers of the TUF role version that named it)."""
    r = parse_reference(ref, require="alias")
    with reported(), registry_client() as client:
        moves = client.alias_history(r.repo, str(r.alias))
    emit(moves, as_json, _history_lines(r.repo, str(r.alias)))


@alias_app.command("rollback")
def alias_rollback(
    ref: AliasRef,
    digest: Annotated[
        str | None,
        typer.Argument(
            metavar="DIGEST", help="Earlier digest (default: previous)", callback=valid_digest
        ),
    ] = None,
    *,
    reason: Annotated[
        str | None, typer.Option(metavar="TEXT", help="Recorded in the history")
    ] = None,
    key: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Sign the move with your key (publishers' aliases)"),
    ] = None,
    passphrase_env: PassphraseEnvOpt = None,
    as_json: AsJson = False,
) -> None:
    """Set an alias back to an earlier digest, recorded as a rollback and audited as an
    emergency. Back to a release the alias held under valid signatures (its signed history),
    and not quarantined, the promotion gates (baseline, replay, release gates) do not apply;
    the alias's signers still sign it (a protected alias: proposed, for them to sign)."""
    from modelward.cli.trust import load_key

    r = parse_reference(ref, require="alias")
    private = load_key(key, passphrase_env) if key is not None else None
    with reported(as_json), registry_client() as client:
        state = client.rollback(r.repo, str(r.alias), digest, reason=reason, propose=True)
        sign_move(client, state, r.repo, str(r.alias), private)
    emit(state, as_json, _rollback_lines(r.repo))


def _rollback_lines(repo: str) -> Callable[[Any], str]:
    """``alias rollback``'s answer: that the promotion gates were skipped, the alias's
    state, and who must sign a rollback still pending."""
    line = alias_line(repo)

    def lines(state: Any) -> str:
        ref = f"{repo}@{state.get('alias')}"
        target = (state.get("pending") or {}).get("to_digest") or state.get("digest")
        out = []
        if state.get("gates_skipped"):
            out.append(
                f"rollback: {ref} -> {target}, a release it held under valid signatures; the "
                "promotion gates (baseline, replay, release gates) do not apply to it"
            )
        out.append(line(state))
        pending = state.get("pending")
        if isinstance(pending, dict):
            signed = len(pending.get("signatures") or [])
            out.append(
                f"who must sign: the alias's signers, {pending.get('threshold')} signature(s) "
                f"of the keys of TUF role {pending.get('role')} ({signed} so far), as for "
                "any move of it"
            )
        return "\n".join(out)

    return lines


def _sign_with(repo: str, state: dict[str, Any]) -> str | None:
    """The command that signs a move the registry made but no TUF role signed (an alias left
    UNSIGNED: workers resolving through TUF do not see it); None when signed or not moved."""
    if state.get("pending") or state.get("signed", True) or not state.get("digest"):
        return None
    proposal = state.get("proposal")
    if proposal is not None:
        return f"modelward trust sign {proposal} --key KEY"
    return (
        "modelward trust adopt (an admin: no role is delegated the alias yet), then "
        "modelward trust sign ID --key KEY (IDs: modelward alias pending)"
    )


def warn_unsigned(repo: str, state: dict[str, Any]) -> str | None:
    """``warning: ...`` on stderr when a move left ``repo@alias`` UNSIGNED; returns the
    signing command (for ``--json``'s ``sign_with``), None when there is nothing to sign."""
    command = _sign_with(repo, state)
    if command is not None:
        err_console.print(
            f"warning: {repo}@{state.get('alias')} now names {state.get('digest')} on the "
            "registry's word only: UNSIGNED, so workers resolving through TUF do not see "
            f"it; sign the move with: {command}",
            markup=False,
        )
    return command
