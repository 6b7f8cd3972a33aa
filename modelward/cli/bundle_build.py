"""``modelward bundle init | digest | manifest``: write a spec, name a bundle, show its manifest.

- ``init DIR [--force]`` writes a commented ``modelward.yaml`` (dtype, max_model_len and
  architecture read from ``config.json`` when present); never overwrites without ``--force``;
  writes nothing when the model's own configuration refuses it (a tokenizer missing, tensor
  parallelism against the heads: ``attest.scanner.check_serving``, every field named).
- ``digest DIR [--ignore-path P] [--json]`` prints only the bundle digest (``--json``: one
  document ``{"digest", "files", "bytes", "excluded"}``, docs/attestations.md#json-output).
- ``manifest DIR [--config] [--ignore-path P]`` writes the exact manifest bytes (or the
  config blob) to stdout, so ``modelward bundle manifest DIR | sha256sum`` is the digest.

``--ignore-path P`` leaves P (a file, or a directory and all under it) out of the bundle,
as ``bundle verify --ignore-path`` and ``bundle sign --format oms --ignore-path`` do.

A progress bar is drawn on stderr only when stderr is a terminal. Exit 0 ok; 1 the tree
breaks a rule (every violation printed) or cannot be read; 2 usage (DIR is no directory).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from modelward.cli._apps import bundle_app
from modelward.cli.common import console, err_console, fail, hashing_progress

if TYPE_CHECKING:
    from modelward.attest.manifest import BuiltBundle

_MAX_CONFIG_JSON = 16 * 2**20

DirArg = Annotated[
    Path, typer.Argument(help="The bundle directory.", show_default=False, metavar="DIR")
]


def _require_dir(directory: Path) -> None:
    if not directory.is_dir():
        fail(f"{directory}: not a directory", code=2)


IgnorePathOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--ignore-path",
        metavar="PATH",
        help="Leave PATH (relative to DIR) out of the bundle; repeatable.",
    ),
]


def _build(directory: Path, ignore_paths: list[str] | None = None) -> BuiltBundle:
    from modelward.attest.errors import BundleError
    from modelward.attest.manifest import build_bundle
    from modelward.attest.tree import normalize_excludes

    _require_dir(directory)
    try:
        exclude = normalize_excludes(ignore_paths or ())
    except ValueError as exc:
        fail(f"--ignore-path: {exc}", code=2)
    try:
        with hashing_progress(directory, rate=True) as progress:
            return build_bundle(directory, progress=progress, exclude=exclude)
    except BundleError as exc:
        fail(f"{directory}: {exc}")
    except OSError as exc:
        fail(f"{directory}: {exc.strerror or exc}")


@bundle_app.command("digest")
def digest_command(
    directory: DirArg,
    ignore_path: IgnorePathOpt = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", metavar="", help="Print one JSON document: digest, files, bytes, excluded."
        ),
    ] = False,
) -> None:
    """Print the bundle digest (sha256 of the canonical manifest) and nothing else."""
    built = _build(directory, ignore_path)
    digest = built.manifest.digest
    if not as_json:
        sys.stdout.write(digest + "\n")
        return
    from modelward.attest.tree import normalize_excludes

    excluded = [
        p
        for p in normalize_excludes(ignore_path or ())
        if (directory / p).exists() or (directory / p).is_symlink()
    ]
    document = {
        "digest": digest,
        "files": len(built.manifest.layers),
        "bytes": sum(layer.size for layer in built.manifest.layers),
        "excluded": excluded,
    }
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=True) + "\n")


@bundle_app.command("manifest")
def manifest_command(
    directory: DirArg,
    config: Annotated[
        bool,
        typer.Option("--config", metavar="", help="Print the config blob instead of the manifest."),
    ] = False,
    ignore_path: IgnorePathOpt = None,
) -> None:
    """Print the exact manifest bytes (canonical JSON) of the bundle."""
    built = _build(directory, ignore_path)
    data = built.config_bytes if config else built.manifest.raw
    sys.stdout.buffer.write(data + (b"\n" if sys.stdout.isatty() else b""))
    sys.stdout.buffer.flush()


def _model_config(directory: Path) -> dict[str, Any]:
    """config.json as a dict; {} when absent; a warning (not a failure) when unusable."""
    path = directory / "config.json"
    if not path.is_file():
        return {}
    problem = "not a JSON object"
    try:
        with path.open("rb") as stream:
            data = stream.read(_MAX_CONFIG_JSON + 1)
        if len(data) > _MAX_CONFIG_JSON:
            problem = f"larger than {_MAX_CONFIG_JSON} bytes"
        else:
            value = json.loads(data.decode("utf-8"))
            if isinstance(value, dict):
                return value
    except (OSError, ValueError, RecursionError) as exc:
        problem = str(exc)
    err_console.print(f"warning: {path}: ignored ({problem}); using defaults", markup=False)
    return {}


def _require_servable(directory: Path, spec_text: str, *, read_config: bool) -> None:
    """Refuse (exit 1, nothing written) a spec the model's own configuration refuses: the
    check push and a worker's pull run (attest.scanner.check_serving), every field named.
    Without ``read_config`` (config.json absent or unusable: warned, defaults used) the spec
    is checked without it; ``bundle scan`` and push then say what is wrong with it."""
    from modelward.attest.scanner import MAX_MODEL_CONFIG_BYTES, SERVING_FILES, check_serving
    from modelward.attest.spec import SPEC_FILENAME

    paths = {p.name for p in directory.iterdir() if p.is_file() and not p.is_symlink()}
    files = {SPEC_FILENAME: spec_text.encode()}
    for name in SERVING_FILES:
        if name != SPEC_FILENAME and name in paths and (read_config or name != "config.json"):
            with (directory / name).open("rb") as stream:
                files[name] = stream.read(MAX_MODEL_CONFIG_BYTES + 1)
    findings = check_serving(files, paths)
    for finding in findings:
        err_console.print(f"error: {finding.reason}", markup=False)
    if findings:
        fail(
            f"{directory}: the model cannot be served as configured; {SPEC_FILENAME} not written",
            hint="fix the model's files (or write modelward.yaml by hand, docs/bundle-format.md)",
        )


def _write_new(target: Path, text: str, *, force: bool) -> None:
    """Write ``target`` atomically; without ``force`` never replace an existing entry."""
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        tmp.chmod(0o644)
        if force:
            tmp.replace(target)
        else:
            os.link(tmp, target)  # fails if target exists: no overwrite, even in a race
    finally:
        tmp.unlink(missing_ok=True)


@bundle_app.command("init")
def init_command(
    directory: DirArg,
    force: Annotated[
        bool, typer.Option("--force", metavar="", help="Overwrite an existing modelward.yaml.")
    ] = False,
    engine_version: Annotated[
        str,
        typer.Option("--engine-version", metavar="VERSION", help="The exact vLLM version to pin."),
    ] = "0.32.0",
) -> None:
    """Write a commented modelward.yaml for the model in DIR."""
    from modelward.attest.spec import SERVING_DTYPES, SPEC_FILENAME, render_spec_template

    _require_dir(directory)
    target = directory / SPEC_FILENAME
    if not force and (target.exists() or target.is_symlink()):
        fail(f"{target}: already exists", hint="pass --force to overwrite it")
    hf = _model_config(directory)
    dtype = hf.get("dtype", hf.get("torch_dtype"))
    max_len = hf.get("max_position_embeddings")
    architectures = hf.get("architectures")
    architecture = architectures[0] if isinstance(architectures, list) and architectures else None
    try:
        text = render_spec_template(
            dtype=dtype if dtype in SERVING_DTYPES else "auto",
            engine_version=engine_version,
            max_model_len=max_len if type(max_len) is int and max_len > 0 else None,
            architecture=architecture if isinstance(architecture, str) else None,
        )
    except ValueError as exc:
        fail(str(exc), code=2)
    _require_servable(directory, text, read_config=bool(hf))
    try:
        _write_new(target, text, force=force)
    except FileExistsError:
        fail(f"{target}: already exists", hint="pass --force to overwrite it")
    except OSError as exc:
        fail(f"{target}: cannot write: {exc.strerror or exc}")
    console.print(f"wrote {target}", markup=False)
