"""The one policy evaluator: policy + manifest + verified statements + findings -> Decision.

The registry calls it when a bundle is pushed and the loader when one is loaded: the same
code, the same reasons. It does no I/O and trusts nothing it is handed except that each
``VerifiedStatement`` really was verified (attest.verify did that); it re-checks which
signers it may count and which bundle each statement is about. The steps, in order
(docs/policy.md#evaluation and docs/attestations.md explain which threat each one stops):

    (1) the content scan found nothing
    (2) at least one verified statement is about THIS bundle (subject binding)
    (3) each required predicate type has `threshold` distinct trusted signers
    (4) each required predicate type is present at all
    (5) every provenance's builder id is allowed
    (6) every provenance's source URI is allowed
    (7) the manifest is within the size limits
    (8) every rejected attestation is recorded, and denies unless the policy says record

Every step adds ``Check`` records; the decision allows only when every check passed and
at least one check ran for steps (2) and (3). Nothing is ever skipped silently: a step
that does not apply says so in a passed check's message. Alias rules are not judged here:
a move's verdict, a worker's release gates included, is attest.alias_decision's (the
policy gives it ``evidence_rule``: who counts for evidence under this policy alone).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from modelward.attest.errors import AttestError
from modelward.attest.policy._model import PROVENANCE_V1, Policy
from modelward.attest.statement import PredicateType
from modelward.attest.trust import Signer, TrustSet, VerifiedStatement

if TYPE_CHECKING:
    from modelward.attest.manifest import Manifest
    from modelward.attest.scanner import Finding

__all__ = [
    "ATTESTATION_STEPS",
    "OMS_TREE_NOTE",
    "Check",
    "Decision",
    "PolicyDenied",
    "evaluate",
    "evidence_rule",
    "require_allowed",
    "size_checks",
]

# attest.verify adds this note (followed by the bundle digest) to an OMS statement after
# checking it file by file against the bundle's tree: OMS statements have no bundle subject.
OMS_TREE_NOTE = "oms files verified against bundle "


@dataclass(frozen=True)
class Check:
    """One step's outcome: ``name`` says which step (and what), ``message`` why; ``step`` is
    the number of the step in the module doc (0: the trust precondition), for callers that
    tell checks apart by kind (``ATTESTATION_STEPS``) without reading their names."""

    name: str
    passed: bool
    message: str
    step: int = field(default=0, compare=False)


# Steps (2)-(6): what the bundle's attestations show (subject, predicates, threshold,
# builder, source). A bundle denied only by these may be waiting for its attestations.
ATTESTATION_STEPS = frozenset({2, 3, 4, 5, 6})


@dataclass(frozen=True)
class Decision:
    """Every check that ran, and the distinct trusted signers that counted."""

    allowed: bool
    checks: tuple[Check, ...]
    signers: tuple[Signer, ...] = field(default=())

    @property
    def reasons(self) -> tuple[str, ...]:
        """The failed checks, as ``name: message`` lines (empty when allowed)."""
        return tuple(f"{c.name}: {c.message}" for c in self.checks if not c.passed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "allowed": self.allowed,
            "checks": [
                {"name": c.name, "passed": c.passed, "message": c.message} for c in self.checks
            ],
            "signers": [{"name": s.name, "kind": s.kind, "detail": s.detail} for s in self.signers],
        }


class PolicyDenied(AttestError):  # noqa: N818 - the name is the outcome
    """The policy denied a bundle; ``decision`` holds every check."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        lines = "\n".join(f"  {r}" for r in decision.reasons) or "  (no check passed)"
        super().__init__(f"policy denied the bundle:\n{lines}")


def require_allowed(decision: Decision) -> None:
    """Raise PolicyDenied (carrying ``decision``) unless it allows."""
    if not decision.allowed:
        raise PolicyDenied(decision)


def _trusted_names(policy: Policy, extra_trust: TrustSet) -> dict[str, frozenset[str]]:
    """Signer name -> the signer kinds the policy lets us count under that name.

    A name may stand for several kinds: a registered principal (extra_trust) can have both
    keys and Sigstore identities, and each of them counts (as that one name, once)."""
    names: dict[str, set[str]] = {}

    def add(entries: Iterable[str], kind: str) -> None:
        for name in entries:
            names.setdefault(name, set()).add(kind)

    add((k.name for k in policy.signers.keys), "key")
    add((c.name for c in policy.signers.cas), "x509")
    add((i.name for i in policy.signers.identities), "sigstore")
    if policy.trust_registered_signers:
        add((k.name for k in extra_trust.keys), "key")
        add((c.name for c in extra_trust.cas), "x509")
        add((i.name for i in extra_trust.identities), "sigstore")
    return {name: frozenset(kinds) for name, kinds in names.items()}


def _describe(stmt: VerifiedStatement, index: int) -> str:
    return f"statement {index} ({stmt.kind}, {stmt.predicate_type})"


def _oms_bound(stmt: VerifiedStatement, manifest: Manifest) -> bool:
    """An OMS statement is about this bundle if attest.verify checked it against the
    bundle's tree, or if its sha256 per-file resources are exactly the manifest's layers
    (the signature's own ignore_paths never excuse a file)."""
    if f"{OMS_TREE_NOTE}{manifest.digest}" in stmt.notes:
        return True
    predicate = stmt.statement.get("predicate")
    if not isinstance(predicate, Mapping):
        return False
    resources, serialization = predicate.get("resources"), predicate.get("serialization")
    if not isinstance(resources, list) or not isinstance(serialization, Mapping):
        return False
    if serialization.get("method") != "files" or serialization.get("hash_type") != "sha256":
        return False
    signed = {
        r.get("name"): f"sha256:{r.get('digest')}" for r in resources if isinstance(r, Mapping)
    }
    layers = {layer.path: layer.digest for layer in manifest.layers}
    return len(signed) == len(resources) and signed == layers


def _about_bundle(stmt: VerifiedStatement, manifest: Manifest) -> bool:
    if stmt.kind == "oms":
        return _oms_bound(stmt, manifest)
    hex_digest = manifest.digest.removeprefix("sha256:")
    return any(s.digest.get("sha256") == hex_digest for s in stmt.subjects)


def _provenance_field(stmt: VerifiedStatement, *path: str) -> Any:
    node: Any = stmt.statement.get("predicate")
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _source_uri(stmt: VerifiedStatement) -> str | None:
    source = _provenance_field(stmt, "buildDefinition", "externalParameters", "source")
    if isinstance(source, Mapping):
        source = source.get("uri")
    return source if isinstance(source, str) else None


def _matches(value: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(value, p) for p in patterns)


def _step_subjects(
    statements: Sequence[VerifiedStatement], manifest: Manifest
) -> tuple[list[VerifiedStatement], list[Check]]:
    bound: list[VerifiedStatement] = []
    checks: list[Check] = []
    for i, stmt in enumerate(statements):
        if _about_bundle(stmt, manifest):
            bound.append(stmt)
            continue
        subjects = ", ".join(f"{s.name} {dict(s.digest)}" for s in stmt.subjects) or "none"
        message = f"{_describe(stmt, i)} is not about {manifest.digest}: subjects {subjects}"
        checks.append(Check("subject", False, message, step=2))
    message = f"{len(bound)} verified statement(s) about {manifest.digest}"
    checks.append(Check("subject", bool(bound), message, step=2))
    return bound, checks


def _step_threshold(
    policy: Policy, bound: Sequence[VerifiedStatement], trusted: Mapping[str, frozenset[str]]
) -> tuple[dict[str, Signer], list[Check]]:
    groups: dict[str, list[VerifiedStatement]] = {}
    if policy.required_predicate_types:
        for ptype in policy.required_predicate_types:
            groups[ptype] = [s for s in bound if s.predicate_type == ptype]
    else:
        groups["(any type)"] = list(bound)
    counted: dict[str, Signer] = {}
    checks: list[Check] = []
    for ptype, group in groups.items():
        signers: dict[str, Signer] = {}
        untrusted: set[str] = set()
        for stmt in group:
            for signer in stmt.signers:
                if signer.kind in trusted.get(signer.name, frozenset()):
                    signers.setdefault(signer.name, signer)
                else:
                    untrusted.add(signer.name)
        counted.update(signers)
        names = ", ".join(sorted(signers)) or "none"
        note = f"; not trusted by this policy: {', '.join(sorted(untrusted))}" if untrusted else ""
        present = f"{len(group)} statement(s); trusted signers: {names}"
        checks.append(
            Check(
                f"predicate {ptype}",
                bool(group) and bool(signers),
                present if group else "no verified statement of this type",
                step=4,
            )
        )
        checks.append(
            Check(
                f"threshold {ptype}",
                len(signers) >= policy.threshold,
                f"{len(signers)} of {policy.threshold} required distinct signers ({names}){note}",
                step=3,
            )
        )
    return counted, checks


def _builder_id(stmt: VerifiedStatement) -> Any:
    return _provenance_field(stmt, "runDetails", "builder", "id")


def _step_provenance(policy: Policy, bound: Sequence[VerifiedStatement]) -> list[Check]:
    checks: list[Check] = []
    provenance = [s for s in bound if s.predicate_type == PROVENANCE_V1]
    for step, label, patterns, extract in (
        (5, "builder", policy.builders, _builder_id),
        (6, "source", policy.sources, _source_uri),
    ):
        if patterns is None:
            checks.append(Check(label, True, f"policy does not restrict the {label}", step))
            continue
        if not provenance:
            checks.append(Check(label, False, f"no provenance to show an allowed {label}", step))
        for stmt in provenance:
            value = extract(stmt)
            if not isinstance(value, str):
                checks.append(Check(label, False, f"a provenance statement names no {label}", step))
                continue
            ok = _matches(value, patterns)
            verdict = f"{label} {value!r} is {'' if ok else 'not '}allowed"
            checks.append(Check(label, ok, verdict, step))
    return checks


def evidence_rule(
    policy: Policy, statements: Sequence[VerifiedStatement], manifest: Manifest
) -> Callable[[Signer], str | None]:
    """Who counts for evidence under this policy alone (a worker's): one of its own signers
    named in ``evidence.signers``, and never a signer that vouched for the required
    predicate types of the bundle ``manifest`` names (its publisher; docs/policy.md#evidence).
    Only ``statements`` about that bundle are read (step (2))."""
    bound, _ = _step_subjects(statements, manifest)
    own = _trusted_names(policy, TrustSet())
    named = set(policy.evidence.signers)
    required = set(policy.required_predicate_types) or {PROVENANCE_V1}
    publishers = {
        signer.name: stmt.predicate_type
        for stmt in bound
        if stmt.predicate_type in required and stmt.predicate_type != PredicateType.EVALUATION
        for signer in stmt.signers
    }

    def reason(signer: Signer) -> str | None:
        if signer.name not in named or signer.kind not in own.get(signer.name, frozenset()):
            return f"{signer.name} is not an evidence signer of the policy (evidence.signers)"
        if signer.name in publishers:
            return (
                f"{signer.name} vouched for this bundle's {publishers[signer.name]}: the "
                "bundle's publisher never counts for its evidence"
            )
        return None

    return reason


def size_checks(policy: Policy, manifest: Manifest) -> list[Check]:
    """Step (7): the manifest's stated sizes against the policy's limits, one Check each."""
    limits = policy.limits
    total = sum(layer.size for layer in manifest.layers)
    checks = [
        Check(
            "size",
            False,
            f"{layer.path}: {layer.size} bytes > max_file_bytes {limits.max_file_bytes}",
        )
        for layer in manifest.layers
        if layer.size > limits.max_file_bytes
    ]
    if len(manifest.layers) > limits.max_files:
        checks.append(
            Check("size", False, f"{len(manifest.layers)} files > max_files {limits.max_files}")
        )
    checks.append(
        Check(
            "size",
            total <= limits.max_bundle_bytes,
            f"{total} bytes in {len(manifest.layers)} file(s); max_bundle_bytes "
            f"{limits.max_bundle_bytes}",
        )
    )
    return checks


def evaluate(
    policy: Policy,
    *,
    manifest: Manifest,
    statements: Sequence[VerifiedStatement],
    rejected: Sequence[str],
    findings: Sequence[Finding],
    extra_trust: TrustSet = TrustSet(),
) -> Decision:
    """Decide whether ``policy`` allows the bundle ``manifest`` names (see module doc).

    ``statements`` were verified by attest.verify against the policy's trust set (plus
    ``extra_trust``, counted only when ``policy.trust_registered_signers``); ``rejected``
    lists, one reason each, the attestations that did not verify; ``findings`` come from
    the content scanner. Never raises for a denial: the returned Decision says why; use
    require_allowed to raise.
    """
    checks: list[Check] = []
    trusted = _trusted_names(policy, extra_trust)
    if not trusted:
        checks.append(Check("trust", False, "no trusted signers: nobody can vouch for a bundle"))

    # (1): the content scan found nothing (the policy's allow_globs already fed the scanner).
    checks.extend(Check("scan", False, f"{f.path}: {f.rule}: {f.reason}", 1) for f in findings)
    if not findings:
        checks.append(Check("scan", True, "no findings", 1))

    # (2): only statements about THIS bundle count (stops replaying another bundle's
    # attestations: SLSA (F)/(G), TUF mix-and-match).
    bound, subject_checks = _step_subjects(statements, manifest)
    checks.extend(subject_checks)

    # (3) + (4): per required predicate type, distinct trusted signer names across every
    # statement of that type; one signer signing twice counts once. [] = any type.
    counted, threshold_checks = _step_threshold(policy, bound, trusted)
    checks.extend(threshold_checks)

    # (5) + (6): builder id and source URI of every provenance statement (SLSA (C), (D)).
    checks.extend(_step_provenance(policy, bound))

    # (7): size limits, from the manifest's layer sizes (the bytes were hashed against them).
    checks.extend(replace(c, step=7) for c in size_checks(policy, manifest))

    # (8): an attestation that did not verify denies unless the policy says "record"
    # (fail closed: a forged or tampered signature is evidence of an attack even when
    # other signers meet the threshold).
    deny = policy.rejected_attestations == "deny"
    checks.extend(
        Check("attestation", not deny, f"rejected: {reason}" + ("" if deny else " (recorded)"), 8)
        for reason in rejected
    )

    return Decision(
        allowed=all(c.passed for c in checks),
        checks=tuple(checks),
        signers=tuple(counted.values()),
    )
