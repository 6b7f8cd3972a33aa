"""``GET /v1/repos/{org}/{name}/bundles/{digest}/gates``: what the release gates of the
repository's gated aliases say of a bundle now (docs/evaluation.md#gates).

For ``eval attach`` to show which verdicts an evaluation changed (it reads this before and
after attaching). Nothing moves, nothing is proposed, nothing is audited: it is a read.
For each alias whose rule sets ``gates`` (at most ``MAX_ALIASES``: a rule's literal pattern
and the repository's aliases its pattern matches):

  (1) the move of that alias to the bundle is read and judged exactly as a move is
      (aliases.moves.read_move: the one bundle verifier; attest.alias_decision), every check run;
  (2) as if the bundle's publisher moved it: evidence counts as for that move (moves.evidence;
      the caller asking is not the mover, so an evaluator sees their own evaluation count);
  (3) the answer is the gates' judgement: the verdict, every gate, the evaluations counted
      and those not counted with their reasons.

The bundle's evidence (scan, attestations) is judged once for all aliases, and recalled
from what a push or an earlier request paid for (docs/registry.md#verdict-cache); a
computation a reader's request needs waits for the readers' one slot.
"""

from __future__ import annotations

import fnmatch
from dataclasses import replace
from typing import Any

from sqlalchemy import select

from modelward.attest.alias_decision import decide_move_result
from modelward.attest.evaluation import gate_label
from modelward.attest.policy import alias_rule_for
from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import AppState, State
from modelward.registry.domains.auth.deps import AnyCaller
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.blobs.streaming import check_digest
from modelward.registry.domains.bundles.service import live_bundle
from modelward.registry.domains.moves.evidence import evidence_signers
from modelward.registry.domains.moves.service import read_move
from modelward.registry.domains.repos.listing import readable_repo
from modelward.registry.models import Alias
from modelward.registry.policy import repo_policy

__all__ = ["MAX_ALIASES", "bundle_gates", "router"]

MAX_ALIASES = 50
router = domain_router(prefix="/v1/repos/{org}/{name}", tags=["aliases"])


@router.get("/bundles/{digest}/gates")
def gates(*, org: str, name: str, digest: str, caller: AnyCaller, state: State) -> dict[str, Any]:
    """What the release gates of each gated alias of the repository say of the bundle now,
    as if its publisher moved the alias there (``aliases``: alias, current, verdict, gates,
    evaluations, not_counted). Nothing moves; 404/410 for a missing or deleted bundle."""
    return bundle_gates(
        state, repo_name=f"{org}/{name}", digest=check_digest(digest), caller=caller
    )


def _gated_aliases(names: list[str], patterns: list[str]) -> list[str]:
    literal = [p for p in patterns if not any(c in p for c in "*?[")]
    matched = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    return sorted(set(literal) | set(matched))[:MAX_ALIASES]


def bundle_gates(state: AppState, *, repo_name: str, digest: str, caller: Caller) -> dict[str, Any]:
    """The gates' judgement of ``digest`` for every gated alias of ``repo_name`` (module
    doc). Raises NotFound (repository, bundle), Gone (deleted bundle)."""
    with state.db.read() as session:
        repo = readable_repo(session, repo_name, caller)
        policy = repo_policy(repo, state.default_policy_yaml)
        bundle = live_bundle(session, repo, digest)
        patterns = [r.pattern for r in policy.aliases if r.gates is not None]
        existing = list(
            session.scalars(select(Alias.name).where(Alias.repo_id == repo.id).order_by(Alias.name))
        )
        # (2): evidence as for a move by the bundle's publisher
        vouches = evidence_signers(
            session, repo, policy, publisher_id=bundle.created_by, mover_id=bundle.created_by
        )
    answers = []
    for alias in _gated_aliases(existing, patterns):
        rule = alias_rule_for(policy, alias)
        if rule is None or rule.gates is None:  # an earlier rule without gates decides it
            continue
        # (1): the move read and judged as a move is, every check run
        request, _ = read_move(
            state,
            repo_name=repo_name,
            alias=alias,
            digest=digest,
            rollback=False,
            caller=caller,
            every_check=True,
        )
        report = decide_move_result(replace(request, evidence=vouches.reason_against))
        judged = report.gates
        if judged is None:  # gates are judged for protected rules only
            continue
        # (3): the judgement
        answers.append(
            {
                "alias": alias,
                "current": request.current,
                "verdict": judged.verdict,
                "gates": [{**g.to_json(), "label": gate_label(g)} for g in judged.gates],
                "evaluations": len(judged.evaluations),
                "not_counted": [n.to_json() for n in judged.not_counted],
            }
        )
    return {"repository": repo_name, "digest": digest, "aliases": answers}
