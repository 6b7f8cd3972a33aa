"""The trust flags every command takes, and the one policy they mean (docs/policy.md#trust-flags).

``bundle verify``, ``pull``, ``boot``, ``replay`` and ``baseline`` all take the same flags:
``--policy FILE``, or any of ``--public-key PEM`` (repeatable), ``--certificate-chain PEM``
(repeatable) and ``--identity ID --issuer URL [--sigstore-trust-root FILE]``. Without
``--policy`` the flags stand for a policy with those signers, ``required_predicate_types: []``
(any statement those signers made about this very bundle vouches for it: SLSA provenance,
an OMS ``model.sig``, ...), and every other field at its documented default: threshold 1,
the default limits, a rejected attestation denies. The same flags therefore give the same
verdict in every command; a policy file is how to require particular evidence (provenance
only, builders, sources, a threshold above one).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from pydantic import ValidationError

from modelward.attest._fileio import read_bounded
from modelward.attest.errors import PolicyError
from modelward.attest.policy._load import load_policy, policy_trust_set
from modelward.attest.policy._model import CASigner, IdentitySigner, KeySigner, Policy, Signers
from modelward.attest.trust import TrustSet

__all__ = ["TrustFlags", "policy_from_flags"]

_MAX_FLAG_FILE_BYTES = 1 << 20
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._@:/+-]")


@dataclass(frozen=True)
class TrustFlags:
    """What the trust flags of a command said; nothing is read until policy_from_flags."""

    policy: Path | None = None
    public_keys: tuple[Path, ...] = ()
    certificate_chains: tuple[Path, ...] = ()
    identity: str | None = None
    issuer: str | None = None
    sigstore_trust_root: Path | None = None
    # how aliases are resolved (docs/tuf.md#workers): not signer flags, so not in given()
    tuf_root: Path | None = None
    online_aliases: tuple[str, ...] = ()
    unsigned_aliases: bool = False
    metadata_url: str | None = None  # a mirror of the registry's /tuf/ (docs/tuf.md#mirrors)

    def given(self) -> bool:
        return self.policy is not None or self._signer_flags()

    def _signer_flags(self) -> bool:
        return bool(
            self.public_keys
            or self.certificate_chains
            or self.identity is not None
            or self.issuer is not None
            or self.sigstore_trust_root is not None
        )


def _read(path: Path, flag: str) -> bytes:
    return read_bounded(path, _MAX_FLAG_FILE_BYTES, what=f"{flag} {path}", error=PolicyError)


def _unique_name(wanted: str, taken: set[str]) -> str:
    base = _NAME_UNSAFE.sub("_", wanted).lstrip("._@:/+-") or "signer"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}#{n}", n + 1
    taken.add(name)
    return name


def _key_signers(paths: Sequence[Path], taken: set[str]) -> list[KeySigner]:
    signers = []
    for path in paths:
        pem = _read(path, "--public-key")
        if b"PRIVATE KEY" in pem:
            raise PolicyError(
                f"--public-key {path}: this is a private key; pass its public half "
                f"(e.g. {path.name}.pub from `modelward key generate`)"
            )
        signers.append(
            KeySigner(name=_unique_name(path.name, taken), pem=pem.decode("ascii", "replace"))
        )
    return signers


def _ca_signer(paths: Sequence[Path], taken: set[str]) -> CASigner:
    certs: list[x509.Certificate] = []
    for path in paths:
        try:
            certs.extend(x509.load_pem_x509_certificates(_read(path, "--certificate-chain")))
        except ValueError as exc:
            raise PolicyError(f"--certificate-chain {path}: not PEM certificates: {exc}") from None
    roots = [c for c in certs if c.subject == c.issuer] or certs
    rest = [c for c in certs if c not in roots]

    def pem(cert: x509.Certificate) -> str:
        return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")

    return CASigner(
        name=_unique_name(paths[0].name, taken),
        roots=[pem(c) for c in roots],
        intermediates=[pem(c) for c in rest],
    )


class TrustFlagError(PolicyError):
    """The trust flags given cannot be used (none given, a combination that does not go, a
    file that cannot be read or does not hold what its flag says): input named on the
    command line (the CLI's usage exit code, docs/cli.md#exit-codes); names the flag."""


def policy_from_flags(flags: TrustFlags) -> tuple[Policy, TrustSet]:
    """The policy and trust set the flags mean; fails closed when no flag is given.

    Raises:
        TrustFlagError: no trust flag, ``--policy`` combined with signer flags,
            ``--identity`` without ``--issuer`` (or the reverse), a file that cannot be read
            or does not hold what its flag says; the message names the flag.
    """
    try:
        return _policy_from_flags(flags)
    except TrustFlagError:
        raise
    except PolicyError as exc:
        raise TrustFlagError(str(exc)) from None


def _policy_from_flags(flags: TrustFlags) -> tuple[Policy, TrustSet]:
    if flags.policy is not None:
        if flags._signer_flags():
            raise PolicyError(
                "--policy cannot be combined with --public-key, --certificate-chain or "
                "--identity/--issuer: the policy file names its own signers"
            )
        try:
            policy = load_policy(flags.policy)
        except PolicyError as exc:  # named by its flag and path, as every other flag's file
            said = str(exc).removeprefix(f"{flags.policy.name}: ")
            raise TrustFlagError(f"--policy {flags.policy}: {said}") from None
        return policy, policy_trust_set(policy, flags.policy.parent, source=flags.policy.name)
    if not flags.given():
        raise PolicyError(
            "no trust given: pass --policy FILE, --public-key PEM, --certificate-chain PEM or "
            "--identity ID --issuer URL (nothing is trusted by default)"
        )
    if (flags.identity is None) != (flags.issuer is None):
        raise PolicyError("--identity and --issuer go together")
    if flags.sigstore_trust_root is not None and flags.identity is None:
        raise PolicyError("--sigstore-trust-root needs --identity and --issuer")
    taken: set[str] = set()
    keys = _key_signers(flags.public_keys, taken)
    cas = [_ca_signer(flags.certificate_chains, taken)] if flags.certificate_chains else []
    identities = []
    if flags.identity is not None and flags.issuer is not None:
        root = flags.sigstore_trust_root
        if root is not None and not root.is_file():
            raise PolicyError(f"--sigstore-trust-root {root}: file not found")
        identities.append(
            IdentitySigner(
                name=_unique_name(flags.identity, taken),
                identity=flags.identity,
                issuer=flags.issuer,
                trust_root=str(root.resolve()) if root is not None else None,
            )
        )
    try:
        policy = Policy(
            version=1,
            signers=Signers(keys=keys, cas=cas, identities=identities),
            required_predicate_types=[],
        )
    except ValidationError as exc:
        raise PolicyError(f"trust flags: {exc.errors()[0]['msg']}") from None
    return policy, policy_trust_set(policy, source="trust flags")
