"""``modelward.yaml``: the bundle spec that pins every serving input (docs/bundle-format.md#spec).

``load_spec`` is the one reader. It bounds the size, parses with attest._yaml (no anchors or
aliases: no entity-expansion blow-up; no duplicate keys), and validates against
strict pydantic models that forbid unknown fields and type coercion. Every failure is a
``SpecError`` whose message names the source and the field, e.g.
``modelward.yaml: serving.dtype: must be one of auto, bfloat16, ...``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from modelward.attest._yaml import StrictYAMLError, load_strict_yaml
from modelward.attest.errors import BundleError

__all__ = [
    "MAX_SPEC_BYTES",
    "SERVING_DTYPES",
    "SPEC_FILENAME",
    "BundleSpec",
    "DriverSpec",
    "EngineSpec",
    "ServingSpec",
    "SpecError",
    "load_spec",
    "render_spec_template",
]

SPEC_FILENAME = "modelward.yaml"
MAX_SPEC_BYTES = 1 * 2**20
SERVING_DTYPES = ("auto", "bfloat16", "float", "float16", "float32", "half")
_MAX_PROBES = 1000
_MAX_PROBE_CHARS = 64 * 1024
_VERSION_RE = re.compile(r"[0-9]+(\.[0-9]+)*([a-z0-9.+-]*)")
_IMAGE_RE = re.compile(r"([a-z0-9][a-z0-9._:/-]*@)?sha256:[0-9a-f]{64}")


class SpecError(BundleError):
    """``modelward.yaml`` is unreadable or invalid; the message names the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class EngineSpec(_Strict):
    """The inference engine, pinned to one exact version."""

    name: str = "vllm"
    version: str

    @field_validator("version")
    @classmethod
    def _exact_version(cls, value: str) -> str:
        if _VERSION_RE.fullmatch(value) is None:
            raise ValueError(f"must be one exact version such as '0.32.0', got {value!r}")
        return value


class DriverSpec(_Strict):
    """Accelerator driver constraints; None means unconstrained."""

    cuda: str | None = None
    driver: str | None = None


class ServingSpec(_Strict):
    """Serving arguments handed to the engine."""

    dtype: str
    max_model_len: int | None = Field(default=None, gt=0)
    tensor_parallel_size: int = Field(default=1, ge=1)
    seed: int = Field(default=0, ge=0)
    generation_config: Literal["auto", "vllm"] = "auto"

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, value: str) -> str:
        if value not in SERVING_DTYPES:
            raise ValueError(f"must be one of {', '.join(SERVING_DTYPES)}, got {value!r}")
        return value


class BundleSpec(_Strict):
    """The whole ``modelward.yaml`` document."""

    version: Literal[1]
    engine: EngineSpec
    runtime_image: str | None = None
    drivers: DriverSpec = Field(default_factory=DriverSpec)
    serving: ServingSpec
    probes: list[str] | None = Field(default=None, max_length=_MAX_PROBES)

    @field_validator("version", mode="before")
    @classmethod
    def _not_bool(cls, value: object) -> object:
        if isinstance(value, bool):
            raise ValueError("must be 1")  # noqa: TRY004 - pydantic reports ValueError
        return value

    @field_validator("runtime_image")
    @classmethod
    def _image_digest(cls, value: str | None) -> str | None:
        if value is not None and _IMAGE_RE.fullmatch(value) is None:
            raise ValueError("must be an image digest 'sha256:<64 hex>' or 'ref@sha256:<64 hex>'")
        return value

    @field_validator("probes")
    @classmethod
    def _bounded_probes(cls, value: list[str] | None) -> list[str] | None:
        for i, probe in enumerate(value or []):
            if not probe or len(probe) > _MAX_PROBE_CHARS:
                raise ValueError(f"probe {i} must hold 1 to {_MAX_PROBE_CHARS} characters")
        return value


def load_spec(
    data: bytes, source: str = SPEC_FILENAME, *, max_bytes: int = MAX_SPEC_BYTES
) -> BundleSpec:
    """Parse and validate ``modelward.yaml`` bytes; raise ``SpecError`` naming the field."""
    # (1) bounded size, UTF-8 text
    if len(data) > max_bytes:
        raise SpecError(f"{source}: {len(data)} bytes exceeds limit of {max_bytes}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{source}: not valid UTF-8 (byte {exc.start})") from exc
    # (2) YAML without anchors, aliases or duplicate keys
    try:
        document = load_strict_yaml(text)
    except StrictYAMLError as exc:
        raise SpecError(f"{source}: invalid YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise SpecError(f"{source}: must be a mapping of fields, got {type(document).__name__}")
    # (3) the schema; every error names its field
    try:
        return BundleSpec.model_validate(document)
    except ValidationError as exc:
        lines = [f"{source}: {_loc(err['loc'])}: {_message(err)}" for err in exc.errors()]
        raise SpecError("\n".join(lines)) from None


def _loc(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else ("." if text else "") + str(part)
    return text or "(document)"


def _message(err: Any) -> str:
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ")


def render_spec_template(
    *,
    dtype: str = "auto",
    engine_version: str = "0.32.0",
    max_model_len: int | None = None,
    architecture: str | None = None,
) -> str:
    """A commented ``modelward.yaml`` that ``load_spec`` accepts.

    Raises ``ValueError`` if the values given would not make a valid spec.
    """
    if dtype not in SERVING_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(SERVING_DTYPES)}, got {dtype!r}")
    if _VERSION_RE.fullmatch(engine_version) is None:
        raise ValueError(f"engine_version must be one exact version, got {engine_version!r}")
    if max_model_len is not None and (type(max_model_len) is not int or max_model_len < 1):
        raise ValueError(f"max_model_len must be a positive int, got {max_model_len!r}")
    model_line = ""
    if architecture and re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", architecture):
        model_line = f"# Model architecture (from config.json): {architecture}\n"
    text = f"""\
# modelward.yaml: the bundle spec (docs/bundle-format.md#spec).
# Everything that can change model behaviour is pinned here and is part of the bundle
# digest: edit it, and the bundle is a different bundle.
{model_line}version: 1

engine:
  name: vllm
  version: "{engine_version}"        # one exact engine version, no ranges

# Runtime image digest: "sha256:<64 hex>" or "registry/repo@sha256:<64 hex>".
runtime_image: null

drivers:
  cuda: null                     # e.g. "12.4"; null = unconstrained
  driver: null                   # e.g. "550.54"; null = unconstrained

serving:
  dtype: {dtype}                 # one of: {", ".join(SERVING_DTYPES)}
  max_model_len: {"null" if max_model_len is None else max_model_len}
  tensor_parallel_size: 1
  seed: 0
  generation_config: auto        # "auto": the bundle's generation_config.json;
                                 # "vllm": the engine's defaults

# Determinism probes: prompts replayed to compare outputs between configurations.
probes: null
# probes:
#   - "The capital of France is"
"""
    try:
        load_spec(text.encode(), "template")
    except SpecError as exc:
        raise ValueError(str(exc)) from exc
    return text
