"""Command groups that import a command's module only when that command runs.

``modelward --help`` and light commands (``bundle digest``, ``alias get``, ``login``) must
start in well under a second, so the entry point imports no command module up front. Each
group is a table: command name → where the command lives (``"module:attribute"``) and its
one-line help. The attribute is a command function, a ``typer.Typer`` sub-app, or, for a
nested lazy group, another table.

Listing commands (``--help``) reads the table only. Running a command imports its module;
a broken import is then an error of that command, and ``tests/packaging/test_cli_table.py``
imports every entry so it is caught in CI, together with any help line that drifted from the
command's own docstring.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import typer
from typer import _click as click
from typer._click.exceptions import UsageError
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

__all__ = ["Entry", "LazyGroup", "load_entry"]


@dataclass(frozen=True)
class Entry:
    """One command of a lazy group.

    ``target`` is ``"module:attribute"`` (a function or a ``typer.Typer``), or ``None`` for a
    nested lazy group whose commands are ``children``.
    """

    help: str
    target: str | None = None
    children: Mapping[str, Entry] = field(default_factory=dict)
    context_settings: Mapping[str, Any] = field(default_factory=dict)


def load_entry(name: str, entry: Entry) -> click.Command:
    """Import ``entry``'s module and build its click command (this is the slow part)."""
    if entry.target is None:
        return LazyGroup(name=name, help=entry.help, table=entry.children, no_args_is_help=True)
    module_name, _, attribute = entry.target.partition(":")
    target = getattr(importlib.import_module(module_name), attribute)
    if isinstance(target, typer.Typer):
        return _with_metavars(typer.main.get_group(target))
    single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    single.command(name, context_settings=dict(entry.context_settings))(target)
    return _with_metavars(typer.main.get_command(single))


def _with_metavars(command: click.Command) -> click.Command:
    """Give every argument and valued option a plain metavar (``PATH``, ``TEXT``, ``DIR``).

    Without one, Typer shows its type (``<list[Path]>``, ``<str>``) and names an argument
    ``{directory}`` in the usage line. An explicit ``metavar=`` is kept; an argument's help
    row shows no type column at all (its metavar names it).
    """
    for param in command.params:
        if isinstance(param, TyperArgument):
            # the argument's row shows its metavar alone, not Typer's type (<list[Path]>),
            # and the usage line says DIR, [DIR] or FILE..., not Typer's {DIR}
            setattr(param, "display_type_rich", _no_type)  # noqa: B010 - one instance only
            setattr(param, "_usage_display_name", _usage_name(param))  # noqa: B010
        if param.metavar is not None or getattr(param, "is_flag", False):
            continue
        if isinstance(param, TyperArgument):
            param.metavar = (param.name or "arg").upper()
        elif isinstance(param, TyperOption):
            param.metavar = _option_metavar(param)
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            _with_metavars(sub)
    return command


def _no_type(ctx: click.Context) -> None:
    return None


def _usage_name(argument: TyperArgument) -> Callable[[], str]:
    def name() -> str:
        text = argument.display_name_raw
        if argument.nargs != 1 and not text.endswith("..."):
            text += "..."
        return text if argument.required else f"[{text}]"

    return name


def _option_metavar(option: TyperOption) -> str:
    described = getattr(option, "type_descriptor", None)
    if described is None:
        return "VALUE"
    if described.is_choice and described.choices:
        return "[" + "|".join(str(getattr(c, "value", c)) for c in described.choices) + "]"
    annotation = described.annotation
    if described.is_list:
        annotation = next(iter(get_args(annotation)), str)
    if described.is_path or annotation is Path:
        return "PATH"
    return _TYPE_METAVARS.get(annotation, "VALUE")


_TYPE_METAVARS: dict[object, str] = {int: "INTEGER", float: "FLOAT", str: "TEXT"}


class LazyGroup(TyperGroup):
    """A Typer group whose commands come from a table and load on first use."""

    def __init__(self, *args: Any, table: Mapping[str, Entry], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.table = table
        self._listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*self.commands, *(name for name in self.table if name not in self.commands)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        entry = self.table.get(cmd_name)
        if entry is None:
            return None
        if self._listing:
            # Help only needs the name and the one-line help: do not import the command.
            return TyperCommand(cmd_name, help=entry.help, short_help=entry.help)
        command = load_entry(cmd_name, entry)
        self.commands[cmd_name] = command
        return command

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return self._click_resolve_command(ctx, args)
        except UsageError as exc:
            if args:
                exc.message = _with_suggestion(exc.message, args[0], self.list_commands(ctx))
            raise


def _with_suggestion(message: str, typo: str, names: Sequence[str]) -> str:
    matches = difflib.get_close_matches(typo, names)
    if not matches:
        return message
    return f"{message.rstrip('.')}. Did you mean {', '.join(repr(m) for m in matches)}?"
