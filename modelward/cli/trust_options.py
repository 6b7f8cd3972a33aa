"""The trust options, declared once for every command that verifies (docs/policy.md#trust-flags).

``pull``, ``boot``, ``replay``, ``verify``, ``baseline show`` and ``bundle verify`` take them
through one decorator, :func:`with_trust_options`: it puts the options on the command's
signature (Typer reads ``inspect.signature``) and hands the command one frozen
:class:`TrustOptions` in their place. ``TrustOptions.flags`` is what
``attest.policy.policy_from_flags`` reads; ``TrustOptions.alias_trust()`` is how the worker
resolves aliases (docs/tuf.md#workers).

Each option is declared here once, with its name, help, metavar and default; a command picks
the groups it takes, in the order its ``--help`` lists them:

- ``"signers"``: --policy, --public-key, --certificate-chain, --identity, --issuer,
  --sigstore-trust-root (who may vouch for a bundle);
- ``"aliases"``: --trust-root, --metadata-url, --online-alias, --unsigned-aliases (how aliases
  are resolved);
- ``"cache"``: --cache-dir (the worker's cache root);

and ``--json`` (the worker's JSON output) comes last unless ``json=False``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_type_hints

import typer

if TYPE_CHECKING:
    from modelward.attest.policy import TrustFlags
    from modelward.loader.tuf_resolve import AliasTrust

__all__ = ["CacheOpt", "OptionGroup", "TrustOptions", "with_trust_options"]

_PANEL = "Trust (docs/policy.md#trust-flags)"

# How a worker resolves aliases (docs/tuf.md#workers): pull, verify, boot, replay, baseline.
_TrustRootOpt = Annotated[
    Path | None,
    typer.Option(
        "--trust-root",
        metavar="FILE",
        help="The registry's TUF root.json to pin: aliases are resolved through its "
        "signed metadata (or the policy's tuf.root); digests need none",
    ),
]
_MetadataUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--metadata-url",
        metavar="URL",
        help="Read the TUF metadata from this mirror of the registry's /tuf/ first (or the "
        "policy's tuf.metadata_url); the registry when it cannot answer; verified from the "
        "pinned root (docs/tuf.md#mirrors)",
    ),
]
_OnlineAliasOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--online-alias",
        metavar="PATTERN",
        help="Accept aliases matching PATTERN signed only by the registry's online "
        "key (repeatable; none by default)",
    ),
]
_UnsignedAliasesOpt = Annotated[
    bool,
    typer.Option(
        "--unsigned-aliases",
        help="With no root (no --trust-root, none pinned in the cache): take the "
        "registry's word for which bundle an alias names (registries not migrated to TUF; "
        "warns every time); ignored, with a warning, once a root is given or pinned",
    ),
]
_PolicyOpt = Annotated[
    Path | None,
    typer.Option(
        "--policy",
        metavar="FILE",
        help="Trust policy YAML (alone: it names its own signers; docs/policy.md#trust-flags).",
        rich_help_panel=_PANEL,
    ),
]
_PublicKeyOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--public-key",
        metavar="PEM",
        help="Trusted public key file, PEM (repeatable; never the private key).",
        rich_help_panel=_PANEL,
    ),
]
_CertificateChainOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--certificate-chain",
        metavar="PEM",
        help="Trusted CA certificates file, PEM (repeatable).",
        rich_help_panel=_PANEL,
    ),
]
_IdentityOpt = Annotated[
    str | None,
    typer.Option(
        "--identity",
        metavar="ID",
        help="Trusted Sigstore certificate identity (with --issuer).",
        rich_help_panel=_PANEL,
    ),
]
_IssuerOpt = Annotated[
    str | None,
    typer.Option(
        "--issuer", metavar="URL", help="OIDC issuer URL of --identity.", rich_help_panel=_PANEL
    ),
]
_SigstoreTrustRootOpt = Annotated[
    Path | None,
    typer.Option(
        "--sigstore-trust-root",
        metavar="FILE",
        help="Sigstore trusted_root.json for --identity (default: public good).",
        rich_help_panel=_PANEL,
    ),
]


CacheOpt = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        metavar="DIR",
        help="Cache root (default $XDG_CACHE_HOME/modelward or ~/.cache/modelward)",
    ),
]
_JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print one JSON document on stdout (docs/loader.md#json-output); "
        "messages go to stderr",
    ),
]

OptionGroup = Literal["signers", "aliases", "cache"]

# parameter name -> (its option, its default); the parameter names are the command's
# keyword arguments, hidden from the command itself by with_trust_options
_OPTIONS: Mapping[str, tuple[Any, object]] = {
    "policy": (_PolicyOpt, None),
    "public_key": (_PublicKeyOpt, None),
    "certificate_chain": (_CertificateChainOpt, None),
    "identity": (_IdentityOpt, None),
    "issuer": (_IssuerOpt, None),
    "sigstore_trust_root": (_SigstoreTrustRootOpt, None),
    "trust_root": (_TrustRootOpt, None),
    "metadata_url": (_MetadataUrlOpt, None),
    "online_alias": (_OnlineAliasOpt, None),
    "unsigned_aliases": (_UnsignedAliasesOpt, False),
    "cache_dir": (CacheOpt, None),
    "json_output": (_JsonOpt, False),
}
_GROUPS: Mapping[OptionGroup, tuple[str, ...]] = {
    "signers": (
        "policy",
        "public_key",
        "certificate_chain",
        "identity",
        "issuer",
        "sigstore_trust_root",
    ),
    "aliases": ("trust_root", "metadata_url", "online_alias", "unsigned_aliases"),
    "cache": ("cache_dir",),
}
_PARAMETER = "trust"  # the command's parameter that receives the TrustOptions


@dataclass(frozen=True)
class TrustOptions:
    """What a verifying command was given: its trust flags (``attest.policy.TrustFlags``,
    what ``policy_from_flags`` reads), its cache root and ``--json``.

    An option the command does not take keeps its default here.
    """

    flags: TrustFlags
    cache_dir: Path | None = None
    json_output: bool = False

    @classmethod
    def from_options(cls, given: Mapping[str, Any]) -> TrustOptions:
        """The options as click parsed them, by parameter name (absent: the default)."""
        from modelward.attest.policy import TrustFlags  # at run time: --help stays light

        flags = TrustFlags(
            policy=given.get("policy"),
            public_keys=tuple(given.get("public_key") or ()),
            certificate_chains=tuple(given.get("certificate_chain") or ()),
            identity=given.get("identity"),
            issuer=given.get("issuer"),
            sigstore_trust_root=given.get("sigstore_trust_root"),
            tuf_root=given.get("trust_root"),
            online_aliases=tuple(given.get("online_alias") or ()),
            unsigned_aliases=bool(given.get("unsigned_aliases", False)),
            metadata_url=given.get("metadata_url"),
        )
        return cls(flags, given.get("cache_dir"), bool(given.get("json_output", False)))

    def alias_trust(self) -> AliasTrust:
        """How aliases are resolved, from --trust-root, --metadata-url, --online-alias,
        --unsigned-aliases."""
        from modelward.loader.tuf_resolve import AliasTrust

        return AliasTrust(
            root=self.flags.tuf_root,
            online_aliases=self.flags.online_aliases,
            unsigned=self.flags.unsigned_aliases,
            metadata_url=self.flags.metadata_url,
        )


def with_trust_options(
    *groups: OptionGroup, json: bool = True
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command the trust options of ``groups`` (and ``--json`` last, unless ``json`` is
    false), in place of its ``trust: TrustOptions`` parameter, which receives them as one.

    The options take the place of ``trust`` in the signature, group by group in the order
    given, so ``--help`` lists them there. Raises ``TypeError`` when the command has no
    ``trust`` parameter or already has a parameter of an option's name.
    """
    names = [name for group in groups for name in _GROUPS[group]]
    if json:
        names.append("json_output")

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(command)
        # the command's annotations as objects (its module may postpone them): Typer reads
        # the options from the signature we set, and takes it as it is
        hints = get_type_hints(command, localns={"TrustOptions": TrustOptions}, include_extras=True)
        if _PARAMETER not in signature.parameters:
            raise TypeError(f"{command.__qualname__} has no {_PARAMETER!r} parameter")
        clash = set(names) & set(signature.parameters)
        if clash:
            raise TypeError(f"{command.__qualname__} already has {sorted(clash)}")
        parameters: list[inspect.Parameter] = []
        for parameter in signature.parameters.values():
            if parameter.name != _PARAMETER:
                parameters.append(
                    parameter.replace(annotation=hints.get(parameter.name, parameter.annotation))
                )
                continue
            parameters += [
                inspect.Parameter(
                    name,
                    parameter.kind,
                    annotation=_OPTIONS[name][0],
                    default=_OPTIONS[name][1],
                )
                for name in names
                if name != "json_output"
            ]
        if json:
            parameters.append(
                inspect.Parameter(
                    "json_output",
                    inspect.Parameter.KEYWORD_ONLY,
                    annotation=_JsonOpt,
                    default=False,
                )
            )

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> None:
            given = {name: kwargs.pop(name) for name in names if name in kwargs}
            command(*args, **{_PARAMETER: TrustOptions.from_options(given)}, **kwargs)

        wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=parameters, return_annotation=None
        )
        wrapper.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
        return wrapper

    return decorate
