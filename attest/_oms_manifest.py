"""OMS predicates → the signed items, and those items checked against a model directory.

The in-toto statement inside an OMS signature lists what was signed. Forms understood:

- v1.0 (``https://model_signing/signature/v1.0``): ``predicate.resources`` is a list of
  ``{name, algorithm, digest}`` and ``predicate.serialization`` says how they were made:
  ``method`` ``files`` (one item per file; algorithm = ``hash_type``) or ``shards`` (items
  named ``path:start:end`` over ``shard_size``-byte slices; algorithm =
  ``<hash_type>-sharded-<shard_size>``). The one subject's sha256 is SHA-256 over the
  concatenated raw resource digests, in listed order.
- v0.2 (model_signing 0.2): ``https://model_signing/Digests/v0.1`` and ``.../ShardDigests/v0.1``
  list each file or shard as a subject (digest under ``sha256``, the real algorithm in
  ``annotations.actual_hash_algorithm``, e.g. ``file-sha256`` or ``file-sha256-<shard>``);
  ``.../DigestOfDigests/v0.1`` and ``.../DigestOfShardDigests/v0.1`` list them in
  ``predicate.files`` / ``predicate.shards`` under a digest-of-digests subject.

Hashes: sha256 and blake2b (512-bit). Anything else fails closed. The signature's own
``ignore_paths`` are informational: only the verifier's ignore list excuses files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

from modelward.attest.errors import VerificationError
from modelward.attest.tree import BundleFile, check_relpath
from modelward.attest.trust import Subject

PREDICATE_V1: Final = "https://model_signing/signature/v1.0"
PREDICATE_DIGESTS: Final = "https://model_signing/Digests/v0.1"
PREDICATE_SHARD_DIGESTS: Final = "https://model_signing/ShardDigests/v0.1"
PREDICATE_DIGEST_OF_DIGESTS: Final = "https://model_signing/DigestOfDigests/v0.1"
PREDICATE_DIGEST_OF_SHARDS: Final = "https://model_signing/DigestOfShardDigests/v0.1"
OMS_PREDICATES: Final = (
    PREDICATE_V1,
    PREDICATE_DIGESTS,
    PREDICATE_SHARD_DIGESTS,
    PREDICATE_DIGEST_OF_DIGESTS,
    PREDICATE_DIGEST_OF_SHARDS,
)
_HASHES: Final[Mapping[str, Callable[[], Any]]] = {
    "sha256": hashlib.sha256,
    "blake2b": hashlib.blake2b,
}
_BUFFER: Final = 2**20


@dataclass(frozen=True)
class Item:
    """One signed item: a whole file (``shard is None``) or the slice ``[start, end)``."""

    path: str
    hash_name: str
    digest: bytes
    shard: tuple[int, int] | None = None
    shard_size: int | None = None


@dataclass(frozen=True)
class Signed:
    """What an OMS statement signs: its items, and the shard size when sharded."""

    items: tuple[Item, ...]
    shard_size: int | None


def parse_algorithm(text: Any, where: str) -> tuple[str, int | None]:
    """``sha256``, ``blake2b``, ``<h>-sharded-<n>``, ``file-<h>``, ``file-<h>-<n>`` → (h, n)."""
    if not isinstance(text, str):
        raise VerificationError(f"{where}: algorithm must be a string")
    name, shard = text.removeprefix("file-"), None
    if "-sharded-" in name:
        name, _, size = name.partition("-sharded-")
        shard = size
    elif text.startswith("file-") and "-" in name:
        name, _, shard = name.partition("-")
    if name == "blake2":
        name = "blake2b"
    if name not in _HASHES:
        raise VerificationError(f"{where}: unsupported hash algorithm {text!r}")
    if shard is None:
        return name, None
    if not shard.isdigit() or int(shard) <= 0:
        raise VerificationError(f"{where}: bad shard size in algorithm {text!r}")
    return name, int(shard)


def _item(name: Any, algorithm: Any, digest_hex: Any, where: str, sharded: bool) -> Item:
    hash_name, shard_size = parse_algorithm(algorithm, where)
    if not isinstance(digest_hex, str):
        raise VerificationError(f"{where}: digest must be a hex string")
    try:
        digest = bytes.fromhex(digest_hex)
    except ValueError:
        raise VerificationError(f"{where}: digest is not hex") from None
    if len(digest) != _HASHES[hash_name]().digest_size:
        raise VerificationError(f"{where}: digest length does not fit {hash_name}")
    if not isinstance(name, str):
        raise VerificationError(f"{where}: name must be a string")
    shard: tuple[int, int] | None = None
    path = name
    if sharded:
        path, sep1, start = name.rpartition(":")
        path, sep2, end_start = path.rpartition(":")
        if not (sep1 and sep2 and start.isdigit() and end_start.isdigit()):
            raise VerificationError(f"{where}: shard name {name!r} is not path:start:end")
        shard = (int(end_start), int(start))
        if shard[0] >= shard[1] or shard_size is None or shard[1] - shard[0] > shard_size:
            raise VerificationError(f"{where}: shard {name!r} does not fit its shard size")
    elif shard_size is not None:
        raise VerificationError(f"{where}: a sharded algorithm on a whole-file item")
    problem = check_relpath(path)
    if problem is not None:
        raise VerificationError(f"{where}: unsafe resource path {path!r}: {problem.reason}")
    return Item(path, hash_name, digest, shard, shard_size)


def _root_digest(items: Sequence[Item], subjects: Sequence[Subject]) -> None:
    """The one subject's sha256 is SHA-256 over the items' digests in listed order."""
    if len(subjects) != 1:
        raise VerificationError(f"OMS statement must have one subject, has {len(subjects)}")
    expected = subjects[0].digest.get("sha256")
    actual = hashlib.sha256(b"".join(i.digest for i in items)).hexdigest()
    if expected != actual:
        raise VerificationError(
            f"OMS statement is inconsistent: subject digest {expected} but its resources "
            f"hash to {actual}"
        )


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise VerificationError(f"{where} must be a list")
    return value


def _dict(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise VerificationError(f"{where} must be an object")
    return value


def _positive_int(value: Any) -> int:
    # protobuf Struct numbers are doubles: model_signing writes shard_size as 1024.0.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise VerificationError("predicate.serialization.shard_size must be a positive integer")
    return value


def _v1(predicate: Mapping[str, Any], subjects: Sequence[Subject]) -> Signed:
    serialization = _dict(predicate.get("serialization"), "predicate.serialization")
    method = serialization.get("method")
    hash_name, _ = parse_algorithm(serialization.get("hash_type"), "serialization.hash_type")
    if method == "files":
        sharded, shard_size, expect = False, None, hash_name
    elif method == "shards":
        shard_size = _positive_int(serialization.get("shard_size"))
        sharded, expect = True, f"{hash_name}-sharded-{shard_size}"
    else:
        raise VerificationError(f"unknown OMS serialization method {method!r}")
    items: list[Item] = []
    for i, raw in enumerate(_list(predicate.get("resources"), "predicate.resources")):
        where = f"predicate.resources[{i}]"
        resource = _dict(raw, where)
        algorithm = resource.get("algorithm")
        if parse_algorithm(algorithm, where) != parse_algorithm(expect, "serialization"):
            raise VerificationError(f"{where}: algorithm {algorithm!r} is not {expect!r}")
        items.append(_item(resource.get("name"), algorithm, resource.get("digest"), where, sharded))
    _root_digest(items, subjects)
    if _one_shard_size(items) != shard_size:
        raise VerificationError("predicate.resources do not use the declared shard size")
    return Signed(tuple(items), shard_size)


def _v02(
    predicate_type: str,
    predicate: Mapping[str, Any],
    statement: Mapping[str, Any],
    subjects: Sequence[Subject],
) -> Signed:
    sharded = predicate_type in (PREDICATE_SHARD_DIGESTS, PREDICATE_DIGEST_OF_SHARDS)
    items: list[Item] = []
    if predicate_type in (PREDICATE_DIGESTS, PREDICATE_SHARD_DIGESTS):
        for i, raw in enumerate(_list(statement.get("subject"), "subject")):
            where = f"subject[{i}]"
            subject = _dict(raw, where)
            annotations = subject.get("annotations") or {}
            algorithm = _dict(annotations, f"{where}.annotations").get(
                "actual_hash_algorithm", "sha256"
            )
            digest = _dict(subject.get("digest"), f"{where}.digest").get("sha256")
            items.append(_item(subject.get("name"), algorithm, digest, where, sharded))
    else:
        key = "shards" if sharded else "files"
        for i, raw in enumerate(_list(predicate.get(key), f"predicate.{key}")):
            where = f"predicate.{key}[{i}]"
            entry = _dict(raw, where)
            name, algorithm, digest = entry.get("name"), entry.get("algorithm"), entry.get("digest")
            items.append(_item(name, algorithm, digest, where, sharded))
        _root_digest(items, subjects)
    return Signed(tuple(items), _one_shard_size(items))


def _one_shard_size(items: Sequence[Item]) -> int | None:
    sizes = {i.shard_size for i in items}
    if len(sizes) > 1:
        raise VerificationError("OMS statement mixes shard sizes or whole files and shards")
    return next(iter(sizes), None)


def signed_items(
    predicate_type: str, statement: Mapping[str, Any], subjects: Sequence[Subject]
) -> Signed:
    """(5): the items an OMS statement signs; VerificationError if malformed or ambiguous."""
    predicate = _dict(statement.get("predicate"), "predicate")
    if predicate_type == PREDICATE_V1:
        signed = _v1(predicate, subjects)
    elif predicate_type in OMS_PREDICATES:
        signed = _v02(predicate_type, predicate, statement, subjects)
    else:
        raise VerificationError(
            f"predicate type {predicate_type!r} is no OpenSSF model signing predicate "
            f"({', '.join(OMS_PREDICATES)})"
        )
    seen: set[tuple[str, tuple[int, int] | None]] = set()
    for item in signed.items:
        key = (item.path, item.shard)
        if key in seen:
            raise VerificationError(f"OMS statement lists {item.path!r} twice")
        seen.add(key)
    if not signed.items:
        raise VerificationError("OMS statement signs no files")
    return signed


def _hash(stream: BinaryIO, hash_name: str, length: int | None) -> bytes:
    hasher = _HASHES[hash_name]()
    remaining = length
    while remaining is None or remaining > 0:
        size = _BUFFER if remaining is None else min(_BUFFER, remaining)
        chunk = stream.read(size)
        if not chunk:
            break
        hasher.update(chunk)
        if remaining is not None:
            remaining -= len(chunk)
    digest: bytes = hasher.digest()
    return digest


def file_digest(path: Path, hash_name: str) -> bytes:
    with path.open("rb") as stream:
        return _hash(stream, hash_name, None)


def _shards_match(file: BundleFile, items: Sequence[Item], shard_size: int) -> bool:
    """A sharded file matches if its shards are exactly the expected slices, each digest equal."""
    expected = [(s, min(s + shard_size, file.size)) for s in range(0, file.size, shard_size)]
    if sorted(i.shard for i in items if i.shard is not None) != expected:
        return False
    with file.abspath.open("rb") as stream:
        for item in items:
            if item.shard is None:
                return False
            start, end = item.shard
            stream.seek(start)
            if _hash(stream, item.hash_name, end - start) != item.digest:
                return False
    return True


def compare(signed: Signed, files: Sequence[BundleFile]) -> tuple[list[str], list[str], list[str]]:
    """(6): (missing, extra, mismatched) paths of the tree ``files`` against ``signed``.

    ``files`` is the model as walked, ignored paths already left out (never walked): a
    signed item there is missing, as in model_signing. Zero-byte files have no shards, so
    in a sharded signature they are never extra here (model_signing's rule); they are still
    unsigned, so ``attest.oms.require_signs_bundle`` refuses to bind such a signature to a
    bundle.
    """
    by_path: dict[str, list[Item]] = {}
    for item in signed.items:
        by_path.setdefault(item.path, []).append(item)
    present = {f.path: f for f in files}
    missing = sorted(p for p in by_path if p not in present)
    mismatched: list[str] = []
    for path, items in sorted(by_path.items()):
        file = present.get(path)
        if file is None:
            continue
        if signed.shard_size is None or items[0].shard is None:
            ok = file_digest(file.abspath, items[0].hash_name) == items[0].digest
        else:
            ok = _shards_match(file, items, signed.shard_size)
        if not ok:
            mismatched.append(path)
    extra = sorted(
        f.path
        for f in files
        if f.path not in by_path and not (signed.shard_size is not None and f.size == 0)
    )
    return missing, extra, mismatched


__all__ = [
    "OMS_PREDICATES",
    "PREDICATE_V1",
    "Item",
    "Signed",
    "compare",
    "file_digest",
    "parse_algorithm",
    "signed_items",
]
