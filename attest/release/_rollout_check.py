"""Check (6) of ``verify_record``: the record's rollouts against the signed state
(docs/release.md#modelward-release-verify). Which rollouts a release has, and what a record
says of them, is ``_rollouts``'s; the verdicts the signed steps acted on ``_verdicts``'.

Pure: no network, no database, no environment.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from tuf.api.exceptions import RepositoryError
from tuf.api.metadata import Metadata, Targets
from tuf.api.serialization import DeserializationError

from modelward.attest.release._model import ReleaseRecordInvalid, embedded, get, sha256
from modelward.attest.release._rollouts import (
    CHECK,
    SignedPlan,
    abort_reason,
    later_plans,
    next_digest,
    outcome,
    signed_plans,
    signed_steps,
)
from modelward.attest.release._verdicts import check_verdicts
from modelward.attest.rollout import (
    RolloutPlan,
    RolloutStep,
    SeenStep,
    StepRefused,
    verify_next_step,
)
from modelward.attest.rollout.paths import rollout_role, step_path

__all__ = ["check_rollouts"]


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
        reason = abort_reason(steps)
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
