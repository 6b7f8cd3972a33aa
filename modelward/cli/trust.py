"""Signed decisions on the command line (docs/tuf.md).

``alias pending`` lists the TUF proposals waiting for signatures. ``sign_proposal`` is how
``alias set --key``, ``approve --key`` and ``quarantine --key`` sign one: the payload is
fetched, what it changes is read from the bytes to be signed (never from the registry's
summary) and shown, a payload that changes anything but the expected target is refused, and
the signature is made here: the private key never leaves this machine.

``trust status|root|pending|sign|resign|init|rotate|sync`` manage the registry's TUF repository;
``trust pin`` (loader/) pins its root in a worker's cache.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from modelward.cli.common import err_console, fail
from modelward.cli.registry_keys import show_signatures_lost
from modelward.cli.remote import (
    PassphraseEnvOpt,
    emit,
    print_json,
    registry_client,
    repo_or_alias,
    repo_or_alias_argument,
    reported,
)
from modelward.cli.worker import trust_pin

if TYPE_CHECKING:
    from modelward.attest.rollout import RolloutPlan
    from modelward.attest.signed_change import ProposedVersion
    from modelward.client.api import RegistryClient
    from modelward.loader.signer_view import VerifiedRole
    from modelward.loader.tuf_resolve import GivenRoot

__all__ = [
    "alias_pending",
    "describe",
    "find_pending",
    "load_key",
    "sign_proposal",
    "signed_line",
    "trust_app",
]

trust_app = typer.Typer(
    name="trust", help="The registry's TUF keys and metadata (docs/tuf.md).", no_args_is_help=True
)
# the worker's side: pinning the root in its cache (docs/guides/serving-workers.md)
trust_app.command("pin")(trust_pin)

AsJson = Annotated[bool, typer.Option("--json", help="One JSON document on stdout")]
KeyOpt = Annotated[Path, typer.Option("--key", metavar="FILE", help="Your private key (PEM)")]
PassEnv = PassphraseEnvOpt
AcceptSignerChanges = Annotated[
    bool,
    typer.Option(
        "--accept-signer-changes",
        help="Sign a change to who may sign (a key added, removed or replaced, a lower "
        "threshold, wider paths, a role added or removed), each shown first",
    ),
]


def load_key(path: Path, passphrase_env: str | None) -> Any:
    from modelward.attest.errors import KeyError_
    from modelward.attest.keys import load_private_key
    from modelward.cli.keys import passphrase_from_env

    try:
        return load_private_key(path, passphrase_from_env(passphrase_env))
    except KeyError_ as exc:
        fail(str(exc), code=2)


def describe(proposal: dict[str, Any]) -> str:
    """One line for a proposal: what, from -> to, role version, signatures so far."""
    what = (
        f"{proposal.get('repository')}@{proposal.get('alias')}"
        if proposal.get("alias")
        else str(proposal.get("target"))
    )
    change = f"{proposal.get('from_digest') or '(unset)'} -> {proposal.get('to_digest')}"
    if proposal.get("role") == "targets":
        change = "new delegations"
    elif proposal.get("kind") == "quarantine":
        change = (
            f"quarantine {proposal.get('to_digest')}"
            if proposal.get("to_digest")
            else f"lift the quarantine of {proposal.get('from_digest')}"
        )
    elif proposal.get("kind") == "rollout plan":
        change = f"rollout plan from {proposal.get('from_digest') or '(unset)'} to candidate " + (
            f"{proposal.get('to_digest')}"
        )
    elif proposal.get("target") == "resign":
        change = "its targets as they are, re-signed with the signers' new keys"
    elif proposal.get("adopts") is not None:
        adopted = proposal.get("adopts") or []
        change = (
            f"{len(adopted)} alias(es) the registry recorded unsigned: "
            + ", ".join(f"{a.get('alias')} -> {a.get('digest')}" for a in adopted)
            if adopted
            else "no alias"
        )
    signed = len(proposal.get("signatures") or [])
    return (
        f"#{proposal.get('id')} {what}: {change} ({proposal.get('role')} "
        f"v{proposal.get('version')}, {proposal.get('state')}, signatures "
        f"{signed}/{proposal.get('threshold')}, proposed by {proposal.get('proposed_by')}, "
        f"expires {proposal.get('expires')})"
    )


def _signer_root() -> GivenRoot | None:
    """The root a signer gives on this machine: ``MODELWARD_TRUST_ROOT`` (a root.json),
    checked against the cache's pin like a worker's ``--trust-root``; None: the pin."""
    from modelward.loader.tuf_resolve import load_root

    path = os.environ.get("MODELWARD_TRUST_ROOT")
    return load_root(Path(path), "MODELWARD_TRUST_ROOT") if path else None


def _verified_here(client: RegistryClient, role: str) -> VerifiedRole:
    """``role`` as this machine verifies it now, from the signer's pinned root."""
    from modelward.loader.cache import default_cache_dir
    from modelward.loader.signer_view import verified_role

    return verified_role(client, default_cache_dir(os.environ), _signer_root(), role)


def verified_change(
    client: RegistryClient, proposal: dict[str, Any]
) -> tuple[ProposedVersion, VerifiedRole]:
    """What signing ``proposal`` changes, computed on this machine from its bytes and the
    version of its role verified from the signer's pinned root (docs/tuf.md#what-a-signer-
    checks); exit 1 naming the check a proposal fails."""
    from modelward.attest.signed_change import ProposalRefused, proposed_change

    role = str(proposal["role"])
    view = _verified_here(client, role)
    if view.note:
        err_console.print(f"note: {view.note}", markup=False)
    try:
        change = proposed_change(
            base64.b64decode(proposal["payload"]),
            view.data,
            role=role,
            delegation=view.delegation,
            now=datetime.now(UTC),
        )
    except ProposalRefused as exc:
        fail(f"proposal {proposal.get('id')} was not signed: {exc}")
    return change, view


def _plan_lines(path: str, plan: RolloutPlan) -> list[str]:
    analysis = json.dumps(plan.analysis, sort_keys=True) if plan.analysis else "none"
    return [
        f"rollout plan {path} (plan sha256:{plan.sha256}, rollout {plan.rollout_id}):",
        f"  stable     {plan.stable}",
        f"  candidate  {plan.candidate}",
        f"  steps      {', '.join(f'{w}%' for w in plan.steps)}",
        f"  window     {plan.window_seconds} s per step; at least {plan.min_samples} samples",
        f"  analysis   {analysis}",
        "  fleet      "
        + (
            f"{len(plan.fleet)} worker(s), cohorts drawn from them: "
            + ", ".join(k[:16] for k in plan.fleet[:12])
            + (f" and {len(plan.fleet) - 12} more" if len(plan.fleet) > 12 else "")
            if plan.fleet
            else "none listed: cohorts by hash bucket of each worker's key id"
        ),
    ]


_PLAN_FIELDS = ("repository", "alias", "stable", "candidate", "steps", "window_seconds",
                "min_samples", "analysis", "analysis_sha256", "rollout_id", "fleet")  # fmt: skip


def _plan_disagreements(plan: RolloutPlan, other: Mapping[str, Any], whose: str) -> list[str]:
    """Each field where ``other`` (the registry's description, or what the signer asked
    for) says something else than the plan read from the bytes to be signed."""
    signed = json.loads(plan.raw)
    return [
        f"{field}: the bytes to sign say {json.dumps(signed.get(field))}, {whose} "
        f"{json.dumps(other[field])}"
        for field in _PLAN_FIELDS
        if field in other and other[field] != signed.get(field)
    ]


def _check_description(
    client: RegistryClient, proposal: dict[str, Any], change: ProposedVersion
) -> None:
    """Refuse (exit 1, naming both) when the registry's description of the proposal says
    something else than its bytes: the digest it sets its target to, a rollout plan."""
    from modelward.client.errors import APIError

    disagree: list[str] = []
    target, to_digest = proposal.get("target"), proposal.get("to_digest")
    by_path = {c.path: c for c in change.targets}
    plan_target = isinstance(target, str) and "/rollouts/" in target
    if isinstance(target, str) and to_digest and not plan_target and target in by_path:
        after = by_path[target].after
        if after != to_digest:
            disagree.append(
                f"{target}: the bytes to sign set it to {after}, the registry says {to_digest}"
            )
    for path, plan in change.plans.items():
        repo, _, alias = path.partition("/rollouts/")
        try:
            state = client.rollout_status(repo, alias)
        except APIError as exc:
            disagree.append(f"{path}: the registry describes no rollout of it ({exc})")
            continue
        if path == target and state.get("proposal") != proposal.get("id"):
            disagree.append(f"it is not the plan of {repo}@{alias}'s latest rollout")
        elif isinstance(state.get("plan"), dict):
            disagree += _plan_disagreements(plan, state["plan"], "the registry shows")
            if state.get("plan_sha256") != plan.sha256:
                disagree.append(
                    f"plan sha256: the bytes to sign hash to {plan.sha256}, the registry "
                    f"shows {state.get('plan_sha256')}"
                )
        if plan_target and to_digest and to_digest != plan.candidate:
            disagree.append(
                f"candidate: the bytes to sign say {plan.candidate}, the proposal says {to_digest}"
            )
    if disagree:
        fail(
            f"proposal {proposal.get('id')} was not signed: the registry's description "
            "disagrees with the bytes to be signed: " + "; ".join(disagree)
        )


def sign_proposal(
    client: RegistryClient,
    proposal_id: int,
    key: Any,
    *,
    expect_target: str | None,
    expect_digest: str | None,
    expect_plan: Mapping[str, Any] | None = None,
    several: bool = True,
    accept_signer_changes: bool = False,
) -> dict[str, Any]:
    """Sign proposal ``proposal_id`` with ``key`` here and send the signature.

    What it changes is computed on this machine (``verified_change``) and printed; the
    registry's description of it must agree (``_check_description``). Refuses (exit 1) a
    payload that changes any target other than ``expect_target``, or sets it to anything
    but ``expect_digest`` (None: any digest), or carries a plan other than ``expect_plan``
    (the fields the signer asked for). A change to who may sign that lets other keys, or
    fewer, sign (``attest.signed_change.WEAKENING``) needs ``accept_signer_changes``; a
    proposal of several changes needs ``several`` (exit 2 otherwise, once shown). A payload
    that changes nothing is not signed and is a success: the answer is the proposal with
    ``unchanged`` true. ``expect_target`` None: every change is shown and signed as it is
    (``trust sign --yes``: top-level targets, adoptions)."""
    from modelward.attest.keys import keyid
    from modelward.attest.signed_change import describe_signer_change
    from modelward.attest.tuf import sign_proposal_payload

    proposal = client.tuf_proposal(proposal_id)
    change, view = verified_change(client, proposal)
    role, version = change.role, change.version
    since = f"v{change.previous_version}" if change.previous_version else "no earlier version"
    err_console.print(
        f"signing {role} v{version}, checked here against {since} verified from root "
        f"v{view.root_version} (expires {change.expires.isoformat()}):",
        markup=False,
    )
    lines = [describe_signer_change(c) for c in change.signers]
    lines += [
        f"{c.path}: {c.before or '(unset)'} -> {c.after or '(removed)'}" for c in change.targets
    ]
    lines += [f"{path}: reason {reason!r}" for path, reason in change.reasons.items()]
    for path, plan in change.plans.items():
        lines += _plan_lines(path, plan)
    for line in lines or ["no changes"]:
        err_console.print(f"  {line}", markup=False)
    _check_description(client, proposal, change)
    several_things = role == "targets" or proposal.get("adopts") is not None
    if several_things and not several:
        fail(
            f"proposal {proposal_id} ({proposal.get('target')}) changes several things; "
            "read them (above, or `modelward trust pending`) and sign with --yes",
            code=2,
        )
    weakening = change.needs_confirmation
    if weakening and not accept_signer_changes:
        fail(
            f"proposal {proposal_id} was not signed: it changes who may sign ("
            + "; ".join(describe_signer_change(c) for c in weakening)
            + ")",
            hint="read each change (above); sign with --accept-signer-changes if you mean it",
        )
    if several_things:
        pass  # every change shown is signed as it is (checked above)
    elif proposal.get("target") == "resign":
        # a re-signing changes nothing, read from the bytes to be signed: one that changes
        # anything is not a re-signing and is refused
        if change.targets:
            fail(
                f"proposal {proposal_id} is a re-signing of {role} but changes "
                + ", ".join(f"{c.path} ({c.before} -> {c.after})" for c in change.targets)
                + "; nothing was signed",
            )
        err_console.print(
            f"  its targets as they are, with key {keyid(key.public_key())} (re-signing)",
            markup=False,
        )
    elif not change.targets:
        # nothing to do is a success (a retried job): the role already signs all of it
        what = f"{expect_target} already names {expect_digest}" if expect_target else ""
        err_console.print(
            f"proposal {proposal_id} changes nothing"
            + (f": {what}" if what else "")
            + "; nothing to sign",
            markup=False,
        )
        unchanged = {k: v for k, v in proposal.items() if k != "payload"}
        unchanged["unchanged"] = True
        return unchanged
    else:
        unexpected = [
            c
            for c in change.targets
            if c.path != expect_target or (expect_digest is not None and c.after != expect_digest)
        ]
        if expect_target is not None and unexpected:
            fail(
                f"proposal {proposal_id} does not only set {expect_target} to "
                f"{expect_digest or 'a new plan'}: it changes "
                + ", ".join(f"{c.path} ({c.before} -> {c.after})" for c in change.targets)
                + "; nothing was signed",
            )
        if expect_plan is not None:
            asked = change.plans.get(str(expect_target))
            differ = (
                _plan_disagreements(asked, expect_plan, "you asked for")
                if asked is not None
                else ["the proposal carries no plan"]
            )
            if differ:
                fail(f"proposal {proposal_id} was not signed: " + "; ".join(differ))
    signature = sign_proposal_payload(base64.b64decode(proposal["payload"]), key)
    answer: dict[str, Any] = client.tuf_sign(proposal_id, signature.keyid, signature.signature)
    return answer


def signed_line(answer: dict[str, Any]) -> str:
    if answer.get("unchanged"):
        return f"unchanged: {describe(answer)}; it changes nothing, nothing was signed"
    if answer.get("state") == "published":
        return f"published: {describe(answer)}"
    return f"signed: {describe(answer)}"


def find_pending(
    client: RegistryClient,
    *,
    repo: str | None,
    alias: str | None,
    target: str,
    digest: str | None,
) -> dict[str, Any] | None:
    """The newest pending proposal setting ``target`` to ``digest``, if any."""
    for proposal in client.tuf_proposals(repo=repo, alias=alias):
        if proposal.get("target") == target and proposal.get("to_digest") == digest:
            return proposal
    return None


def alias_pending(
    ref: Annotated[
        str | None,
        typer.Argument(
            metavar="REPO[@ALIAS]",
            help="Only this repository (ORG/NAME), or this alias (REPO@ALIAS or REPO:TAG)",
            callback=repo_or_alias_argument,
        ),
    ] = None,
    all_states: Annotated[
        bool, typer.Option("--all", help="Published, stale and superseded proposals too")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """List alias moves waiting for signatures (TUF proposals), newest first."""
    repo, alias = repo_or_alias(ref)  # the one grammar; the callback refused a bad one
    with reported(), registry_client() as client:
        items = client.tuf_proposals(pending=not all_states, repo=repo, alias=alias)
    emit(items, as_json, lambda ps: "\n".join(describe(p) for p in ps) or "no proposals")


# -- trust ---------------------------------------------------------------------------------
def _status_lines(status: dict[str, Any]) -> str:
    out = []
    if status.get("embedded"):
        out.append(
            "warning: the root key is ONLINE (the embedded default); run "
            "`modelward trust init` with offline keys (docs/tuf.md#keys)"
        )
    for role in status.get("roles") or []:
        if role.get("refused"):  # a stored row the registry passes over and signs over
            out.append(
                f"{role.get('role'):<40} v{role.get('version'):<6} REFUSED: {role['refused']}"
            )
            continue
        flag = (
            " EXPIRED"
            if role.get("expired")
            else " expires soon"
            if role.get("expires_soon")
            else ""
        )
        out.append(
            f"{role.get('role'):<40} v{role.get('version'):<6} expires {role.get('expires')}{flag}"
        )
    for short in status.get("short_of_threshold") or []:
        decides = ", ".join(short.get("decides") or []) or "nothing signed yet"
        out.append(
            f"SHORT: {short.get('role')} v{short.get('version')} has {short.get('valid_signers')} "
            f"of the {short.get('threshold')} valid signer(s) it needs: workers refuse what it "
            f"signs ({decides})"
        )
    out.append(f"online keys: {', '.join(status.get('online_keys') or []) or 'none'}")
    if "targets_key" in status:
        out.append(
            f"targets key: {status['targets_key']}; protects against a database writer: "
            f"{'yes' if status.get('protects_against_db_writer') else 'NO'}"
        )
        out.append(f"  {status.get('db_writer')}")
    out.append(f"pending proposals: {status.get('pending_proposals')}")
    refresh = status.get("refresh") or {}
    if refresh.get("failing"):
        out.append(
            f"warning: re-signing snapshot and timestamp is FAILING ({refresh.get('failures')} "
            f"failures; last at {refresh.get('last_failure')}): {refresh.get('last_error')}"
        )
    return "\n".join(out)


@trust_app.command("status")
def trust_status(as_json: AsJson = False) -> None:
    """Every TUF role's version and expiry, which expire soon, the keys held online, and
    whether the delegations protect against a database writer (targets key offline)."""
    with reported(), registry_client() as client:
        status = client.tuf_status()
    emit(status, as_json, _status_lines)


def _root_version(client: RegistryClient) -> int:
    versions = [
        int(r["version"])
        for r in client.tuf_status().get("roles") or []
        if r.get("role") == "root" and not r.get("refused")  # a refused row is not served
    ]
    if not versions:
        fail("the registry has no TUF root yet")
    return versions[0]


@trust_app.command("root")
def trust_root(
    out: Annotated[Path, typer.Option("--out", metavar="FILE", help="Where to write root.json")],
    version: Annotated[
        int | None, typer.Option(metavar="N", help="This root version (default: the latest)")
    ] = None,
) -> None:
    """Save the registry's TUF root, for workers to pin (--trust-root); check its keys
    out of band before trusting it."""
    from modelward.attest._fileio import write_output
    from modelward.attest.tuf import root_summary

    with reported(), registry_client() as client:
        data = client.tuf_file(f"{version or _root_version(client)}.root.json")
    summary = root_summary(data)
    write_output(out, data)
    keys = ", ".join(summary["root_keys"])
    err_console.print(
        f"saved root v{summary['version']} to {out}; its root keys {keys} "
        f"(threshold {summary['root_threshold']}): compare them with the ones "
        "your admins hold before pinning",
        markup=False,
    )


@trust_app.command("pending")
def trust_pending(as_json: AsJson = False) -> None:
    """Every pending TUF proposal: alias moves, quarantines, top-level targets."""
    with reported(), registry_client() as client:
        items = client.tuf_proposals()
    emit(items, as_json, lambda ps: "\n".join(describe(p) for p in ps) or "no proposals")


@trust_app.command("sign")
def trust_sign(
    proposal_id: Annotated[int, typer.Argument(metavar="ID", help="The proposal's id")],
    *,
    key: KeyOpt,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            help="Sign a proposal of several changes (targets, adopt) as shown, also one "
            "that would leave signed aliases without valid signatures (previewed)",
        ),
    ] = False,
    accept_signer_changes: AcceptSignerChanges = False,
    passphrase_env: PassEnv = None,
    as_json: AsJson = False,
) -> None:
    """Sign one pending proposal with your key (admins: top-level targets). What it changes
    is computed here, from its bytes and the metadata verified from your pinned root (`trust
    pin`, or MODELWARD_TRUST_ROOT), and shown; the registry's description must agree. A
    change to who may sign needs --accept-signer-changes; a targets proposal that would
    leave signed aliases without valid signatures is previewed and needs --yes; one that
    changes nothing is not signed (exit 0)."""
    private = load_key(key, passphrase_env)
    with reported(), registry_client() as client:
        proposal = client.tuf_proposal(proposal_id)
        target = str(proposal.get("target"))
        single = proposal.get("to_digest") is not None or target == "resign"
        if proposal["role"] == "targets":
            _refuse_unsigning(client, proposal_id, yes=yes, as_json=as_json)
        plan = "/rollouts/" in target
        answer = sign_proposal(
            client,
            proposal_id,
            private,
            expect_target=target if single and proposal.get("to_digest") is not None else None,
            expect_digest=None if plan else proposal.get("to_digest"),
            several=single or yes,
            accept_signer_changes=accept_signer_changes,
        )
    emit(answer, as_json, signed_line)


def _refuse_unsigning(
    client: RegistryClient, proposal_id: int, *, yes: bool, as_json: bool
) -> None:
    """Show which aliases publishing top-level targets proposal ``proposal_id`` would leave
    without valid signatures (the registry computes it: ``POST /v1/tuf/impact``); without
    ``--yes``, refuse (exit 1, audited by the registry) when there are any."""
    preview = client.tuf_impact(proposal=proposal_id, refuse_if_lost=not yes)
    short = show_signatures_lost(preview, going_ahead=yes)
    if short and not yes:
        if as_json:
            lost = preview.get("lost") or []
            print_json({"id": proposal_id, "signed": False, "signatures_lost": lost})
        fail(
            f"proposal {proposal_id} was not signed: publishing it would leave {short} "
            "signed target(s) without valid signatures (above)",
            hint="have their signers re-sign them first (`modelward trust resign ORG/NAME "
            "--key NEW.key`, docs/tuf.md#rotating-a-signers-key), or sign anyway with --yes",
        )


@trust_app.command("adopt")
def trust_adopt(as_json: AsJson = False) -> None:
    """Propose every alias the registry recorded unsigned, one proposal per TUF role, for
    its signers to sign (admins; the migration step)."""
    with reported(), registry_client() as client:
        made = client.tuf_adopt()
    emit(
        made,
        as_json,
        lambda ps: (
            "\n".join(describe(p) for p in ps) or "every alias is signed or already proposed"
        ),
    )


@trust_app.command("resign")
def trust_resign(
    ref: Annotated[
        str,
        typer.Argument(
            metavar="REPO[@ALIAS]",
            help="The repository (ORG/NAME) whose roles to re-sign, or one alias's role",
            callback=repo_or_alias_argument,
        ),
    ],
    *,
    key: KeyOpt,
    passphrase_env: PassEnv = None,
    as_json: AsJson = False,
) -> None:
    """Re-sign what a repository's TUF roles sign now with your newest registered key (a
    key rotation: `key register NEW.pub`, then this with --key NEW.key, then `key revoke
    OLD`): each role keeps naming your old key until its signers have re-signed it, so its
    aliases stay resolvable throughout (docs/tuf.md#rotating-a-signers-key)."""
    from modelward.attest.keys import keyid

    private = load_key(key, passphrase_env)
    mine = keyid(private.public_key())
    repo, alias = repo_or_alias(ref)
    with reported(), registry_client() as client:
        answer = client.tuf_resign(str(repo), alias)
        signed, skipped = [], []
        for proposal in answer.get("proposals") or []:
            if mine not in (proposal.get("keyids") or []):
                skipped.append(proposal)
                continue
            signed.append(
                sign_proposal(
                    client, int(proposal["id"]), private, expect_target=None, expect_digest=None
                )
            )
    result = {"signed": signed, "not_yours": skipped, "current": answer.get("current") or []}
    emit(result, as_json, _resign_lines)


def _resign_lines(result: dict[str, Any]) -> str:
    out = [signed_line(a) for a in result["signed"]]
    out += [
        f"not yours to sign (key not delegated {p.get('role')}): {describe(p)}"
        for p in result["not_yours"]
    ]
    if not out:
        out.append(
            "nothing to re-sign: every role names its signers' newest keys "
            f"({', '.join(result['current']) or 'no role'})"
        )
    return "\n".join(out)


def export_files(client: RegistryClient, directory: Path) -> int:
    """Copy the registry's current TUF metadata into ``directory`` as a static server
    serves it: every root version, the versions the current snapshot names, the snapshot,
    and ``timestamp.json`` last (a reader never sees a timestamp naming a missing file).
    Files already there are kept (versions never change); returns how many were written.
    The bytes are copied, not trusted: workers verify them from their pinned root."""
    from tuf.api.metadata import Metadata, Snapshot, Timestamp

    from modelward.attest._fileio import write_output

    directory.mkdir(parents=True, exist_ok=True)
    written = 0

    def copy(name: str, data: bytes | None = None) -> bytes:
        nonlocal written
        path = directory / name
        if data is None and path.exists() and name != "timestamp.json":
            return path.read_bytes()
        data = client.tuf_file(name) if data is None else data
        write_output(path, data)
        written += 1
        return data

    timestamp_bytes = client.tuf_file("timestamp.json")
    timestamp = Metadata[Timestamp].from_bytes(timestamp_bytes).signed
    snapshot_name = f"{timestamp.snapshot_meta.version}.snapshot.json"
    snapshot = Metadata[Snapshot].from_bytes(copy(snapshot_name)).signed
    for name, meta in sorted(snapshot.meta.items()):
        copy(f"{meta.version}.{name}")
    for version in range(1, _root_version(client) + 1):
        copy(f"{version}.root.json")
    copy("timestamp.json", timestamp_bytes)
    return written


@trust_app.command("export")
def trust_export(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where to write the files")],
    as_json: AsJson = False,
) -> None:
    """Copy the current TUF metadata into DIR, for a static server, S3 bucket or CDN to
    serve with the registry out of the path (run it again after every change)."""
    with reported(), registry_client() as client:
        written = export_files(client, directory)
    emit(
        {"directory": str(directory), "written": written},
        as_json,
        lambda a: f"wrote {a['written']} file(s) to {a['directory']}",
    )


@trust_app.command("sync")
def trust_sync(as_json: AsJson = False) -> None:
    """Re-make the delegations from the registry's database now and re-sign what is due
    (admins); exit 1, naming each, when a step could not be done."""
    with reported(), registry_client() as client:
        answer = client.tuf_sync()
    emit(
        answer,
        as_json,
        lambda a: (
            ("changed: " if a.get("changed") else "unchanged: ")
            + f"{a.get('pending_proposals')} pending proposals"
        ),
    )
    for failure in answer.get("failed") or []:
        row = (
            f" (stored row {failure['role']} v{failure['version']})"
            if failure.get("role") is not None
            else ""
        )
        err_console.print(
            f"error: not refreshed: {failure.get('step')}{row}: {failure.get('code')}: "
            f"{failure.get('message')}",
            markup=False,
        )
    if answer.get("failed"):
        raise typer.Exit(1)


def _next_root(
    client: RegistryClient,
    *,
    root_keys: list[Any],
    root_threshold: int,
    old_root_keys: list[Any],
    targets_keys: list[Any],
    targets_threshold: int,
    days: int,
    online: bool = False,
) -> tuple[bytes, int]:
    from securesystemslib.signer import SSlibKey
    from tuf.api.metadata import Metadata, Root

    from modelward.attest.tuf import tuf_key, tuf_signer

    # the next root is made from the root this machine verified (from the signer's pinned
    # root, through signed rotations), never from bytes the registry hands over
    md = Metadata[Root].from_bytes(_verified_here(client, "targets").root)
    root = md.signed
    version = root.version
    for role, keys, threshold in (
        ("root", root_keys, root_threshold),
        ("targets", targets_keys, targets_threshold),
    ):
        if not keys:
            continue
        if not 1 <= threshold <= len(keys):
            fail(
                f"--{role}-threshold {threshold} needs between 1 and {len(keys)} "
                f"--{role}-key files",
                code=2,
            )
        for keyid in list(root.roles[role].keyids):
            root.revoke_key(keyid, role)
        for key in keys:
            root.add_key(tuf_key(key.public_key()), role)
        root.roles[role].threshold = threshold
    if online:  # new snapshot and timestamp keys, made and kept by the registry
        for role, new in client.tuf_next_online_keys().items():
            for keyid in list(root.roles[role].keyids):
                root.revoke_key(keyid, role)
            root.add_key(SSlibKey.from_dict(new["keyid"], dict(new["key"])), role)
    root.version = version + 1
    root.expires = datetime.now(UTC).replace(microsecond=0) + timedelta(days=days)
    md.signatures.clear()
    for key in [*old_root_keys, *root_keys]:
        md.sign(tuf_signer(key), append=True)
    return md.to_bytes(), version + 1


def _sign_new_targets(
    client: RegistryClient, targets_keys: list[Any], *, accept_signer_changes: bool
) -> None:
    pending = [p for p in client.tuf_proposals() if p.get("role") == "targets"]
    if not pending or not targets_keys:
        return
    for key in targets_keys:
        answer = sign_proposal(
            client,
            int(pending[0]["id"]),
            key,
            expect_target=None,
            expect_digest=None,
            accept_signer_changes=accept_signer_changes,
        )
        if answer.get("state") == "published":
            err_console.print(f"published targets v{answer.get('version')}", markup=False)
            return


RootThreshold = Annotated[int, typer.Option(metavar="N", help="Root signatures needed")]
TargetsThreshold = Annotated[int, typer.Option(metavar="N", help="Targets signatures needed")]
Days = Annotated[int, typer.Option(metavar="DAYS", help="Root lifetime")]
RootKeys = Annotated[
    list[Path],
    typer.Option(
        "--root-key", metavar="FILE", help="A new root private key (repeat for each admin)"
    ),
]
OldRootKeys = Annotated[
    list[Path] | None,
    typer.Option(
        "--old-root-key",
        metavar="FILE",
        help="A current root private key (repeat to meet its threshold)",
    ),
]
TargetsKeys = Annotated[
    list[Path] | None,
    typer.Option("--targets-key", metavar="FILE", help="A new targets private key (repeat)"),
]


def _rotate(
    root_key: list[Path],
    root_threshold: int,
    old_root_key: list[Path] | None,
    *,
    targets_key: list[Path] | None,
    targets_threshold: int,
    days: int,
    passphrase_env: str | None,
    as_json: bool,
    online: bool = False,
    init: bool = False,
    accept_signer_changes: bool = False,
) -> None:
    roots = [load_key(p, passphrase_env) for p in root_key]
    olds = [load_key(p, passphrase_env) for p in old_root_key or []]
    targets = [load_key(p, passphrase_env) for p in targets_key or []]
    with reported(), registry_client() as client:
        if init and "root" not in (client.tuf_status().get("online_keys") or []):
            fail(
                "the registry's root key is already offline: `trust init` ran before",
                hint="make the next root version with `modelward trust rotate --old-root-key "
                "CURRENT.key --root-key NEW.key` (docs/guides/tuf-ceremony.md)",
            )
        data, version = _next_root(
            client,
            root_keys=roots,
            root_threshold=root_threshold,
            old_root_keys=olds,
            targets_keys=targets,
            targets_threshold=targets_threshold,
            days=days,
            online=online,
        )
        answer = client.tuf_install_root(data)
        err_console.print(f"installed root v{version}", markup=False)
        # the next targets, signed here with the new targets keys: what it changes is shown,
        # and a change of who may sign needs --accept-signer-changes (else it stays pending)
        _sign_new_targets(client, targets, accept_signer_changes=accept_signer_changes)
    emit(
        {**answer, "version": version},
        as_json,
        lambda a: (
            f"installed root v{a['version']}; online keys: {', '.join(a.get('online_keys') or [])}"
        ),
    )


@trust_app.command("init")
def trust_init(
    *,
    root_key: RootKeys,
    root_threshold: RootThreshold = 1,
    targets_key: TargetsKeys = None,
    targets_threshold: TargetsThreshold = 1,
    days: Days = 365,
    accept_signer_changes: AcceptSignerChanges = False,
    passphrase_env: PassEnv = None,
    as_json: AsJson = False,
) -> None:
    """Replace the embedded online root (and targets) keys with your offline keys (admins).
    The next targets is signed here with the new targets keys, its changes shown as `trust
    sign` shows them."""
    _rotate(
        root_key,
        root_threshold,
        None,
        targets_key=targets_key,
        targets_threshold=targets_threshold,
        days=days,
        passphrase_env=passphrase_env,
        as_json=as_json,
        init=True,
        accept_signer_changes=accept_signer_changes,
    )


@trust_app.command("rotate")
def trust_rotate(
    *,
    root_key: RootKeys,
    old_root_key: OldRootKeys = None,
    root_threshold: RootThreshold = 1,
    targets_key: TargetsKeys = None,
    targets_threshold: TargetsThreshold = 1,
    days: Days = 365,
    online: Annotated[
        bool,
        typer.Option("--online", help="Also replace the registry's snapshot and timestamp keys"),
    ] = False,
    accept_signer_changes: AcceptSignerChanges = False,
    passphrase_env: PassEnv = None,
    as_json: AsJson = False,
) -> None:
    """Make the next root version, signed by the current root keys and the new ones; workers
    follow the chain of root versions."""
    _rotate(
        root_key,
        root_threshold,
        old_root_key,
        targets_key=targets_key,
        targets_threshold=targets_threshold,
        days=days,
        passphrase_env=passphrase_env,
        as_json=as_json,
        online=online,
        accept_signer_changes=accept_signer_changes,
    )
