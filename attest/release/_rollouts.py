"""The rollouts of a release: what a record holds of them and check (6) of ``verify_record``
(docs/release.md#rollouts).

The rollouts of signed move N (the alias's role moves it from P to D) are the rollout plans
that role signed after the move that made P its digest and before move N: each plan target
``ORG/NAME/rollouts/ALIAS`` first signed (its bytes new) by a role version from move N-1's to
the one before move N's, that is a canonical plan of this alias from ``stable`` P (a plan
from another digest was never in force: workers do not act on it). ``signed_plans`` finds
them, and ``signed_steps`` the steps ``ORG:NAME@=rollout`` signed for one of them: the one
pair of functions the builder (what to embed) and the verifier (what must be embedded) use.

Everything else a record says of a rollout (times, verdicts, actors, the rollback figures)
is the registry's word, under ``registry`` with ``signed: false``.

Pure: no network, no database, no environment.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tuf.api.exceptions import RepositoryError
from tuf.api.metadata import Metadata, TargetFile, Targets
from tuf.api.serialization import DeserializationError

from modelward.attest.release._model import ReleaseRecordInvalid, blob, embedded, get, sha256
from modelward.attest.release._verdicts import check_verdicts, signed_verdicts
from modelward.attest.rollout import (
    PlanInvalid,
    RolloutPlan,
    RolloutStep,
    SeenStep,
    StepRefused,
    parse_plan,
    parse_step,
    verify_next_step,
)
from modelward.attest.rollout.paths import rollout_path, rollout_role, signed_custom, step_path

__all__ = [
    "CHECK",
    "SignedPlan",
    "build_rollouts",
    "check_rollouts",
    "later_plans",
    "next_digest",
    "outcome",
    "signed_plans",
    "signed_steps",
]

CHECK: Final = 6
OUTCOMES: Final = ("promoted", "aborted", "superseded", "open")


@dataclass(frozen=True)
class SignedPlan:
    """A rollout plan of the release and the version of the alias's role that first signed
    it."""

    plan: RolloutPlan
    role_version: int


def _hash(target: TargetFile | None) -> str | None:
    return None if target is None else target.hashes.get("sha256")


def signed_plans(
    repository: str,
    alias: str,
    role_versions: Sequence[Metadata[Targets]],
    moves: Sequence[Mapping[str, Any]],
    version: int,
) -> list[SignedPlan]:
    """The rollouts of signed move ``version`` (``moves``: ``signed_moves`` of
    ``role_versions``, the alias's role versions 1, 2, ... through at least that move): each
    plan whose bytes a role version from the previous move's (1 for the first move) to the
    one before this move's signs first, that is a canonical plan of ``repository@alias``
    from the digest the alias named then. Oldest first."""
    move = moves[version - 1]
    first = int(moves[version - 2]["role_version"]) if version >= 2 else 1
    last = int(move["role_version"])  # exclusive: this move's version starts the next release
    return _plans(
        repository, alias, role_versions, first=first, last=last, stable=str(move["from_digest"])
    )


def later_plans(
    repository: str,
    alias: str,
    role_versions: Sequence[Metadata[Targets]],
    moves: Sequence[Mapping[str, Any]],
    version: int,
) -> list[SignedPlan]:
    """The rollouts run from the digest of signed move ``version`` while the alias named it:
    the plans from that digest first signed by a role version from this move's to the one
    before the next move's, or to the last of ``role_versions`` when there is no next move
    (then a later plan is not proven absent). A canary aborted after the alias's last move
    is one of these. Oldest first."""
    move = moves[version - 1]
    first = int(move["role_version"])
    last = int(moves[version]["role_version"]) if version < len(moves) else len(role_versions) + 1
    return _plans(
        repository, alias, role_versions, first=first, last=last, stable=str(move["to_digest"])
    )


def next_digest(moves: Sequence[Mapping[str, Any]], version: int) -> str | None:
    """The digest the move after ``version`` named (None: no later move)."""
    return str(moves[version]["to_digest"]) if version < len(moves) else None


def _plans(
    repository: str,
    alias: str,
    role_versions: Sequence[Metadata[Targets]],
    *,
    first: int,
    last: int,
    stable: str,
) -> list[SignedPlan]:
    """The plans of ``repository@alias`` from ``stable`` whose bytes a role version from
    ``first`` to ``last - 1`` signs first."""
    path = rollout_path(repository, alias)
    found: list[SignedPlan] = []
    previous: str | None = None
    for md in role_versions[: last - 1]:
        target = md.signed.targets.get(path)
        current = _hash(target)
        if current != previous and current is not None and md.signed.version >= first:
            data = signed_custom(target, "plan")
            plan = _plan(data) if data is not None else None
            if (
                plan is not None
                and (plan.repository, plan.alias) == (repository, alias)
                and plan.stable == stable
            ):
                found.append(SignedPlan(plan, int(md.signed.version)))
        previous = current
    return found


def _plan(data: bytes) -> RolloutPlan | None:
    try:
        return parse_plan(data)
    except PlanInvalid:
        return None


def signed_steps(
    repository: str, alias: str, rollout_id: str, versions: Sequence[Metadata[Targets]]
) -> list[tuple[RolloutStep, int]]:
    """The steps of rollout ``rollout_id`` that ``versions`` (consecutive versions of
    ``ORG:NAME@=rollout``) sign for the alias, in order, each with the version that first
    signs it (its bytes new). A target that is not a step (workers refuse it) is skipped."""
    path = step_path(repository, alias)
    found: list[tuple[RolloutStep, int]] = []
    previous: str | None = None
    for md in versions:
        target = md.signed.targets.get(path)
        current = _hash(target)
        if current != previous and current is not None:
            data = signed_custom(target, "step")
            step = _step(data) if data is not None else None
            if step is not None and step.rollout_id == rollout_id:
                found.append((step, int(md.signed.version)))
        previous = current
    return found


def _step(data: bytes) -> RolloutStep | None:
    try:
        return parse_step(data)
    except PlanInvalid:
        return None


def outcome(plan: RolloutPlan, steps: Sequence[RolloutStep], digest: str | None) -> str:
    """``promoted``: the plan's candidate is the digest the move named; ``aborted``: its last
    signed step aborted it; ``superseded``: neither (the move ended it); ``open``: neither,
    and no move followed it yet (``digest`` None: running, or completed and not moved)."""
    if plan.candidate == digest:
        return "promoted"
    if steps and steps[-1].state == "aborted":
        return "aborted"
    return "superseded" if digest is not None else "open"


def _abort_reason(steps: Sequence[RolloutStep]) -> str | None:
    return next((s.reason for s in steps if s.state == "aborted"), None)


def build_rollouts(
    *,
    repository: str,
    alias: str,
    digest: str | None,
    plans: Sequence[SignedPlan],
    fetched: Mapping[str, Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """The record's ``rollouts``: for each of ``plans`` (``signed_plans``), the plan's bytes,
    the versions of ``ORG:NAME@=rollout`` that ``fetched[rollout_id]["role_versions"]`` holds
    (bytes, consecutive), the steps they sign, the signed abort reason, and
    ``fetched[rollout_id]["registry"]``: the registry's status of the rollout, kept as
    unsigned context (times, verdicts, the rollback figures), beside the verdicts the signed
    steps acted on (``signed_verdicts``). ``digest``: the digest the move that ended these
    rollouts named (None: none has yet)."""
    out = []
    for signed in plans:
        plan = signed.plan
        item = fetched.get(plan.rollout_id) or {}
        raw_versions: Sequence[bytes] = item.get("role_versions") or ()
        versions = [Metadata[Targets].from_bytes(data) for data in raw_versions]
        steps = signed_steps(repository, alias, plan.rollout_id, versions)
        out.append(
            {
                "rollout_id": plan.rollout_id,
                "outcome": outcome(plan, [s for s, _ in steps], digest),
                "plan": blob(plan.raw, role_version=signed.role_version),
                "rollout_role": {
                    "name": rollout_role(repository),
                    "versions": [
                        blob(data, version=md.signed.version)
                        for data, md in zip(raw_versions, versions, strict=True)
                    ],
                },
                "steps": [blob(step.raw, tuf_version=v) for step, v in steps],
                "abort_reason": _abort_reason([s for s, _ in steps]),
                "verdicts": signed_verdicts(steps),
                "registry": _registry(item.get("registry")),
            }
        )
    return out


def _registry(status: Mapping[str, Any] | None) -> dict[str, Any]:
    """The registry's status of a rollout, as context: its rows' times, actors, verdicts and
    reasons, and the rollback figures it measured (``rollback``, docs/rollouts.md)."""
    status = status or {}
    return {
        "signed": False,
        "state": status.get("state"),
        "created_at": status.get("created_at"),
        "finished_at": status.get("finished_at"),
        "history": list(status.get("history") or []),
        "rollback": status.get("rollback"),
    }


# -- check (6) -----------------------------------------------------------------------------
def _fail(field_name: str, message: str) -> ReleaseRecordInvalid:
    return ReleaseRecordInvalid(CHECK, field_name, message)


def _bytes(obj: Any, where: str) -> bytes:
    """The embedded bytes at ``where``, their stated sha256 and size checked."""
    data = embedded(obj, where, CHECK)
    if get(obj, "sha256", str, CHECK) != sha256(data):
        raise _fail(f"{where}.sha256", f"the embedded bytes hash to {sha256(data)}")
    if get(obj, "size", int, CHECK) != len(data):
        raise _fail(f"{where}.size", f"is not {len(data)}")
    return data


def _verified_versions(
    entry: Mapping[str, Any],
    where: str,
    repository: str,
    alias: str,
    targets: Sequence[Metadata[Targets]],
) -> list[Metadata[Targets]]:
    """(6b): the embedded versions of ``ORG:NAME@=rollout``: consecutive, each verified by
    the delegation of an embedded top-level targets version that delegates the alias's step
    path to that role (python-tuf ``verify_delegate``)."""
    role = get(entry, "rollout_role", dict, CHECK)
    name = rollout_role(repository)
    if get(role, "name", str, CHECK) != name:
        raise _fail(f"{where}.rollout_role.name", f"{role['name']!r}, not {name!r}")
    path = step_path(repository, alias)
    delegating = [
        md
        for md in reversed(targets)
        if md.signed.delegations is not None
        and md.signed.delegations.roles is not None
        and next((n for n, _ in md.signed.delegations.get_roles_for_target(path)), None) == name
    ]
    mds: list[Metadata[Targets]] = []
    for j, item in enumerate(get(role, "versions", list, CHECK)):
        at = f"{where}.rollout_role.versions[{j}]"
        try:
            md: Metadata[Any] = Metadata.from_bytes(_bytes(item, at))
        except DeserializationError as exc:
            raise _fail(at, f"not TUF metadata: {exc}") from None
        if not isinstance(md.signed, Targets):
            raise _fail(at, "not targets metadata")
        if mds and md.signed.version != mds[-1].signed.version + 1:
            raise _fail(
                at,
                f"{name} version {md.signed.version} after version {mds[-1].signed.version}: "
                "the versions must be consecutive (a missing one could hide a step)",
            )
        failures = []
        for targets_md in delegating:
            try:
                targets_md.verify_delegate(name, md)
                break
            except RepositoryError as exc:
                failures.append(f"targets version {targets_md.signed.version}: {exc}")
        else:
            raise _fail(
                at,
                f"{name} version {md.signed.version} fails its delegation: "
                + ("; ".join(failures) or f"no embedded top-level targets delegates {path}"),
            )
        mds.append(md)
    return mds


def _check_steps(
    entry: Mapping[str, Any],
    where: str,
    plan: RolloutPlan,
    signed: Sequence[tuple[RolloutStep, int]],
) -> list[RolloutStep]:
    """(6c) and (6d): the steps the record claims are exactly those the verified versions
    sign, in order, each with its version; each follows the plan and the one before it
    (``attest.rollout.verify_next_step``: the first at index 0 or an abort, no step back, none
    skipped), and nothing follows an abort or the completed last step."""
    claimed = get(entry, "steps", list, CHECK)
    steps: list[RolloutStep] = []
    for j, item in enumerate(claimed):
        at = f"{where}.steps[{j}]"
        data = _bytes(item, at)
        if j >= len(signed) or data != signed[j][0].raw:
            raise _fail(
                at,
                f"is not the step {plan.rollout_id}'s signed versions of "
                f"{rollout_role(plan.repository)} make at position {j}: a step not signed, "
                "or out of its order",
            )
        if get(item, "tuf_version", int, CHECK) != signed[j][1]:
            raise _fail(
                f"{at}.tuf_version",
                f"{item['tuf_version']}, but version {signed[j][1]} signed it",
            )
        steps.append(signed[j][0])
    if len(claimed) != len(signed):
        raise _fail(
            f"{where}.steps",
            f"claims {len(claimed)} step(s); the embedded versions sign {len(signed)}",
        )
    seen = SeenStep(plan.rollout_id, -1, "planned")
    for j, step in enumerate(steps):
        at = f"{where}.steps[{j}]"
        if seen.state in ("aborted", "completed"):
            raise _fail(at, f"a step signed after the rollout was {seen.state}")
        try:
            verify_next_step(plan, step, seen)
        except StepRefused as exc:
            raise _fail(at, str(exc)) from None
        seen = SeenStep(step.rollout_id, step.index, step.state)
    return steps


def check_rollouts(
    predicate: Mapping[str, Any],
    *,
    repository: str,
    alias: str,
    version: int,
    digest: str,
    role_versions: Sequence[Metadata[Targets]],
    targets: Sequence[Metadata[Targets]],
    notes: list[str],
) -> None:
    """Check (6): the record's ``rollouts`` (those that led to this move) and
    ``later_rollouts`` (those run from this move's digest since, to the next move or the
    newest role version the record holds) against the TUF metadata check (2) verified
    (``role_versions``: the alias's role, 1 on; ``targets``: the top-level targets).

    1. they are exactly the plans of this release (``signed_plans``, ``later_plans``), in
       order, each the bytes its role version signs;
    2. each one's ``ORG:NAME@=rollout`` versions are consecutive and verify by a delegation
       of the embedded top-level targets;
    3. its steps are exactly the ones those versions sign for it, each with its version;
    4. each step follows the plan and the one before it, nothing after an abort;
    5. ``abort_reason`` is the signed aborted step's reason, ``outcome`` what the plan and
       the steps make of it (the plan's candidate is the move's digest: ``promoted``);
    6. ``verdicts`` are the ones the signed steps acted on, and the registry's rows of the
       judged steps say no other (``_verdicts``).

    The rest of ``registry`` (times, holds, the rollback figures) is noted as unsigned."""
    from modelward.attest.release._moves import signed_moves
    from modelward.attest.tuf import alias_path

    moves = signed_moves(alias_path(repository, alias), role_versions)
    context = (repository, alias, targets, notes)
    between = f"between move {version - 1} and move {version}"
    _check_section(
        predicate.get("rollouts", []),
        "rollouts",
        expected=signed_plans(repository, alias, role_versions, moves, version),
        span=between,
        digest=digest,
        context=context,
    )
    later = next_digest(moves, version)
    _check_section(
        predicate.get("later_rollouts", []),
        "later_rollouts",
        expected=later_plans(repository, alias, role_versions, moves, version),
        span=f"from move {version}'s digest "
        + (f"before move {version + 1}" if later else "since, up to the newest role version"),
        digest=later,
        context=context,
    )
    if later is None:
        notes.append(
            f"later_rollouts: as of the alias's role version {len(role_versions)}, the newest "
            "the record holds; a later rollout is not proven absent"
        )


def _check_section(
    claimed: Any,
    section: str,
    *,
    expected: Sequence[SignedPlan],
    span: str,
    digest: str | None,
    context: tuple[str, str, Sequence[Metadata[Targets]], list[str]],
) -> None:
    repository, alias, targets, notes = context
    if not isinstance(claimed, list):
        raise _fail(section, "must be a list")
    # (1): exactly the plans the alias's role signed for this span
    ids = [get(item, "rollout_id", str, CHECK) for item in claimed]
    want = [s.plan.rollout_id for s in expected]
    for i, (item, signed) in enumerate(itertools.zip_longest(claimed, expected)):
        where = f"{section}[{i}]"
        if signed is None or item is None:
            raise _fail(
                section,
                f"lists rollouts {ids or '(none)'}; the signed versions of the alias's role "
                f"sign plans {want or '(none)'} {span}: a rollout left out, or one that is "
                "not this span's",
            )
        plan_entry = get(item, "plan", dict, CHECK)
        if _bytes(plan_entry, f"{where}.plan") != signed.plan.raw:
            raise _fail(
                f"{where}.plan",
                f"is not the plan the alias's role signed as rollout {i + 1} {span} "
                f"(rollout {signed.plan.rollout_id}, plan sha256 {signed.plan.sha256})",
            )
        if ids[i] != signed.plan.rollout_id:
            raise _fail(f"{where}.rollout_id", f"is not the plan's {signed.plan.rollout_id}")
        if get(plan_entry, "role_version", int, CHECK) != signed.role_version:
            raise _fail(
                f"{where}.plan.role_version",
                f"{plan_entry['role_version']}, but version {signed.role_version} of the "
                "alias's role first signed the plan",
            )
        # (2) and (3): the rollout role's versions, and the steps they sign
        versions = _verified_versions(item, where, repository, alias, targets)
        signed_chain = signed_steps(repository, alias, signed.plan.rollout_id, versions)
        steps = _check_steps(item, where, signed.plan, signed_chain)
        # (5): the abort reason and the outcome, as signed
        reason = _abort_reason(steps)
        if item.get("abort_reason") != reason:
            raise _fail(
                f"{where}.abort_reason",
                f"{item.get('abort_reason')!r}, but the signed steps say {reason!r}",
            )
        made = outcome(signed.plan, steps, digest)
        if item.get("outcome") != made:
            raise _fail(f"{where}.outcome", f"{item.get('outcome')!r}, not {made!r}")
        registry = get(item, "registry", dict, CHECK)
        if registry.get("signed") is not False:
            raise _fail(f"{where}.registry.signed", "must be false: the registry's word")
        # (6): the verdicts the signed steps acted on; the registry's rows agree
        check_verdicts(item, where, signed_chain[: len(steps)], registry)
        notes.append(
            f"{where}: steps as of {rollout_role(repository)} version "
            f"{versions[-1].signed.version}; a later step is not proven absent"
            if versions
            else f"{where}: no version of {rollout_role(repository)} embedded: no signed "
            "step is claimed, and none is proven absent"
        )
        notes.append(
            f"{where}.registry: times, holds and the rollback figures are the registry's "
            "measurements (unsigned); its verdicts agree with the signed steps"
        )
