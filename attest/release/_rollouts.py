"""The rollouts of a release: what a record holds of them and check (6) of ``verify_record``
(docs/release.md#rollouts).

The rollouts of signed move N (the alias's role moves it from P to D) are the rollout plans
that role signed after the move that made P its digest and before move N: each plan target
``ORG/NAME/rollouts/ALIAS`` first signed (its bytes new) by a role version from move N-1's to
the one before move N's, that is a canonical plan of this alias from ``stable`` P (a plan
from another digest was never in force: workers do not act on it). ``signed_plans`` finds
them, and ``signed_steps`` the steps ``ORG:NAME@=rollout`` signed for one of them: the one
pair of functions the builder (what to embed) and the verifier (``_rollout_check``: what
must be embedded) use.

Everything else a record says of a rollout (times, verdicts, actors, the rollback figures)
is the registry's word, under ``registry`` with ``signed: false``.

Pure: no network, no database, no environment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tuf.api.metadata import Metadata, TargetFile, Targets

from modelward.attest.release._model import blob
from modelward.attest.release._verdicts import signed_verdicts
from modelward.attest.rollout import (
    PlanInvalid,
    RolloutPlan,
    RolloutStep,
    parse_plan,
    parse_step,
)
from modelward.attest.rollout.paths import rollout_path, rollout_role, signed_custom, step_path

__all__ = [
    "CHECK",
    "SignedPlan",
    "abort_reason",
    "build_rollouts",
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


def abort_reason(steps: Sequence[RolloutStep]) -> str | None:
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
                "abort_reason": abort_reason([s for s, _ in steps]),
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
