"""The trust flags, declared once for every command that verifies (docs/policy.md#trust-flags).

``bundle verify``, ``pull``, ``boot``, ``replay`` and ``baseline show`` take exactly these;
``attest.policy.policy_from_flags`` turns them into the one policy they mean.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from modelward.attest.policy import TrustFlags

__all__ = [
    "CertificateChainOpt",
    "IdentityOpt",
    "IssuerOpt",
    "OnlineAliasOpt",
    "PolicyOpt",
    "PublicKeyOpt",
    "SigstoreTrustRootOpt",
    "TrustRootOpt",
    "UnsignedAliasesOpt",
    "trust_flags",
]

_PANEL = "Trust (docs/policy.md#trust-flags)"

# How a worker resolves aliases (docs/tuf.md#workers): pull, verify, boot, replay, baseline.
TrustRootOpt = Annotated[
    Path | None,
    typer.Option(
        "--trust-root",
        metavar="FILE",
        help="The registry's TUF root.json to pin: aliases are resolved through its "
        "signed metadata (or the policy's tuf.root); digests need none",
    ),
]
OnlineAliasOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--online-alias",
        metavar="PATTERN",
        help="Accept aliases matching PATTERN signed only by the registry's online "
        "key (repeatable; none by default)",
    ),
]
UnsignedAliasesOpt = Annotated[
    bool,
    typer.Option(
        "--unsigned-aliases",
        help="Without --trust-root: take the registry's word for which bundle an "
        "alias names (registries not migrated to TUF; warns every time)",
    ),
]
PolicyOpt = Annotated[
    Path | None,
    typer.Option(
        "--policy",
        metavar="FILE",
        help="Trust policy YAML (alone: it names its own signers; docs/policy.md#trust-flags).",
        rich_help_panel=_PANEL,
    ),
]
PublicKeyOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--public-key",
        metavar="PEM",
        help="Trusted public key file, PEM (repeatable; never the private key).",
        rich_help_panel=_PANEL,
    ),
]
CertificateChainOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--certificate-chain",
        metavar="PEM",
        help="Trusted CA certificates file, PEM (repeatable).",
        rich_help_panel=_PANEL,
    ),
]
IdentityOpt = Annotated[
    str | None,
    typer.Option(
        "--identity",
        metavar="ID",
        help="Trusted Sigstore certificate identity (with --issuer).",
        rich_help_panel=_PANEL,
    ),
]
IssuerOpt = Annotated[
    str | None,
    typer.Option(
        "--issuer", metavar="URL", help="OIDC issuer URL of --identity.", rich_help_panel=_PANEL
    ),
]
SigstoreTrustRootOpt = Annotated[
    Path | None,
    typer.Option(
        "--sigstore-trust-root",
        metavar="FILE",
        help="Sigstore trusted_root.json for --identity (default: public good).",
        rich_help_panel=_PANEL,
    ),
]


def trust_flags(
    policy: Path | None,
    *,
    public_key: list[Path] | None,
    certificate_chain: list[Path] | None,
    identity: str | None,
    issuer: str | None,
    sigstore_trust_root: Path | None,
    trust_root: Path | None = None,
    online_alias: list[str] | None = None,
    unsigned_aliases: bool = False,
) -> TrustFlags:
    """The flags as given; ``policy_from_flags`` checks and reads them."""
    from modelward.attest.policy import TrustFlags

    return TrustFlags(
        policy=policy,
        public_keys=tuple(public_key or ()),
        certificate_chains=tuple(certificate_chain or ()),
        identity=identity,
        issuer=issuer,
        sigstore_trust_root=sigstore_trust_root,
        tuf_root=trust_root,
        online_aliases=tuple(online_alias or ()),
        unsigned_aliases=unsigned_aliases,
    )
