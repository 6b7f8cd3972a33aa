"""The policy document, version 1, as pydantic models (docs/policy.md is its reference).

Every model forbids unknown fields, so a misspelt key is an error instead of a silent
default. Invariants that span fields (unique signer names, a threshold the trusted signers
can meet, protected-alias requirements) are checked here, at construction, so that no
``Policy`` object that breaks them can exist.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PROVENANCE_V1 = "https://slsa.dev/provenance/v1"  # == attest.statement.PredicateType.PROVENANCE

Role = Literal["admin", "publisher", "reviewer", "reader"]
Mode = Literal["enforce", "warn"]
Distinct = Literal["proposer", "publisher", "evaluator"]
Name = Annotated[
    str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@:/+-]*$")
]
NonEmpty = Annotated[str, Field(min_length=1, max_length=4096)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KeySigner(_Strict):
    """A public key, by PEM file (relative to the policy file) or inline PEM."""

    name: Name
    path: NonEmpty | None = Field(default=None, description="PEM file, relative to the policy")
    pem: NonEmpty | None = Field(default=None, description="inline PEM public key")

    @model_validator(mode="after")
    def _exactly_one_source(self) -> KeySigner:
        if (self.path is None) == (self.pem is None):
            raise ValueError("give exactly one of path or pem")
        return self


class CASigner(_Strict):
    """An X.509 CA: root certificates anchor, intermediates may chain (files or inline PEM)."""

    name: Name
    roots: list[NonEmpty] = Field(min_length=1, description="PEM files or inline PEM")
    intermediates: list[NonEmpty] = Field(default_factory=list)


class IdentitySigner(_Strict):
    """A Sigstore keyless identity: exact certificate identity (SAN) and OIDC issuer."""

    name: Name
    identity: NonEmpty
    issuer: NonEmpty
    trust_root: NonEmpty | None = Field(
        default=None,
        description="trusted_root.json, relative to the policy; default: sigstore public good",
    )


class Signers(_Strict):
    keys: list[KeySigner] = Field(default_factory=list)
    cas: list[CASigner] = Field(default_factory=list)
    identities: list[IdentitySigner] = Field(default_factory=list)

    def names(self) -> list[str]:
        return [
            *(k.name for k in self.keys),
            *(c.name for c in self.cas),
            *(i.name for i in self.identities),
        ]

    @model_validator(mode="after")
    def _unique_names(self) -> Signers:
        seen: set[str] = set()
        for name in self.names():
            if name in seen:
                raise ValueError(f"signer name {name!r} is used twice; names must be unique")
            seen.add(name)
        return self


class Files(_Strict):
    """Which files a bundle may hold: the scanner's allow-list plus these explicit globs."""

    allow_globs: list[NonEmpty] = Field(
        default_factory=list,
        description="extra globs admitting files the scanner classifies as unknown; "
        "never a dangerous format",
    )

    @field_validator("allow_globs")
    @classmethod
    def _no_catch_all(cls, globs: list[str]) -> list[str]:
        for glob in globs:
            if glob.strip("*/") == "":
                raise ValueError(f"{glob!r} would admit every file; name the files explicitly")
        return globs


class Limits(_Strict):
    """Size limits checked against the manifest (and passed to the scanner)."""

    max_bundle_bytes: int = Field(default=1 << 40, ge=1, description="sum of all file sizes")
    max_file_bytes: int = Field(default=1 << 38, ge=1, description="largest single file")
    max_files: int = Field(default=100_000, ge=1)
    max_safetensors_header: int = Field(default=100 * 10**6, ge=8)
    max_manifest_bytes: int = Field(
        default=16 * 2**20,
        ge=1024,
        le=256 * 2**20,
        description="largest manifest accepted; a worker stops its download past it",
    )


class ReplayRequirement(_Strict):
    """A replay result against the bundle currently on the alias, required to move it."""

    min_consecutive: int = Field(default=1000, ge=1)
    max_divergences: int = Field(default=0, ge=0)


class Evidence(_Strict):
    """Who vouches for a serving worker's evidence: determinism baselines and replay results,
    the evidence a protected alias's ``require_baseline`` and ``replay`` ask for.

    Nobody else's count, and the registry never counts the bundle's publisher, the principal
    moving the alias, a publisher of the repository or an admin (who may publish anywhere),
    nor a key or identity registered to one of them, whatever is listed here.
    """

    signers: list[Name] = Field(
        default_factory=list,
        description="names of this policy's signers (signers.keys/cas/identities) that "
        "serving workers hold",
    )
    principals: list[Name] = Field(
        default_factory=list,
        description="registered principals whose registered keys and identities count "
        "(registry only)",
    )
    roles: list[Literal["reader"]] = Field(
        default_factory=list,
        description="every registered principal with this role counts (registry only): "
        "reader = serving workers",
    )

    def names_nobody(self) -> bool:
        return not (self.signers or self.principals or self.roles)


SliceName = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")]
_MAX_MS = 3_600_000.0  # an hour: no latency bound above it means anything


class Gates(_Strict):
    """Release gates on an evaluation statement (docs/evaluation.md#gates): each optional,
    each a named check; the move passes only when every gate set here passes."""

    min_deterministic_pass_rate: float | None = Field(
        default=None,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="least fraction of deterministic checks the candidate passes (0.995)",
    )
    max_overall_regression_points: float | None = Field(
        default=None,
        ge=0,
        le=100,
        allow_inf_nan=False,
        description="largest human-rated regression against the baseline, in points",
    )
    max_slice_regression_points: float | None = Field(
        default=None,
        ge=0,
        le=100,
        allow_inf_nan=False,
        description="largest regression of each required slice (every slice when "
        "required_slices is empty), in points",
    )
    required_slices: list[SliceName] = Field(
        default_factory=list,
        max_length=1000,
        description="slices max_slice_regression_points checks; each must be in the evaluation",
    )
    max_critical_safety_failures: int | None = Field(default=None, ge=0, le=1_000_000)
    max_p95_ttft_ms: float | None = Field(default=None, gt=0, le=_MAX_MS, allow_inf_nan=False)
    max_p95_token_spacing_ms: float | None = Field(
        default=None, gt=0, le=_MAX_MS, allow_inf_nan=False
    )
    min_goodput_ratio: float | None = Field(
        default=None,
        gt=0,
        le=1000,
        allow_inf_nan=False,
        description="candidate goodput / baseline goodput, at least (1 = no lower)",
    )
    max_energy_per_token_ratio: float | None = Field(
        default=None,
        gt=0,
        le=1000,
        allow_inf_nan=False,
        description="candidate / baseline energy per useful output token, at most (1.1)",
    )

    @model_validator(mode="after")
    def _names_a_gate(self) -> Gates:
        if self.required_slices and self.max_slice_regression_points is None:
            raise ValueError("required_slices is set but max_slice_regression_points is not")
        if len(set(self.required_slices)) != len(self.required_slices):
            raise ValueError("required_slices names a slice twice")
        if all(v is None for k, v in self if k != "required_slices"):
            raise ValueError("gates names no gate; set at least one or remove gates")
        return self


# A protected alias's approvals become a TUF signature threshold: bounded, like every number
# another parser (canonical JSON, a database column) has to hold.
MAX_APPROVALS = 100


class AliasRule(_Strict):
    """Who may move aliases matching ``pattern`` (fnmatch), and what a protected one needs."""

    pattern: Annotated[str, Field(min_length=1, max_length=200)]
    principals: list[Name] = Field(default_factory=list)
    roles: list[Role] = Field(default_factory=list)
    protected: bool = False
    approvals: int = Field(
        default=0,
        ge=0,
        le=MAX_APPROVALS,
        description="reviewers other than the publisher (the TUF role's signature threshold)",
    )
    require_baseline: bool = False
    replay: ReplayRequirement | None = None
    gates: Gates | None = Field(
        default=None, description="release gates on an evaluation statement (protected only)"
    )
    online: bool = Field(
        default=False,
        description="the registry's online key signs these aliases' TUF role, so a move "
        "(e.g. a plain OCI tag push) needs no publisher signature; never for protected "
        "aliases, and workers accept them only for patterns they list (docs/tuf.md#roles)",
    )
    distinct_from: list[Distinct] = Field(
        default_factory=list,
        description="whose signatures never count toward a protected move (separation of "
        "duties): the proposer and the candidate's publisher always (the two-person rule), "
        "and the evaluator (who attached an evaluation of the candidate) when listed",
    )

    @model_validator(mode="after")
    def _requirements_need_protection(self) -> AliasRule:
        if not (self.principals or self.roles):
            raise ValueError("no principals and no roles: nobody could move this alias")
        if self.online and self.protected:
            raise ValueError(
                "online is true but protected is true: reviewers sign protected "
                "aliases, never the registry's online key"
            )
        if not self.protected:
            for field, value in (
                ("approvals", self.approvals),
                ("require_baseline", self.require_baseline),
                ("replay", self.replay),
                ("gates", self.gates),
                ("distinct_from", self.distinct_from),
            ):
                if value:
                    raise ValueError(f"{field} is set but protected is false; set protected: true")
        return self


class TufTrust(_Strict):
    """A worker's trust in the registry's alias decisions (docs/tuf.md#workers)."""

    root: NonEmpty | None = Field(
        default=None,
        description="the pinned TUF root.json (relative to the policy file); resolving an "
        "alias needs one",
    )
    online_aliases: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list,
        description="alias patterns (fnmatch) accepted when only the registry's online key "
        "signed them; none by default (never prod)",
    )
    metadata_url: Annotated[str, Field(pattern=r"^https?://", max_length=2000)] | None = Field(
        default=None,
        description="an untrusted mirror of the registry's /tuf/ files, read first (the "
        "registry when it cannot answer), verified from the pinned root "
        "(docs/tuf.md#mirrors)",
    )


class Policy(_Strict):
    """A repository's or a worker's trust policy (version 1). See docs/policy.md."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={"$id": "https://modelward.dev/policy/v1/schema.json"},
    )

    version: Literal[1]
    trust_registered_signers: bool = Field(
        default=False,
        description="the registry (or the caller) adds its registered publisher keys and "
        "identities to the trusted signers",
    )
    signers: Signers = Field(default_factory=Signers)
    threshold: int = Field(default=1, ge=1, description="distinct trusted signers required")
    required_predicate_types: list[NonEmpty] = Field(
        default_factory=lambda: [PROVENANCE_V1],
        description="each must be present, signed by threshold signers; [] = any type",
    )
    builders: list[NonEmpty] | None = Field(
        default=None, description="allowed SLSA builder ids (globs); null = any"
    )
    sources: list[NonEmpty] | None = Field(
        default=None, description="allowed source URIs (globs); null = any"
    )
    files: Files = Field(default_factory=Files)
    limits: Limits = Field(default_factory=Limits)
    rejected_attestations: Literal["deny", "record"] = Field(
        default="deny",
        description="an attestation that fails verification denies (deny) or is only "
        "recorded (record)",
    )
    engine_version: Mode = "enforce"
    baseline: Mode = "enforce"
    evidence: Evidence = Field(
        default_factory=Evidence,
        description="who vouches for determinism baselines and replay results; default: "
        "nobody (then no alias rule may require them)",
    )
    aliases: list[AliasRule] = Field(default_factory=list)
    tuf: TufTrust = Field(
        default_factory=TufTrust,
        description="workers: the pinned TUF root and the aliases accepted on the registry's "
        "online key alone",
    )

    @model_validator(mode="after")
    def _evidence_has_workers(self) -> Policy:
        # Fail closed: evidence names only this policy's signers, and a gate that asks for
        # evidence nobody may give is refused here rather than never opening.
        known = set(self.signers.names())
        for i, name in enumerate(self.evidence.signers):
            if name not in known:
                raise ValueError(
                    f"evidence.signers[{i}]: {name!r} is not one of this policy's signers "
                    "(signers.keys/cas/identities)"
                )
        if self.evidence.names_nobody():
            for i, rule in enumerate(self.aliases):
                if rule.require_baseline or rule.replay is not None or rule.gates is not None:
                    wanted = (
                        "require_baseline"
                        if rule.require_baseline
                        else "replay"
                        if rule.replay is not None
                        else "gates"
                    )
                    raise ValueError(
                        f"aliases[{i}]: {wanted} needs evidence signed by serving workers, "
                        "and evidence names none: list them in evidence.roles, "
                        "evidence.principals or evidence.signers"
                    )
        return self

    @model_validator(mode="after")
    def _signers_can_meet_threshold(self) -> Policy:
        # Fail closed: a policy that trusts nobody, or can never meet its threshold, is an error.
        count = len(self.signers.names())
        if count == 0 and not self.trust_registered_signers:
            raise ValueError(
                "signers: no trusted signers; list signers.keys/cas/identities or set "
                "trust_registered_signers: true"
            )
        if not self.trust_registered_signers and self.threshold > count:
            raise ValueError(
                f"threshold: {self.threshold} exceeds the {count} trusted signer(s); "
                "it could never be met"
            )
        return self


def policy_json_schema() -> dict[str, Any]:
    """The JSON schema of the policy document (committed as policies/schema.json)."""
    schema = Policy.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "modelward policy v1"
    return schema


def policy_json_schema_text() -> str:
    return json.dumps(policy_json_schema(), indent=2, sort_keys=True) + "\n"
