"""SLSA Provenance v1 predicates for bundle assembly (docs/attestations.md#provenance).

The predicate (https://slsa.dev/spec/v1.0/provenance) records how a bundle was made::

    buildDefinition:
      buildType: BUILD_TYPE
      externalParameters: {source: {uri, revision}, serving: {...modelward.yaml...}}
      internalParameters: {...}                          (optional)
      resolvedDependencies: [{uri, digest: {gitCommit | sha256}}]
    runDetails:
      builder: {id}
      metadata: {invocationId, startedOn, finishedOn}

A source is pinned: ``hf://`` and git sources need a full 40-hex commit (a branch or tag
name is never a pin). Base bundles are dependencies named by their manifest digest.

Raises:
    ValueError: an input that cannot make an honest predicate (the message names it).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import urlsplit

__all__ = [
    "BUILD_TYPE",
    "DEFAULT_BUILDER_ID",
    "BaseBundle",
    "make_provenance",
    "rfc3339",
]

BUILD_TYPE: Final = "https://modelward.dev/bundle-assembly/v1"
DEFAULT_BUILDER_ID: Final = "https://modelward.dev/builders/local/v1"

_COMMIT = re.compile(r"[0-9a-fA-F]{40}")
_SHA256_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


@dataclass(frozen=True)
class BaseBundle:
    """A bundle this one was built from: its reference and manifest digest."""

    uri: str
    digest: str  # "sha256:<64 hex>"


def rfc3339(moment: datetime) -> str:
    """``moment`` as RFC 3339 UTC with a ``Z`` suffix; refuses a naive datetime."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"timestamp {moment!r} has no timezone; pass an aware datetime")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _require_uri(value: str, what: str) -> str:
    parts = urlsplit(value)
    if (
        not parts.scheme
        or _SCHEME.fullmatch(parts.scheme) is None
        or not (parts.netloc or parts.path)
    ):
        raise ValueError(f"{what} must be an absolute URI (scheme:...), got {value!r}")
    if any(c.isspace() for c in value):
        raise ValueError(f"{what} must not contain whitespace, got {value!r}")
    return value


def _is_git_uri(uri: str) -> bool:
    scheme = urlsplit(uri).scheme.lower()
    return scheme == "git" or scheme.startswith("git+") or urlsplit(uri).path.endswith(".git")


def _source_digest(uri: str, revision: str) -> dict[str, str]:
    """The resolvedDependencies digest pinning ``uri`` at ``revision``."""
    if _COMMIT.fullmatch(revision):
        return {"gitCommit": revision.lower()}
    scheme = urlsplit(uri).scheme.lower()
    if scheme == "hf" or _is_git_uri(uri):
        raise ValueError(
            f"source revision for {uri} must be a full 40-hex commit id, got {revision!r} "
            "(resolve a branch or tag to its commit first)"
        )
    match = _SHA256_DIGEST.fullmatch(revision)
    if match is None:
        raise ValueError(
            f"source revision must be a 40-hex commit id or 'sha256:<64 hex>', got {revision!r}"
        )
    return {"sha256": match.group(1)}


def _check_hf_uri(uri: str) -> None:
    if urlsplit(uri).scheme.lower() == "hf":
        parts = urlsplit(uri)
        repo = (parts.netloc + parts.path).strip("/")
        if repo.count("/") > 1 or not repo:
            raise ValueError(f"hf source must look like hf://org/model, got {uri!r}")


def make_provenance(
    *,
    builder_id: str = DEFAULT_BUILDER_ID,
    started_on: datetime,
    finished_on: datetime,
    source_uri: str | None = None,
    source_revision: str | None = None,
    serving: Mapping[str, Any] | None = None,
    base_bundles: Sequence[BaseBundle] = (),
    internal_parameters: Mapping[str, Any] | None = None,
    invocation_id: str | None = None,
) -> dict[str, Any]:
    """A SLSA Provenance v1 predicate for assembling a bundle.

    ``serving`` is the bundle spec (modelward.yaml) as a dict; ``invocation_id`` defaults
    to a fresh UUID4. Raises ValueError naming the input at fault.
    """
    _require_uri(builder_id, "builder id")
    if (source_uri is None) != (source_revision is None):
        raise ValueError("source URI and source revision go together: give both or neither")
    started, finished = rfc3339(started_on), rfc3339(finished_on)
    if finished_on < started_on:
        raise ValueError(f"finishedOn {finished} is before startedOn {started}")

    external: dict[str, Any] = {}
    dependencies: list[dict[str, Any]] = []
    if source_uri is not None and source_revision is not None:
        _require_uri(source_uri, "source URI")
        _check_hf_uri(source_uri)
        digest = _source_digest(source_uri, source_revision)
        pinned = digest.get("gitCommit", source_revision)
        external["source"] = {"uri": source_uri, "revision": pinned}
        dependencies.append({"uri": source_uri, "digest": digest})
    if serving is not None:
        external["serving"] = dict(serving)
    for base in base_bundles:
        _require_uri(base.uri, "base bundle URI")
        match = _SHA256_DIGEST.fullmatch(base.digest)
        if match is None:
            raise ValueError(
                f"base bundle {base.uri} digest must be 'sha256:<64 hex>', got {base.digest!r}"
            )
        dependencies.append({"uri": base.uri, "digest": {"sha256": match.group(1)}})

    build_definition: dict[str, Any] = {
        "buildType": BUILD_TYPE,
        "externalParameters": external,
    }
    if internal_parameters:
        build_definition["internalParameters"] = dict(internal_parameters)
    if dependencies:
        build_definition["resolvedDependencies"] = dependencies
    invocation = invocation_id if invocation_id is not None else str(uuid.uuid4())
    if not invocation:
        raise ValueError("invocation id must be non-empty")
    return {
        "buildDefinition": build_definition,
        "runDetails": {
            "builder": {"id": builder_id},
            "metadata": {
                "invocationId": invocation,
                "startedOn": started,
                "finishedOn": finished,
            },
        },
    }
