"""Run the ```console blocks of a Markdown guide in one bash session and compare their output.

The convention the guides follow (docs/guides/README.md says it for writers):

- A line starting with ``$ `` is a command; a line ending in ``\\`` continues it on the next line.
  The lines after a command, up to the next ``$ `` line or the end of the block, are its
  expected output.
- A command with no expected output only has to exit 0 (or, see below, fail).
- Expected output is compared with what the command printed, stdout then stderr, line by line
  (trailing spaces and trailing empty lines ignored). ``...`` inside a line matches any text;
  a line that is only ``...`` matches any number of lines, none included.
- Expected output that begins with ``error:`` means the command must exit non-zero, and it is
  compared with what the command printed on stderr.
- A command whose last line has a comment saying ``not run`` (``# (not run by the docs
  test)``) is shown, never run: vLLM boots, servers that would not return. Keep these rare, and say
  nearby what tests them. Commands that are only instructions (installing, ``make``) go in
  ```sh blocks, which are not run.
- Every block of one guide runs, top to bottom, in ONE bash session: variables, ``export`` and
  ``cd`` carry over from one command to the next. The session stops at the first command whose
  exit status is not the expected one.
- ``SUBSTITUTIONS`` (the example registry URL -> the test's registry) apply to commands and
  expected output; in the output, the session's ``$HOME`` is shown as ``~``.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

_NOT_RUN = re.compile(r"#.*\bnot run\b")
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")


@dataclass(frozen=True)
class Command:
    """One ``$ `` command of a console block, with where it is in the guide."""

    source: str  # file name, for messages
    line: int  # 1-based line of the ``$ `` line
    text: str  # the command, continuation lines joined with their newlines
    expected: tuple[str, ...]  # expected output lines (may be empty)

    @property
    def runs(self) -> bool:
        return _NOT_RUN.search(self.text.splitlines()[-1]) is None

    @property
    def must_fail(self) -> bool:
        return bool(self.expected) and self.expected[0].startswith("error:")

    def where(self) -> str:
        return f"{self.source}:{self.line}"


def parse_console_blocks(markdown: str, source: str = "<doc>") -> list[Command]:
    """Every command of every ```console block of ``markdown``, in order."""
    commands: list[Command] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence or fence.group(2) == "":
            i += 1
            continue
        lang, indent = fence.group(2), len(fence.group(1))
        body_start = i + 1
        j = body_start
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        if lang == "console":
            commands += _parse_block(
                [ln[indent:] for ln in lines[body_start:j]], source, body_start + 1
            )
        i = j + 1
    return commands


def _parse_block(block: Sequence[str], source: str, first_line: int) -> list[Command]:
    commands: list[Command] = []
    k = 0
    while k < len(block):
        line = block[k]
        if not line.startswith("$ "):
            raise ValueError(f"{source}:{first_line + k}: output before any `$ ` command: {line!r}")
        start = k
        text = [line[2:]]
        while text[-1].rstrip().endswith("\\") and k + 1 < len(block):
            k += 1
            text.append(block[k])
        k += 1
        expected: list[str] = []
        while k < len(block) and not block[k].startswith("$ "):
            expected.append(block[k].rstrip())
            k += 1
        while expected and not expected[-1]:
            expected.pop()
        commands.append(Command(source, first_line + start, "\n".join(text), tuple(expected)))
    return commands


# -- matching -------------------------------------------------------------------------------
@cache
def _line_pattern(expected: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in expected.split("...")), re.DOTALL)


def output_matches(expected: Sequence[str], actual: Sequence[str]) -> bool:
    """Does ``actual`` match ``expected`` under the ``...`` convention (see the module doc)?"""
    exp, act = tuple(expected), tuple(actual)

    @cache
    def match(e: int, a: int) -> bool:
        if e == len(exp):
            return a == len(act)
        if exp[e].strip() == "...":
            return any(match(e + 1, k) for k in range(a, len(act) + 1))
        return (
            a < len(act)
            and _line_pattern(exp[e]).fullmatch(act[a]) is not None
            and match(e + 1, a + 1)
        )

    return match(0, 0)


def _lines(text: str) -> list[str]:
    out = [line.rstrip() for line in text.splitlines()]
    while out and not out[-1]:
        out.pop()
    return out


# -- running --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Result:
    command: Command
    status: int | None  # None: never ran (an earlier command stopped the session)
    stdout: str
    stderr: str

    def problem(self) -> str | None:
        """Why this result does not say what the guide says, or None."""
        cmd = self.command
        if self.status is None:
            return f"{cmd.where()}: never ran"
        out, err = _lines(self.stdout), _lines(self.stderr)
        if cmd.must_fail:
            if self.status == 0:
                return self._explain("exits 0, the guide says it fails")
            if not output_matches(cmd.expected, err):
                return self._explain("its stderr is not what the guide shows")
            return None
        if self.status != 0:
            return self._explain(f"exits {self.status}")
        if cmd.expected and not output_matches(cmd.expected, out + err):
            return self._explain("its output is not what the guide shows")
        return None

    def _explain(self, what: str) -> str:
        expected = "\n".join(f"    {line}" for line in self.command.expected) or "    (nothing)"
        return (
            f"{self.command.where()}: `{self.command.text}` {what}\n"
            f"  expected:\n{expected}\n  exit status: {self.status}\n"
            f"  stdout:\n{_indent(self.stdout)}\n  stderr:\n{_indent(self.stderr)}"
        )


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines()) or "    (nothing)"


def _substitute(text: str, substitutions: Mapping[str, str]) -> str:
    for old, new in substitutions.items():
        text = text.replace(old, new)
    return text


def run_session(
    commands: Sequence[Command],
    *,
    cwd: Path,
    env: Mapping[str, str],
    record_dir: Path,
    substitutions: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> list[Result]:
    """Run ``commands`` (those that run) in one bash session; one Result per command.

    Each command runs in the session's own shell (a ``{ ...; }`` group, so assignments,
    ``export`` and ``cd`` carry over), stdin from /dev/null, its stdout, stderr and exit status
    written to files under ``record_dir``. The script stops after the first command whose exit
    status is not the one the guide expects.
    """
    subs = dict(substitutions or {})
    runnable = [c for c in commands if c.runs]
    record_dir.mkdir(parents=True, exist_ok=True)
    script = ["cd " + _quote(str(cwd))]
    for n, cmd in enumerate(runnable):
        base = _quote(str(record_dir / str(n)))
        wrong = "= 0" if cmd.must_fail else "!= 0"
        script += [
            "{",
            _substitute(cmd.text, subs),
            f"}} >{base}.out 2>{base}.err </dev/null",
            f"__status=$?; echo $__status >{base}.rc",
            f'if [ "$__status" {wrong} ]; then exit 0; fi',
        ]
    script_path = record_dir / "session.sh"
    script_path.write_text("\n".join(script) + "\n", encoding="utf-8")
    subprocess.run(
        ["bash", "--noprofile", "--norc", str(script_path)],
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    home = env.get("HOME")
    results: list[Result] = []
    for n, cmd in enumerate(runnable):
        rc_file = record_dir / f"{n}.rc"
        if not rc_file.exists():
            results.append(Result(_with_subs(cmd, subs), None, "", ""))
            continue
        out = (record_dir / f"{n}.out").read_text(encoding="utf-8", errors="replace")
        err = (record_dir / f"{n}.err").read_text(encoding="utf-8", errors="replace")
        if home:
            out, err = (_home_as_tilde(t, home) for t in (out, err))
        results.append(Result(_with_subs(cmd, subs), int(rc_file.read_text()), out, err))
    return results


def _with_subs(cmd: Command, subs: Mapping[str, str]) -> Command:
    return Command(
        cmd.source,
        cmd.line,
        _substitute(cmd.text, subs),
        tuple(_substitute(line, subs) for line in cmd.expected),
    )


def _home_as_tilde(text: str, home: str) -> str:
    real = os.path.realpath(home)
    for prefix in {home.rstrip("/"), real.rstrip("/")}:
        text = text.replace(prefix + "/", "~/")
    return text


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
