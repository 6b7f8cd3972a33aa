"""Separation of duties (issue 39 item 3): an alias rule's ``distinct_from: [evaluator]``
keeps the signature of whoever attached an evaluation of the candidate from counting toward
its protected move, as the proposer's and the publisher's never count (the two-person rule).
Against a real registry on SQLite and PostgreSQL; the rule itself is checked at load."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelward.attest.keys import save_private_key
from modelward.client.api import APIError
from modelward.registry.errors import BadRequest
from modelward.registry.policy import parse_policy
from tests.attest.test_evaluation import worked_example
from tests.registry.conftest import Registry, new_publisher, push_new, unique
from tests.tuf.test_delegation_attacks import new_reviewer, propose, refused, sign


def _policy(evaluator: str) -> str:
    return "\n".join(
        [
            "version: 1",
            "trust_registered_signers: true",
            f"evidence: {{principals: [{evaluator}]}}",
            "aliases:",
            "  - {pattern: prod, roles: [publisher], protected: true, approvals: 1,"
            " distinct_from: [evaluator]}",
            "  - {pattern: '*', roles: [publisher]}",
            "",
        ]
    )


def test_the_evaluators_signature_does_not_count_when_the_rule_keeps_duties_apart(
    registry: Registry, tmp_path: Path
) -> None:
    publisher, evaluator, reviewer = (
        new_publisher(registry),
        new_reviewer(registry),
        new_reviewer(registry),
    )
    repo = registry.repo(publisher, policy_yaml=_policy(evaluator.actor.name))
    digest = push_new(publisher, repo, tmp_path)
    key = tmp_path / unique("eval") / "evaluator.key"
    key.parent.mkdir()
    save_private_key(evaluator.key, key)
    results = key.parent / "results.jsonl"
    results.write_bytes(worked_example(critical=0))
    attached = registry.cli(
        "eval", "attach", f"{repo}@{digest}", "--results", str(results), "--key", str(key),
        token=evaluator.actor.token,
    )  # fmt: skip
    assert attached.returncode == 0, attached.stderr
    proposal = propose(publisher, repo, "prod", digest)
    with pytest.raises(APIError) as info:
        sign(evaluator, proposal)
    refused(info, 403, "signature_refused")
    assert f"an evaluator of {digest}" in str(info.value)
    assert registry.admin.tuf_proposal(proposal)["signatures"] in ([], None)
    assert sign(reviewer, proposal)["state"] == "published"


def test_distinct_from_on_an_unprotected_rule_is_refused_at_load() -> None:
    text = (
        "version: 1\naliases:\n  - {pattern: dev, roles: [publisher], distinct_from: [evaluator]}\n"
    )
    with pytest.raises(BadRequest, match="distinct_from is set but protected is false"):
        parse_policy(text)
