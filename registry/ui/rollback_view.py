"""The rollback page of an alias (issue 37 item 5: "one CLI command and one console page";
docs/console.md#rolling-an-alias-back): the releases the alias can be rolled back to and
the exact command that proposes and signs the way back.

A release it can go back to is one the alias held under valid signatures
(``moves.rollback.signed_earlier_targets``: the digests the signed versions of its TUF role
set it to, each verified by the role's delegation now), that is not its target now and not
quarantined: the promotion gates do not apply to it, the alias's signers still sign it. A
quarantined one is listed and refused (the quarantine would refuse the move). When and by
whom each was held is the registry's word (its alias rows).
"""

from __future__ import annotations

import shlex
from typing import Any

from modelward.registry.domains._state import AppState
from modelward.registry.domains.aliases import service as aliases
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.moves.rollback import signed_earlier_targets
from modelward.registry.domains.quarantine.service import is_quarantined
from modelward.registry.domains.repos import listing

__all__ = ["rollback_page"]


def rollback_page(state: AppState, caller: Caller, repo_name: str, alias: str) -> dict[str, Any]:
    """The alias's target now and, newest held first, each digest it held under valid
    signatures: ``quarantined``, the registry's ``held`` rows (version, time) and, when it
    can be rolled back to, the ``command`` that does it."""
    with state.db.read() as session:
        listing.readable_repo(session, repo_name, caller)
        current = aliases.get_alias(session, repo_name, alias, caller, view=state.signed)
        history = aliases.history(session, repo_name, alias, caller)
        signed = signed_earlier_targets(session, repo_name, alias)
        quarantined = {d for d in signed if is_quarantined(session, d)}
    ref = f"{repo_name}@{alias}"
    order = [h["to_digest"] for h in reversed(history) if h["to_digest"] in signed]
    order += sorted(signed - set(order))  # signed, but no row of the registry says when
    releases = []
    for digest in dict.fromkeys(order):
        if digest == current.get("digest"):
            continue
        held = [
            {"version": h["version"], "at": h["at"], "actor": h["actor"]}
            for h in reversed(history)
            if h["to_digest"] == digest
        ]
        refused = digest in quarantined
        releases.append(
            {
                "digest": digest,
                "quarantined": refused,
                "held": held,
                "command": None
                if refused
                else shlex.join(
                    ["modelward", "alias", "rollback", ref, digest, "--reason", "REASON"]
                )
                + " [--key KEY]",
            }
        )
    return {
        "repository": repo_name,
        "alias": alias,
        "current": current,
        "releases": releases,
        "sign_command": "modelward trust sign ID --key KEY",
    }
