"""Building a release record: what the bundle pins, the gate decisions, the predicate from
the bytes the caller fetched, and the signed file (docs/release.md#the-format).

Every digest the predicate states is computed here from the bytes it embeds; nothing is
fetched (registry._client_release does that) and nothing is trusted (``verify_record``
checks the file).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

import rfc8785
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from tuf.api.metadata import Metadata, Root, Targets

from modelward.attest.dsse import sign_envelope
from modelward.attest.errors import AttestError
from modelward.attest.release._model import ATTESTATION_SECTIONS, PREDICATE_TYPE, blob, sha256
from modelward.attest.release._moves import signed_moves
from modelward.attest.release._rollouts import (
    build_rollouts,
    later_plans,
    next_digest,
    signed_plans,
)
from modelward.attest.statement import PredicateType, make_statement, strict_json_loads
from modelward.attest.tuf import alias_path

__all__ = [
    "build_predicate",
    "classify_files",
    "gate_decisions",
    "make_record_statement",
    "write_record",
]

# -- what the bundle pins ------------------------------------------------------------------
_TOKENIZER_NAMES = frozenset(
    {
        "tokenizer.json",
        "tokenizer_config.json",
        "tokenizer.model",
        "special_tokens_map.json",
        "added_tokens.json",
        "merges.txt",
        "vocab.json",
        "vocab.txt",
        "spiece.model",
    }
)
_QUANT_NAMES = frozenset(
    {
        "quantize_config.json",
        "quant_config.json",
        "quantization_config.json",
        "hf_quant_config.json",
    }
)


def _input_kind(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    lower = name.lower()
    if name == "modelward.yaml" and "/" not in path:
        return "spec"
    if lower.startswith("adapter_") or "/adapters/" in f"/{path}" or "lora" in lower:
        return "adapter"
    if "chat_template" in lower or lower.endswith(".jinja"):
        return "chat_template"
    if lower in _TOKENIZER_NAMES or lower.startswith("tokenizer"):
        return "tokenizer"
    if lower in _QUANT_NAMES:
        return "quantization"
    if lower.endswith((".safetensors", ".gguf")):
        return "weights"
    if lower == "generation_config.json":
        return "generation_config"
    if lower == "config.json":
        return "model_config"
    return "other"


def classify_files(layers: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each file of a manifest (``path``, ``media_type``, ``digest``, ``size``) with the
    serving input it pins (``input``): weights, tokenizer, chat_template, adapter,
    quantization, model_config, generation_config, spec or other."""
    return [{**dict(layer), "input": _input_kind(str(layer["path"]))} for layer in layers]


def _inputs(
    files: Sequence[Mapping[str, Any]],
    spec: Mapping[str, Any] | None,
    model_config: Mapping[str, Any] | None,
) -> dict[str, Any]:
    def paths(kind: str) -> list[str]:
        return [str(f["path"]) for f in files if f["input"] == kind]

    parsed = (spec or {}).get("parsed") or {}
    return {
        "weights": paths("weights"),
        "tokenizer": paths("tokenizer"),
        "chat_template": paths("chat_template"),
        "adapters": paths("adapter"),
        "quantization": {
            "method": (model_config or {}).get("quantization"),
            "files": paths("quantization"),
        },
        "runtime_image": parsed.get("runtime_image"),
        "engine": parsed.get("engine"),
        "drivers": parsed.get("drivers"),
        "serving_args": parsed.get("serving"),
    }


# -- gate decisions ------------------------------------------------------------------------
def gate_decisions(
    policy_text: str, alias: str, evaluations: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The alias rule of ``policy_text`` for ``alias`` and, when it has ``gates``, every
    gate's verdict for each evaluation predicate (``{"id", "predicate"}`` each), recomputed
    with attest.evaluation. A policy that does not parse is recorded as ``error``."""
    from modelward.attest.evaluation import EvaluationError, evaluate_gates, gate_decision
    from modelward.attest.policy import alias_rule_for, load_policy

    try:
        policy = load_policy(policy_text.encode("utf-8"), "policy in force")
    except AttestError as exc:
        return {"rule": None, "decisions": [], "error": str(exc)}
    rule = alias_rule_for(policy, alias)
    out: dict[str, Any] = {
        "rule": rule.model_dump(mode="json", exclude_none=True) if rule else None,
        "decisions": [],
        "error": None,
    }
    if rule is None or rule.gates is None:
        return out
    for item in evaluations:
        try:
            results = evaluate_gates(rule.gates, item["predicate"])
        except EvaluationError as exc:
            out["decisions"].append(
                {
                    "attestation": item["id"],
                    "verdict": "do not promote",
                    "gates": [],
                    "error": str(exc),
                }
            )
            continue
        decision = gate_decision(results)
        out["decisions"].append(
            {
                "attestation": item["id"],
                "verdict": decision.verdict,
                "gates": [r.to_json() for r in results],
                "error": None,
            }
        )
    return out


# -- the predicate -------------------------------------------------------------------------
def _attestation(item: Mapping[str, Any]) -> dict[str, Any]:
    data = base64.b64decode(str(item["data"]))
    return blob(
        data,
        id=item.get("id"),
        predicate_type=item.get("predicate_type"),
        kind=item.get("kind"),
        attached_by=item.get("attached_by"),
        attached_at=item.get("attached_at"),
    )


def _spec_entry(spec: bytes | None) -> dict[str, Any] | None:
    from modelward.attest.spec import SpecError, load_spec

    if spec is None:
        return None
    entry = blob(spec, path="modelward.yaml", text=spec.decode("utf-8", "replace"))
    try:
        entry["parsed"] = load_spec(spec).model_dump(mode="json")
        entry["error"] = None
    except SpecError as exc:
        entry["parsed"], entry["error"] = None, str(exc)
    return entry


def _sections(
    attestations: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """The listing's evaluation, baseline and replay envelopes by section, and each
    evaluation's predicate (read as listed, for ``gate_decisions``)."""
    sections: dict[str, list[dict[str, Any]]] = {s: [] for s in ATTESTATION_SECTIONS}
    by_type = {
        PredicateType.EVALUATION: "evaluations",
        PredicateType.BASELINE: "baselines",
        PredicateType.REPLAY: "replays",
    }
    evaluation_predicates = []
    for item in attestations:
        section = by_type.get(str(item.get("predicate_type")))
        if section is None:
            continue
        entry = _attestation(item)
        sections[section].append(entry)
        if section == "evaluations":
            predicate, keyids = _listed_predicate(base64.b64decode(entry["data"]))
            entry["signature_keyids"] = keyids
            if predicate is not None:
                evaluation_predicates.append({"id": entry["id"], "predicate": predicate})
    return sections, evaluation_predicates


def _listed_predicate(data: bytes) -> tuple[Any, list[str]]:
    """An evaluation envelope's predicate and its signatures' keyids, read as listed (not
    verified: the registry verified it when it was attached); (None, []) when malformed."""
    try:
        envelope = strict_json_loads(data, "evaluation envelope")
        statement = strict_json_loads(base64.b64decode(str(envelope["payload"])), "statement")
        keyids = [str(sig.get("keyid", "")) for sig in envelope["signatures"]]
        return statement["predicate"], keyids
    except (AttestError, ValueError, KeyError, TypeError, AttributeError):
        return None, []


def build_predicate(
    *,
    repository: str,
    alias: str,
    version: int,
    made_at: str,
    registry: str,
    manifest: bytes,
    config: bytes | None,
    spec: bytes | None,
    policy_text: str,
    attestations: Sequence[Mapping[str, Any]],
    roots: Sequence[bytes],
    targets: Sequence[bytes],
    role: str,
    role_versions: Sequence[bytes],
    history: Sequence[Mapping[str, Any]],
    approvals: Sequence[Mapping[str, Any]],
    audit_events: Sequence[Mapping[str, Any]],
    audit_checkpoint: Mapping[str, Any] | None,
    rollouts: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The release-record predicate from the bytes the caller fetched; every digest in it is
    computed here. ``version``: the alias's signed move (``attest.release.signed_moves`` of
    ``role_versions``, the alias's TUF role versions 1, 2, ... through the move after it or
    the current one); ``targets``: top-level targets versions delegating them;
    ``attestations``: the registry's listing entries (``data`` base64); ``history``: the
    registry's alias-history rows, kept only as unsigned context; ``rollouts``: for each
    rollout of the release (``signed_plans``) by rollout id, ``role_versions`` (the versions
    of ``ORG:NAME@=rollout`` that signed its steps, consecutive) and ``registry`` (its status
    from the registry, kept as unsigned context).

    Raises ValueError when ``version`` is not a move of ``role_versions`` to a bundle, or the
    manifest is not that bundle's."""
    from modelward.attest.manifest import parse_manifest

    parsed = parse_manifest(manifest)
    layers = [
        {"path": x.path, "media_type": x.media_type, "digest": x.digest, "size": x.size}
        for x in parsed.layers
    ]
    files = classify_files(layers)
    model_config: dict[str, Any] | None = None
    if config is not None:
        loaded = json.loads(config)
        model_config = loaded.get("config") if isinstance(loaded, dict) else None
    spec_entry = _spec_entry(spec)
    sections, evaluation_predicates = _sections(attestations)
    role_mds = [Metadata[Targets].from_bytes(data) for data in role_versions]
    moves = signed_moves(alias_path(repository, alias), role_mds)
    if not 1 <= version <= len(moves) or moves[version - 1]["to_digest"] != parsed.digest:
        raise ValueError(f"move {version} of {role} does not move the alias to {parsed.digest}")
    claimed = moves[version - 1 : version + 1]  # this move and the next (which ended it)
    context = _registry_rows(history, moves, version)
    rollback = next(
        (
            {
                "version": h["version"],
                "reason": h.get("reason"),
                "actor": h.get("actor"),
                "at": h.get("at"),
                "to_digest": h.get("to_digest"),
                "signed": False,
            }
            for h in context
            if h.get("rollback")
        ),
        None,
    )
    role_md = role_mds[claimed[0]["role_version"] - 1]
    return {
        "record": {
            "repository": repository,
            "alias": alias,
            "version": version,
            "digest": parsed.digest,
            "made_at": made_at,
            "registry": registry,
        },
        "bundle": {
            "manifest": blob(manifest, digest=parsed.digest),
            "config": None if config is None else blob(config, digest=parsed.config.digest),
            "files": files,
            "spec": spec_entry,
            "inputs": _inputs(files, spec_entry, model_config),
        },
        "policy": {"sha256": sha256(policy_text.encode("utf-8")), "text": policy_text},
        "gates": gate_decisions(policy_text, alias, evaluation_predicates),
        **sections,
        "approvals": {
            "role": role,
            "role_version": role_md.signed.version,
            "signatures": [
                {"keyid": k, "principal": _signer_of(k, audit_events)}
                for k in sorted(role_md.signatures)
            ],
            "registry": list(approvals),
        },
        "tuf": {
            "roots": [blob(r, version=Metadata[Root].from_bytes(r).signed.version) for r in roots],
            "targets": [
                blob(t, version=Metadata[Targets].from_bytes(t).signed.version) for t in targets
            ],
            "role": {"name": role, "version": role_md.signed.version},
            "role_versions": [
                blob(data, version=md.signed.version)
                for data, md in zip(role_versions, role_mds, strict=True)
            ],
        },
        "history": claimed,
        "registry_history": {"signed": False, "entries": context},
        "rollback": rollback,
        "audit": {"events": list(audit_events), "checkpoint": audit_checkpoint},
        "rollouts": build_rollouts(
            repository=repository,
            alias=alias,
            digest=parsed.digest,
            plans=signed_plans(repository, alias, role_mds, moves, version),
            fetched=rollouts or {},
        ),
        "later_rollouts": build_rollouts(
            repository=repository,
            alias=alias,
            digest=next_digest(moves, version),
            plans=later_plans(repository, alias, role_mds, moves, version),
            fetched=rollouts or {},
        ),
    }


def _signer_of(kid: str, events: Sequence[Mapping[str, Any]]) -> str | None:
    for event in events:
        if event.get("action") == "tuf.sign" and (event.get("details") or {}).get("keyid") == kid:
            return str(event.get("actor"))
    return None


def _registry_rows(
    history: Sequence[Mapping[str, Any]], moves: Sequence[Mapping[str, Any]], version: int
) -> list[dict[str, Any]]:
    """The registry's alias-history rows that appear to record signed moves ``version`` and
    the next (each move matched, in order, to the next row moving to its digest). Context
    only, the registry's word: who moved it, when, why, whether as a rollback."""
    rows = sorted((dict(h) for h in history), key=lambda h: int(h["version"]))
    found: list[dict[str, Any]] = []
    at = 0
    for move in moves[: version + 1]:
        while at < len(rows) and rows[at].get("to_digest") != move["to_digest"]:
            at += 1
        if at == len(rows):
            break
        if move["move"] >= version:
            found.append(rows[at])
        at += 1
    return found


# -- the file ------------------------------------------------------------------------------
def make_record_statement(predicate: Mapping[str, Any]) -> bytes:
    """The statement bytes: subject the bundle the record is about."""
    record = predicate["record"]
    return make_statement(
        str(record["repository"]), str(record["digest"]), PREDICATE_TYPE, predicate
    )


def write_record(statement: bytes, keys: Sequence[PrivateKeyTypes]) -> bytes:
    """The record file: the attest.dsse envelope over ``statement`` in canonical form (RFC
    8785 JSON and one newline), so that any byte changed anywhere in the file fails
    ``verify_record``. Raises what ``attest.dsse.sign_envelope`` raises."""
    return rfc8785.dumps(json.loads(sign_envelope(statement, keys))) + b"\n"
