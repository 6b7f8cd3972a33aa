"""The command table in ``modelward.cli``: every entry loads, its help is the command's own,
and the light commands start without the heavy libraries (issue 14, item 10)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping

import pytest

from modelward.cli import COMMANDS
from modelward.cli._lazy import Entry, load_entry


def _entries(table: Mapping[str, Entry], prefix: str = "") -> Iterator[tuple[str, Entry]]:
    for name, entry in table.items():
        yield f"{prefix}{name}", entry
        yield from _entries(entry.children, f"{prefix}{name} ")


ALL = sorted(_entries(COMMANDS), key=lambda item: item[0])


@pytest.mark.parametrize(("path", "entry"), ALL, ids=[path for path, _ in ALL])
def test_every_entry_loads_with_its_own_help(path: str, entry: Entry) -> None:
    """A broken import or a help line that drifted from the docstring fails here, not in use."""
    command = load_entry(path.rsplit(" ", 1)[-1], entry)
    if entry.target is not None:
        assert command.get_short_help_str(10_000) == entry.help


HEAVY = (
    "fastapi",
    "sqlalchemy",
    "alembic",
    "vllm",
    "torch",
    "transformers",
    "sigstore",
    "cryptography",
    "modelward.attest.policy",
    "modelward.attest.verifier",
    "modelward.registry.app",
    "modelward.loader.engine",
)


def _loaded_after(argv: list[str]) -> list[str]:
    """Run the CLI in a fresh interpreter; which heavy modules did it import?"""
    code = (
        "import json, sys\n"
        "from modelward.cli import app\n"
        "try:\n"
        f"    app.main({argv!r}, prog_name='modelward')\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    env = {**os.environ, "COLUMNS": "100"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["bundle", "--help"],
        ["bundle", "digest", "--help"],
        ["alias", "get", "--help"],
        ["login", "--help"],
        ["bundle", "verify", "--help"],
        ["push", "--help"],
    ],
    ids=" ".join,
)
def test_light_commands_import_no_heavy_library(argv: list[str]) -> None:
    assert _loaded_after(argv) == []


def test_root_help_lists_every_command_without_importing_them() -> None:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "modelward", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    listed = {
        line.split()[0]
        for line in out.stdout.split("Commands:")[1].splitlines()
        if line.startswith("  ") and not line.startswith("   ")
    }
    assert listed == set(COMMANDS)
    assert "modelward.registry" not in out.stderr
    assert "modelward.loader" not in out.stderr


def test_a_mistyped_command_is_a_usage_error_with_a_suggestion() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "modelward", "alais", "get"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2
    assert "No such command 'alais'. Did you mean 'alias'?" in out.stderr


def test_help_shows_plain_metavars_not_python_types() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "modelward", "bundle", "verify", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "120"},
    )
    assert "<list[" not in out.stdout
    assert "<bool>" not in out.stdout
    assert re.search(r"--public-key [A-Z]+ ", out.stdout)


WALK_ALL_HELP = """
import json, sys
from modelward.cli import COMMANDS, app
from modelward.cli._lazy import load_entry
from typer import _click as click
from typer.core import TyperGroup

def pages(command, path):
    ctx = click.Context(command, info_name=" ".join(path))
    yield " ".join(path), command.get_help(ctx)
    if isinstance(command, TyperGroup):
        for name in command.list_commands(ctx):
            yield from pages(command.get_command(ctx, name), [*path, name])

print(json.dumps(dict(pages(app, ["modelward"]))))
"""


def test_no_help_page_shows_python_types_or_braces() -> None:
    """Every command's --help: real metavars, no Typer type labels, no {REQUIRED} braces."""
    env = {**os.environ, "COLUMNS": "200", "TYPER_USE_RICH": "0"}
    out = subprocess.run(
        [sys.executable, "-c", WALK_ALL_HELP], capture_output=True, text=True, check=True, env=env
    )
    help_pages: dict[str, str] = json.loads(out.stdout)
    assert len(help_pages) > 60  # every group and command (71 when written)
    bad = {
        path: [
            line
            for line in text.splitlines()
            if re.search(r"<(bool|str|int|path|file|dir|list\[[^>]*)>|\{[A-Z]", line)
        ]
        for path, text in help_pages.items()
    }
    assert {path: lines for path, lines in bad.items() if lines} == {}
