"""The ``modelward`` command, wired in one place: the table below.

This package is the command-line wing: the only code that imports Typer. Its modules call the
server (``modelward.registry``), the worker (``modelward.loader``), the HTTP client
(``modelward.client``) and the pure library (``modelward.attest``); nothing below imports it.
The table names where each command lives; a command's module is imported only when that
command runs (``modelward.cli._lazy``), so ``--help`` and the light commands start fast.
``tests/packaging/test_cli_table.py`` imports every entry: a broken import fails CI, never a
command group that silently vanishes.
"""

from __future__ import annotations

import logging
import os
import sys

# Plain (click) help: it honours metavars and starts without importing rich's renderer.
os.environ.setdefault("TYPER_USE_RICH", "0")

from typing import Annotated, Any

import typer

from modelward.cli._lazy import Entry, LazyGroup

__all__ = ["COMMANDS", "app", "is_modelward_error", "main"]

_SERVER = "modelward.cli.server"
_LOADER = "modelward.cli.worker"
_ATTEST = "modelward.cli"
_LISTING = "modelward.cli.listing"
_TRUST = "modelward.cli.trust"

COMMANDS: dict[str, Entry] = {
    "serve": Entry("Run the registry server.", f"{_SERVER}:serve"),
    "login": Entry(
        "Save URL and token to the per-user config file (mode 0600).", "modelward.cli.publish:login"
    ),
    "push": Entry(
        "Upload missing blobs, then the manifest and attestations, then move the alias.",
        "modelward.cli.publish:push",
    ),
    "approve": Entry(
        "Approve a bundle for a protected alias (reviewers; not the publisher), or withdraw "
        "your own approval with --withdraw --reason: it no longer counts.",
        "modelward.cli.bundles:approve",
    ),
    "quarantine": Entry(
        "Quarantine a bundle (quarantine [set] REF --reason), or lift a quarantine.",
        "modelward.cli.bundles:quarantine_app",
    ),
    "pull": Entry(
        "Pull, verify locally and materialize a bundle read-only; print digest and directory.",
        f"{_LOADER}:pull",
    ),
    "verify": Entry(
        "Re-hash a materialized bundle against its manifest (catches a flipped byte).",
        f"{_LOADER}:verify",
    ),
    "boot": Entry(
        "Pull, verify and boot a bundle with its pinned, hardened vLLM configuration.",
        f"{_LOADER}:boot",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    ),
    "replay": Entry(
        "Replay requests N times: consecutive matches, divergences, unique completions.",
        "modelward.cli.replay:replay",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    ),
    "bundle": Entry(
        "Build, inspect, scan, sign and verify model bundles.",
        children={
            "digest": Entry(
                "Print the bundle digest (sha256 of the canonical manifest) and nothing else.",
                f"{_ATTEST}.bundle_build:digest_command",
            ),
            "manifest": Entry(
                "Print the exact manifest bytes (canonical JSON) of the bundle.",
                f"{_ATTEST}.bundle_build:manifest_command",
            ),
            "init": Entry(
                "Write a commented modelward.yaml for the model in DIR.",
                f"{_ATTEST}.bundle_build:init_command",
            ),
            "import-hf": Entry(
                "Import a Hugging Face model at a pinned commit, safe formats only.",
                f"{_ATTEST}.bundle_import:import_hf",
            ),
            "scan": Entry(
                "Classify every file by content; refuse anything not known to be safe.",
                f"{_ATTEST}.bundle_scan:scan",
            ),
            "sign": Entry(
                "Sign DIR: SLSA provenance for its bundle digest (DSSE), or an OMS model.sig.",
                f"{_ATTEST}.bundle_sign:sign",
            ),
            "verify": Entry(
                "Verify signatures over a bundle directory against a policy or trusted signers.",
                f"{_ATTEST}.bundle_verify:verify",
            ),
            "show": Entry(
                "Show a bundle: digest, quarantine/tombstone state, manifest, attestations.",
                "modelward.cli.bundles:bundle_show",
            ),
            "diff": Entry(
                "Compare two bundles: files added, removed and changed; text diffs of config, "
                "generation and tokenizer config, chat template and modelward.yaml.",
                "modelward.cli.bundle_diff:bundle_diff",
            ),
            "list": Entry(
                "List a repository's bundles, newest first: digest, state (live, quarantined, "
                "tombstoned) and the aliases pointing at each.",
                f"{_LISTING}:bundle_list",
            ),
            "delete": Entry(
                "Delete (tombstone) a bundle (admins; with a reason, audited).",
                "modelward.cli.bundles:bundle_delete",
            ),
            "export": Entry(
                "Write a bundle and its attestations (as referrers) into an OCI image layout.",
                "modelward.cli.oci:bundle_export",
            ),
            "import": Entry(
                "Push a bundle and its attestations from an OCI image layout into a repository.",
                "modelward.cli.oci:bundle_import",
            ),
        },
    ),
    "key": Entry(
        "Generate and manage signing keys.",
        children={
            "generate": Entry(
                "Generate a signing key pair: PKCS#8 private key and SubjectPublicKeyInfo "
                "public key.",
                f"{_ATTEST}.keys:generate",
            ),
            "register": Entry(
                "Register a signing public key for yourself (or, as admin, for a principal).",
                "modelward.cli.registry_keys:key_register",
            ),
            "list": Entry("List registered signing keys.", "modelward.cli.registry_keys:key_list"),
            "revoke": Entry(
                "Revoke a registered signing key.", "modelward.cli.registry_keys:key_revoke"
            ),
        },
    ),
    "db": Entry("Database schema migrations.", f"{_SERVER}:db_app"),
    "admin": Entry(
        "Principals and API tokens: over the API with the logged-in admin token, or straight "
        "on the database with --data-dir / --database-url / --config (bootstrap, recovery).",
        children={
            "principal": Entry("Principals.", "modelward.cli.principals:principal_app"),
            "token": Entry("API tokens.", "modelward.cli.principals:token_app"),
            "gc": Entry(
                "Collect unreferenced blobs and abandoned uploads older than the GC window "
                "(admins).",
                "modelward.cli.garbage:gc",
            ),
            "backup": Entry(
                "Back up the registry while it serves: database snapshot, blobs, TUF keys, "
                "with a manifest of digests (docs/operations.md).",
                "modelward.cli.admin:backup",
            ),
            "restore": Entry(
                "Restore a backup into an empty data directory or database, after checking "
                "every digest.",
                "modelward.cli.admin:restore",
            ),
        },
    ),
    "alias": Entry(
        "Read and move aliases (REPO@ALIAS).",
        children={
            "get": Entry(
                "Show the digest and version an alias points at.", "modelward.cli.aliases:alias_get"
            ),
            "set": Entry(
                "Move an alias to a digest (compare-and-swap on its version); a protected alias "
                "short of approvals becomes a proposal its reviewers sign.",
                "modelward.cli.aliases:alias_set",
            ),
            "pending": Entry(
                "List alias moves waiting for signatures (TUF proposals), newest first.",
                f"{_TRUST}:alias_pending",
            ),
            "history": Entry(
                "Every move of an alias: version, from -> to, who, when, why, rollback, and who "
                "signed it (the signers of the TUF role version that named it).",
                "modelward.cli.aliases:alias_history",
            ),
            "rollback": Entry(
                "Set an alias back to an earlier digest, recorded as a rollback and audited as an "
                "emergency.",
                "modelward.cli.aliases:alias_rollback",
            ),
            "list": Entry(
                "List a repository's aliases, by name: the digest and version each points at, "
                "and the state of that bundle.",
                f"{_LISTING}:alias_list",
            ),
        },
    ),
    "audit": Entry("Read and verify the audit log.", "modelward.cli.audit:audit_app"),
    "repo": Entry(
        "Manage repositories.",
        children={
            "create": Entry(
                "Create a repository (optionally with its own policy file).",
                "modelward.cli.repos:repo_create",
            ),
            "add-publisher": Entry(
                "Let a principal publish to a repository (admins only).",
                "modelward.cli.repos:repo_add_publisher",
            ),
            "remove-publisher": Entry(
                "Stop a principal publishing to a repository (admins only).",
                "modelward.cli.repos:repo_remove_publisher",
            ),
            "list": Entry(
                "List the repositories you may read, by name (with --publishable: those you "
                "may push to and move aliases in).",
                f"{_LISTING}:repo_list",
            ),
            "private": Entry(
                "Make a repository private: readable only by admins, reviewers, its org's "
                "owners and members, its publishers and the principals granted read (its "
                "org's owners, admins).",
                "modelward.cli.repos:repo_private",
            ),
            "public": Entry(
                "Make a repository public: readable by every principal (its org's owners, admins).",
                "modelward.cli.repos:repo_public",
            ),
            "grant": Entry(
                "Grant a principal read on a (private) repository (its org's owners, admins).",
                "modelward.cli.repos:repo_grant",
            ),
            "revoke": Entry(
                "Take back a principal's read grant on a repository (its org's owners, admins).",
                "modelward.cli.repos:repo_revoke",
            ),
            "quota": Entry(
                "A repository's storage quota in bytes (set by admins).",
                "modelward.cli.garbage:quota_app",
            ),
        },
    ),
    "attestation": Entry(
        "Attach, list, show (decoded) and retract the attestations of a bundle "
        "(REPO@ALIAS or REPO@DIGEST).",
        "modelward.cli.attestation:attestation_app",
    ),
    "attach": Entry(
        "Attach signatures, provenance or evaluations to a bundle as OCI referrers (through /v2).",
        "modelward.cli.attach:attach",
    ),
    "eval": Entry(
        "Evaluation statements: per-case results, signed and attached to a bundle.",
        children={
            "attach": Entry(
                "Sign an evaluation of a bundle against its baseline from per-case results; "
                "attach it.",
                "modelward.cli.eval:attach",
            ),
        },
    ),
    "release": Entry(
        "Release records: one signed document per promotion, verified offline.",
        children={
            "record": Entry(
                "Export the signed release record of REPO@ALIAS at one of its signed moves "
                "(TUF role versions; default: the latest).",
                "modelward.cli.release:record",
            ),
            "verify": Entry(
                "Re-check a release record offline against a trust root (no network).",
                "modelward.cli.release:verify",
            ),
        },
    ),
    "org": Entry(
        "Orgs: who may create repositories ORG/*, and the policy floor they must meet.",
        "modelward.cli.orgs:org_app",
    ),
    "baseline": Entry("Determinism baselines recorded at boot.", f"{_LOADER}:baseline_app"),
    "trust": Entry("The registry's TUF keys and metadata (docs/tuf.md).", f"{_TRUST}:trust_app"),
    "rollout": Entry(
        "Canary rollouts of an alias: a signed plan, signed steps (docs/rollouts.md).",
        "modelward.cli.rollout:rollout_app",
    ),
    "webhook": Entry(
        "Signed webhooks for rollout events, Standard Webhooks (docs/webhooks.md); admins.",
        "modelward.cli.webhooks:webhook_app",
    ),
}

# Exit codes (docs/cli.md#exit-codes): the one table of what an error means to a script.
EXIT_FAILED = 1  # refused or failed: the registry, a verification or a policy said no
EXIT_USAGE = 2  # usage: bad input named on the command line (a value, a file a flag names)
EXIT_ENVIRONMENT = 3  # environment: the registry unreachable, an address taken, a missing tool

# Our errors, by module, and their exit codes: the first class that matches decides, and the
# last rows are our packages' roots (EXIT_FAILED). A class is caught only if its module was
# imported, which it was if one of them was raised; importing them up front would cost
# start-up time. Errors about command-line input derive from the classes mapped to
# EXIT_USAGE (``modelward.cli.common.UsageInputError`` for the CLI's own).
_EXIT_CODES: tuple[tuple[str, str, int], ...] = (
    ("modelward.cli.common", "UsageInputError", EXIT_USAGE),
    ("modelward.client.errors", "InvalidReference", EXIT_USAGE),
    ("modelward.loader.errors", "InputError", EXIT_USAGE),
    ("modelward.attest.policy._flags", "TrustFlagError", EXIT_USAGE),
    ("modelward.attest.errors", "KeyError_", EXIT_USAGE),
    ("modelward.registry.errors", "ConfigurationError", EXIT_USAGE),
    ("modelward.client.errors", "TransportError", EXIT_ENVIRONMENT),
    ("modelward.loader.errors", "EngineUnavailable", EXIT_ENVIRONMENT),
    ("modelward.attest.errors", "AttestError", EXIT_FAILED),
    ("modelward.registry.errors", "RegistryError", EXIT_FAILED),
    ("modelward.client.errors", "RegistryClientError", EXIT_FAILED),
    ("modelward.loader.errors", "LoaderError", EXIT_FAILED),
)


def _print_version(ctx: typer.Context, value: bool) -> None:
    """``--version``: the installed package's version (its metadata), then exit 0."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("modelward")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from modelward import __version__ as installed
    typer.echo(f"modelward {installed}")
    raise typer.Exit(0)


def _root_options() -> list[Any]:
    """The root command's own options (``--version``), built as Typer builds any option."""
    options = typer.Typer()

    @options.command()
    def _root(
        _version: Annotated[
            bool,
            typer.Option(
                "--version",
                callback=_print_version,
                is_eager=True,
                expose_value=False,
                help="Print modelward's version (the installed package's) and exit.",
            ),
        ] = False,
    ) -> None: ...

    return list(typer.main.get_command(options).params)


app = LazyGroup(
    name="modelward",
    help=(
        "Supply-chain registry and hardened loader for ML model bundles.\n\n"
        "Exit codes: 0 success, 1 refused or failed (with every reason), 2 usage error or bad "
        "input named on the command line, 3 environment: the registry unreachable, an address "
        "taken, a missing tool (docs/cli.md#exit-codes). MODELWARD_VERBOSE=1 adds debug logs "
        "and a traceback to every error."
    ),
    table=COMMANDS,
    no_args_is_help=True,
    params=_root_options(),
)


class _LogLines(logging.Formatter):
    """Log records as the CLI's own lines: ``warning: ...`` on stderr, like ``error: ...``."""

    def format(self, record: logging.LogRecord) -> str:
        record.levelname = record.levelname.lower()
        return super().format(record)


def exit_code_of(exc: BaseException) -> int | None:
    """The exit code ``exc`` means (``_EXIT_CODES``), None when it is none of our errors."""
    for module_name, class_name, code in _EXIT_CODES:
        module = sys.modules.get(module_name)
        if module is not None and isinstance(exc, getattr(module, class_name)):
            return code
    return None


def is_modelward_error(exc: BaseException) -> bool:
    """True when ``exc`` is one of our packages' own errors (reported without a traceback)."""
    return exit_code_of(exc) is not None


def main() -> None:
    """Entry point: run the app, report our own errors without a traceback.

    Our errors are answers (a refusal with its reasons, a server's error, a bad file named),
    not crashes: they print as one message, with no traceback hint to wade through.
    """
    verbose = os.environ.get("MODELWARD_VERBOSE") == "1"
    handler = logging.StreamHandler()
    handler.setFormatter(
        _LogLines(
            "%(levelname)s: %(message)s" if not verbose else "%(levelname)s: %(name)s: %(message)s"
        )
    )
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, handlers=[handler])
    try:
        app.main(prog_name="modelward")
    except Exception as exc:
        if verbose or not is_modelward_error(exc):
            raise
        from modelward.cli.common import err_console

        err_console.print("error:", style="bold red", end=" ")
        err_console.print(str(exc), markup=False)
        sys.exit(exit_code_of(exc) or EXIT_FAILED)


if __name__ == "__main__":
    main()
