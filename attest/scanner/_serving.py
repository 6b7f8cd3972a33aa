"""The serving configuration against the model's own (docs/scanner.md#serving-configuration).

``modelward.yaml`` pins how the engine serves the model; ``config.json`` and
``generation_config.json`` say what the model is. A spec the engine would refuse at boot is a
finding here, at ``bundle init``, ``bundle scan``, push (the registry's scan and push's local
preflight) and a worker's pull, instead of a ValueError from vLLM at ``boot``.

``check_serving`` takes the files' bytes (the caller reads them; nothing here does I/O) and
returns one ``scan.serving`` finding per refused field, each naming both sides, e.g.
``modelward.yaml serving.max_model_len 512 exceeds config.json max_position_embeddings 256``.
It runs, in order (the rules are vLLM's own, as of the pinned engine):

    (1) the spec parses (attest.spec.load_spec); without a spec there is nothing to check;
    (2) config.json is a JSON object (absent: the model checks (3)-(6) are skipped);
    (3) context length: ``serving.max_model_len`` within the length the model's config allows
        (the least of ``max_position_embeddings`` and its synonyms, or its
        ``model_max_length``; tokenizer_config.json's ``model_max_length`` when smaller; times
        a rope scaling factor; a larger ``model_max_length`` admits it, as vLLM does);
    (4) dtype: not ``float16`` for a model type vLLM refuses to run in float16;
    (5) tensor parallel size: divides the attention heads, and divides or is a multiple of
        the key/value heads;
    (6) tokenizer: a model config that names its architectures needs a tokenizer file;
    (7) generation config (``serving.generation_config: auto``): generation_config.json is a
        JSON object whose sampling keys (temperature, top_p, top_k, min_p,
        repetition_penalty, max_new_tokens) are values vLLM's sampling parameters accept.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterator, Mapping

from modelward.attest.scanner._model import Finding
from modelward.attest.spec import SPEC_FILENAME, BundleSpec, SpecError, load_spec

__all__ = ["MAX_MODEL_CONFIG_BYTES", "SERVING_FILES", "check_serving"]

CONFIG = "config.json"
GENERATION_CONFIG = "generation_config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
#: the files the check reads (at the bundle's root); a caller hands in their bytes
SERVING_FILES = (SPEC_FILENAME, CONFIG, GENERATION_CONFIG, TOKENIZER_CONFIG)
#: a model config larger than this is not read (a finding: it cannot be checked)
MAX_MODEL_CONFIG_BYTES = 16 * 2**20
RULE = "scan.serving"

# vLLM's _get_and_verify_max_len: every key that bounds the context, the least one wins
_MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
# rope kinds whose factor does not lengthen the stated context (vLLM's list)
_ROPE_UNSCALED = frozenset(
    {"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"}
)
# vLLM's _FLOAT16_NOT_SUPPORTED_MODELS: numerical instability in float16
_NO_FLOAT16 = frozenset({"gemma2", "gemma3", "gemma3_text", "glm4"})
_HEAD_KEYS = ("num_attention_heads", "n_head", "num_heads", "n_heads")
_KV_HEAD_KEYS = (
    "n_head_kv",
    "num_kv_heads",
    "num_key_value_heads",
    "multi_query_group_num",
    "num_attention_groups",
)
# sampling defaults vLLM takes from generation_config.json: (low, high, what is accepted);
# a bound in a list is inclusive, in a tuple exclusive
_SAMPLING_RANGES: dict[str, tuple[tuple[float] | list[float], list[float] | None, str]] = {
    "temperature": ([0.0], None, "a number >= 0"),
    "top_p": ((0.0,), [1.0], "a number in (0, 1]"),
    "min_p": ([0.0], [1.0], "a number in [0, 1]"),
    "repetition_penalty": ((0.0,), None, "a number > 0"),
}
_TOKENIZER_FILES = frozenset(
    {
        "tokenizer.json",
        "tokenizer.model",
        "spiece.model",
        "sentencepiece.bpe.model",
        "vocab.json",
        "vocab.txt",
        "tekken.json",
    }
)


def check_serving(files: Mapping[str, bytes], paths: Collection[str]) -> tuple[Finding, ...]:
    """Findings (rule ``scan.serving``, on ``modelward.yaml``) for every serving field the
    model's own configuration refuses; empty when there is no spec or nothing is refused.

    ``files`` maps the names in ``SERVING_FILES`` present in the bundle to their bytes;
    ``paths`` are every file path of the bundle (for the tokenizer). Never raises for bad
    input: unreadable bytes are findings too.
    """
    data = files.get(SPEC_FILENAME)
    if data is None:
        return ()
    # (1): the spec parses
    try:
        spec = load_spec(data)
    except SpecError as exc:
        return tuple(_finding(line) for line in str(exc).splitlines())
    # (2): config.json is a JSON object
    model: dict[str, object] | None = None
    if CONFIG in files:
        model = _json_object(files[CONFIG])
        if model is None:
            what = (
                f"larger than {MAX_MODEL_CONFIG_BYTES} bytes"
                if len(files[CONFIG]) > MAX_MODEL_CONFIG_BYTES
                else "not a JSON object"
            )
            return (_finding(f"{CONFIG} is {what}: the serving configuration cannot be "
                             "checked against it"),)  # fmt: skip
    reasons: list[str] = []
    if model is not None:
        text = _text_config(model)
        tokenizer = _json_object(files[TOKENIZER_CONFIG]) if TOKENIZER_CONFIG in files else None
        reasons += _context_length(spec, model, text, tokenizer)  # (3)
        reasons += _dtype(spec, model, text)  # (4)
        reasons += _tensor_parallel(spec, text)  # (5)
        reasons += _tokenizer(model, paths)  # (6)
    reasons += _generation_config(spec, files.get(GENERATION_CONFIG))  # (7)
    return tuple(_finding(reason) for reason in reasons)


def _finding(reason: str) -> Finding:
    return Finding(SPEC_FILENAME, RULE, reason)


def _json_object(data: bytes) -> dict[str, object] | None:
    if len(data) > MAX_MODEL_CONFIG_BYTES:
        return None
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _text_config(model: dict[str, object]) -> dict[str, object]:
    """The language model's part of the config (a multimodal model nests it)."""
    nested = model.get("text_config")
    return nested if isinstance(nested, dict) else model


def _int(value: object) -> int | None:
    return value if type(value) is int else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _show(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)


def _context_length(
    spec: BundleSpec,
    model: dict[str, object],
    text: dict[str, object],
    tokenizer_config: dict[str, object] | None,
) -> Iterator[str]:
    """vLLM's ``_get_and_verify_max_len``, for a ``max_model_len`` the spec sets."""
    wanted = spec.serving.max_model_len
    if wanted is None:
        return
    derived, described = math.inf, ""
    for key in _MAX_LEN_KEYS:  # the least of the keys the model's config sets
        value = _number(text.get(key))
        if value is not None and value < derived:
            derived, described = value, f"{CONFIG} {key} {_show(value)}"
    override = _number(text.get("model_max_length"))  # Command-R: it decides when set
    if override:
        derived, described = override, f"{CONFIG} model_max_length {_show(override)}"
    bound = _number((tokenizer_config or {}).get("model_max_length"))
    if bound is not None and bound < derived:
        derived, described = bound, f"{TOKENIZER_CONFIG} model_max_length {_show(bound)}"
    if derived == math.inf:
        return  # the model states no length: vLLM takes the spec's
    factor = _rope_factor(model)
    if factor != 1.0:
        derived *= factor
        described += f" x rope scaling factor {_show(factor)}"
    allowed = _number(model.get("model_max_length"))
    if wanted > derived and (allowed is None or wanted > allowed):
        yield f"{SPEC_FILENAME} serving.max_model_len {wanted} exceeds {described}"


def _rope_factor(model: dict[str, object]) -> float:
    """The factor rope scaling lengthens the context by (1.0: none, or a kind whose length
    is already stated scaled: su, longrope, llama3, the YaRN family)."""
    params = model.get("rope_parameters") or model.get("rope_scaling")
    if not isinstance(params, dict) or not params or "gemma3" in str(model.get("model_type")):
        return 1.0
    layers = (
        list(params.values()) if all(isinstance(v, dict) for v in params.values()) else [params]
    )
    factor = 1.0
    for layer in layers:
        kind = layer.get("rope_type", layer.get("type"))
        if kind not in _ROPE_UNSCALED:
            factor = _number(layer.get("factor")) or factor
    return factor


def _dtype(spec: BundleSpec, model: dict[str, object], text: dict[str, object]) -> Iterator[str]:
    dtype = spec.serving.dtype
    model_type = text.get("model_type", model.get("model_type"))
    if dtype in ("float16", "half") and model_type in _NO_FLOAT16:
        yield (
            f"{SPEC_FILENAME} serving.dtype {dtype}: {CONFIG} model_type {model_type} does not "
            "run in float16 (vLLM refuses it: numerical instability); use bfloat16 or float32"
        )


def _first_int(text: dict[str, object], keys: tuple[str, ...]) -> tuple[str, int] | None:
    for key in keys:
        value = _int(text.get(key))
        if value is not None and value > 0:
            return key, value
    return None


def _tensor_parallel(spec: BundleSpec, text: dict[str, object]) -> Iterator[str]:
    size = spec.serving.tensor_parallel_size
    field = f"{SPEC_FILENAME} serving.tensor_parallel_size {size}"
    heads = _first_int(text, _HEAD_KEYS)
    if heads is not None and heads[1] % size:
        yield f"{field} does not divide {CONFIG} {heads[0]} {heads[1]}"
    kv = _first_int(text, _KV_HEAD_KEYS)
    if kv is not None and (kv[1] % size if kv[1] >= size else size % kv[1]):
        yield (
            f"{field} neither divides nor is a multiple of {CONFIG} {kv[0]} {kv[1]} "
            "(key/value heads are split or replicated across the shards)"
        )


def _tokenizer(model: dict[str, object], paths: Collection[str]) -> Iterator[str]:
    if not isinstance(model.get("architectures"), list):
        return  # not a model config vLLM loads by itself; nothing says a tokenizer is needed
    root = {p for p in paths if "/" not in p}
    if root & _TOKENIZER_FILES or any(p.endswith(".tiktoken") for p in root):
        return
    yield (
        f"{SPEC_FILENAME}: the model has no tokenizer file ({', '.join(sorted(_TOKENIZER_FILES))}"
        " or *.tiktoken at the bundle's root); vLLM cannot serve it"
    )


def _within(value: float, low: tuple[float] | list[float], high: list[float] | None) -> bool:
    above = value >= low[0] if isinstance(low, list) else value > low[0]
    return above and (high is None or value <= high[0])


def _generation_config(spec: BundleSpec, data: bytes | None) -> Iterator[str]:
    if data is None or spec.serving.generation_config != "auto":
        return
    where = f"{SPEC_FILENAME} serving.generation_config auto"
    document = _json_object(data)
    if document is None:
        yield f"{where}: {GENERATION_CONFIG} is not a JSON object"
        return
    # what vLLM's SamplingParams accepts for the defaults it takes from the file
    for key, (low, high, needs) in _SAMPLING_RANGES.items():
        if document.get(key) is not None:
            number = _number(document[key])
            if number is None or not _within(number, low, high):
                yield f"{where}: {GENERATION_CONFIG} {key} {document[key]!r} must be {needs}"
    for key, least in (("top_k", -1), ("max_new_tokens", 1)):
        if key in document and document[key] is not None:
            value = _int(document[key])
            if value is None or value < least:
                yield (
                    f"{where}: {GENERATION_CONFIG} {key} {document[key]!r} must be an integer "
                    f">= {least}"
                )
