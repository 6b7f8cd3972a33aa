"""``push``'s preflight: judge the bundle locally, with the registry's own verdict code,
before a byte is uploaded (docs/registry.md#push, docs/cli.md#push).

The registry answers ``GET /v1/repos/{org}/{name}`` with ``effective_policy_yaml``: the policy
that judges the repository's bundles now. ``check_before_upload`` hands the built bundle, the
attestations about to be sent and that policy to ``attest.verifier.verify_bundle_result`` (the
one verifier the registry, the loader and ``bundle verify`` use; nothing here evaluates a
policy) reading the files from the publisher's directory, then keeps only the failed checks
whose outcome cannot differ at the registry:

    (1) ``scan``, ``size``: they depend on the policy and the bytes only;
    (2) ``attestation``: an attestation a signer this client trusts claims to have signed, which
        fails (the registry trusts every such signer too, so it rejects it as well);
    (3) ``builder``, ``source``: when every attestation verified here (none was set aside for
        an unknown signer), the registry sees the same provenance statements;
    (4) every check, when the push carries no attestation at all: nothing can vouch for the
        bundle at the registry either (``trust`` only when the policy does not count the
        registry's registered signers, which this client cannot see).

Anything else (who counts towards a threshold, registered signers) only the registry knows: the
push goes ahead and the registry decides. The preflight never allows what the registry would
refuse; it refuses only what the registry would certainly refuse, with the same reasons.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from modelward.attest.manifest import BuiltBundle
    from modelward.attest.policy import Decision
    from modelward.attest.trust import TrustSet

__all__ = ["Preflight", "check_before_upload"]

_ALWAYS_CERTAIN = frozenset({"scan", "size", "attestation"})
_CERTAIN_WHEN_ALL_KNOWN = frozenset({"builder", "source"})


@dataclass(frozen=True)
class Preflight:
    """The local verdict: ``refused`` holds the reasons (``name: message``) the registry
    would certainly give too; empty when the push may go ahead. ``skipped`` says why no
    check ran (the registry named no policy, or this client cannot read it)."""

    refused: tuple[str, ...] = ()
    decision: Decision | None = None
    unsigned: bool = False
    skipped: str | None = None


def check_before_upload(
    repo: str,
    repo_info: Mapping[str, Any],
    built: BuiltBundle,
    root: Path,
    attestations: Sequence[bytes],
    *,
    own_trust: TrustSet | None = None,
    exclude: Sequence[str] = (),
) -> Preflight:
    """Judge ``built`` (hashed from ``root``) under the policy the registry named for
    ``repo``, with ``attestations`` (``own_trust``: the key ``push --sign`` signs with;
    ``exclude``: the paths ``built`` was built without, as OMS ignore paths).

    Returns a ``Preflight``; never raises for a denial. The registry stays the judge: a
    policy this client cannot parse or whose signers it cannot load is reported in
    ``skipped`` or treated as unknown, never as a pass or a refusal of its own.
    """
    from modelward.attest.errors import PolicyError
    from modelward.attest.policy import load_policy, policy_trust_set
    from modelward.attest.trust import TrustSet
    from modelward.attest.verifier import DirectoryReader, verify_bundle_result

    text = repo_info.get("effective_policy_yaml") or repo_info.get("policy_yaml")
    if not isinstance(text, str):
        return Preflight(skipped=f"the registry did not say which policy judges {repo}")
    source = f"{repo} policy"
    try:
        policy = load_policy(text.encode("utf-8"), source=source)
    except (PolicyError, RecursionError) as exc:
        return Preflight(skipped=f"cannot read the policy of {repo} here: {exc}")
    try:  # keys given as files on the registry's host cannot be loaded here: unknown signers
        trust = policy_trust_set(policy, None, source=source)
    except PolicyError:
        trust = TrustSet()
    if own_trust is not None:
        known = {k.keyid for k in trust.keys}
        mine = TrustSet(keys=tuple(k for k in own_trust.keys if k.keyid not in known))
        trust = trust.merged(mine)
    verdict = verify_bundle_result(
        built.manifest.raw,
        attestations,
        policy=policy,
        trust=trust,
        reader=DirectoryReader(root),
        expected_digest=built.manifest.digest,
        oms_ignore_paths=exclude,
    )  # the registry's labels too (attestation 0, 1...): the same reasons, word for word
    unsigned = not attestations
    refused = []
    for check in verdict.decision.checks:
        if check.passed:
            continue
        if check.name == "trust":
            certain = unsigned and not policy.trust_registered_signers
        else:
            certain = (
                unsigned
                or check.name in _ALWAYS_CERTAIN
                or (check.name in _CERTAIN_WHEN_ALL_KNOWN and not verdict.ignored)
            )
        if certain:
            refused.append(f"{check.name}: {check.message}")
    return Preflight(refused=tuple(refused), decision=verdict.decision, unsigned=unsigned)
