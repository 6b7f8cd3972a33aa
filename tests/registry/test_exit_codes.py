"""Issue 28 finding 6: one exit-code table (docs/cli.md#exit-codes), checked over EVERY command
of ``modelward.cli.COMMANDS`` (a new command is walked without a change here).

Each command gets one mistake of each kind that applies to it, every other argument filled
with something valid, against the shared registry (SQLite):

- a bad option value (an integer option given ``many``; a command without one: an option it
  does not have);
- a missing input file (the first path it reads: an argument or a flag);
- a malformed reference (its ``REPO@...`` or ``ORG/NAME`` argument).

Each is a usage error: exit 2, stderr names the thing at fault, and no traceback. The
commands run in one process (tests/registry/cli_batch.py), as the installed entry point runs
them. The cases the issue named (a private key given to ``pull --public-key``, a public key to
``approve --key``, a missing or non-root ``--trust-root``, ``serve --port 99999``, ``--role
superuser``), issue 39's (a malformed ``eval attach --results`` file: 2; ``--version``: 0) and
the other two codes (1: refused; 3: the registry unreachable) are checked by name below.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version as installed
from pathlib import Path
from typing import Any, get_args

import pytest

from modelward.attest.keys import generate_private_key, public_key_pem, save_private_key
from modelward.cli import COMMANDS, EXIT_ENVIRONMENT, EXIT_FAILED, EXIT_USAGE
from modelward.cli._lazy import Entry, load_entry
from tests import forkserver
from tests.registry.conftest import Registry, make_bundle_dir, new_publisher, push_new
from tests.registry.test_alias_suggestions import cut_off

pytestmark = pytest.mark.sqlite_only

# Path parameters a command writes or creates (never a missing input), by parameter name.
OUTPUTS = frozenset({
    "out", "oci_layout", "dest", "cache_dir", "data_dir", "ready_file", "capture", "export_to",
    "html_out", "markdown", "key_file",
})  # fmt: skip
# Commands whose DIR argument is where they write.
WRITES_DIRECTORY = frozenset({"bundle init", "trust export"})
# Arguments that take a reference or a repository, by metavar.
REFERENCE_METAVARS = ("@", "ORG/NAME", "REPO")
MALFORMED = "Not A/Reference@@"
GONE = "sha256:" + "0" * 64


def _leaves(prefix: list[str], table: dict[str, Entry] | Any) -> Iterator[tuple[str, Any]]:
    for name, entry in table.items():
        if entry.target is None:
            yield from _leaves([*prefix, name], entry.children)
        else:
            yield from _walk([*prefix, name], load_entry(name, entry))


def _walk(path: list[str], command: Any) -> Iterator[tuple[str, Any]]:
    subcommands = getattr(command, "commands", None)
    if subcommands:
        for name, sub in subcommands.items():
            yield from _walk([*path, name], sub)
    else:
        yield " ".join(path), command


def _is_argument(param: Any) -> bool:
    return type(param).__name__ == "TyperArgument"


def _annotation(param: Any) -> Any:
    described = getattr(param, "type_descriptor", None)
    return None if described is None else described.annotation


def _is_path(param: Any) -> bool:
    described = getattr(param, "type_descriptor", None)
    if described is None:
        return False
    annotation = described.annotation
    if described.is_list:
        annotation = next(iter(get_args(annotation)), None)
    return bool(described.is_path) or getattr(annotation, "__name__", "") == "Path"


def _is_int(param: Any) -> bool:
    return _annotation(param) is int


def _flag(param: Any) -> str:
    return str(max(param.opts, key=len))


class World:
    """Valid values for every argument, from a real registry and real files."""

    def __init__(self, registry: Registry, tmp: Path) -> None:
        self.tmp = tmp
        pub = new_publisher(registry)
        self.repo = registry.repo(pub)
        self.digest = push_new(pub, self.repo, tmp, alias="dev")
        self.bundle = make_bundle_dir(tmp / "bundle")
        key = generate_private_key()
        self.key = tmp / "signer.key"
        save_private_key(key, self.key)
        self.pub = tmp / "signer.pub"
        self.pub.write_bytes(public_key_pem(key.public_key()))
        self.root = tmp / "root.json"
        registry.cli("trust", "root", "--out", str(self.root), check=True)
        self.requests = tmp / "requests.jsonl"
        self.requests.write_text('{"prompt": "hi"}\n')
        self.any_file = tmp / "any.json"
        self.any_file.write_text("{}")

    def path_for(self, param: Any) -> str:
        name, metavar = param.name, str(param.metavar or "")
        if name in OUTPUTS:
            return str(self.tmp / "outputs" / name)
        if name in {"key", "worker_key"} or "root_key" in name or "targets_key" in name:
            return str(self.key)
        if name in {"public_key", "pubkey", "worker_public_key"}:
            return str(self.pub)
        if name == "trust_root":
            return str(self.root)
        if name in {"requests_file"}:
            return str(self.requests)
        if metavar.startswith("DIR") or name in {"directory", "src"}:
            return str(self.bundle)
        return str(self.any_file)

    def value_for(self, param: Any) -> str:
        metavar = str(param.metavar or "").upper()
        if _is_path(param):
            return self.path_for(param)
        if metavar == "REPO@DIGEST":
            return f"{self.repo}@{self.digest}"
        if "@" in metavar:
            return f"{self.repo}@dev"
        if metavar in {"ORG/NAME", "REPO"}:
            return self.repo
        if metavar == "ORG":
            return self.repo.split("/")[0]
        if metavar == "DIGEST":
            return self.digest
        if metavar in {"NAME", "PRINCIPAL"}:
            return "admin"
        if metavar == "ROLE" or param.name == "role":
            return "reader"
        if metavar == "BYTES":
            return "1GB"
        if metavar == "URL":
            return "http://127.0.0.1:9"
        if _is_int(param):
            return "1"
        return "x"


def _args(world: World, command: Any, wanted: Any = None, value: str = "") -> list[str]:
    """The command's required parameters, each given a valid value, and ``wanted`` (a
    parameter, None: none) given ``value``, in the order the command declares them."""
    args: list[str] = []
    for param in command.params:
        if param is wanted:
            given = value
        elif param.required:
            given = world.value_for(param)
        else:
            continue
        args += [given] if _is_argument(param) else [_flag(param), given]
    return args


def _cases(world: World) -> list[tuple[str, str, list[str], str]]:
    """(command, kind, arguments, what stderr must name)."""
    cases = []
    for path, command in _leaves([], COMMANDS):
        words = path.split()
        # (1) a bad option value
        ints = [p for p in command.params if not _is_argument(p) and _is_int(p)]
        if ints:
            args = _args(world, command, ints[0], "many")
            cases.append((path, "bad option value", [*words, *args], _flag(ints[0])))
        else:
            args = [*_args(world, command), "--no-such-option"]
            cases.append((path, "unknown option", [*words, *args], "--no-such-option"))
        # (2) a missing input file
        inputs = [
            p for p in command.params
            if _is_path(p) and p.name not in OUTPUTS
            and not (path in WRITES_DIRECTORY and _is_argument(p))
        ]  # fmt: skip
        if inputs:
            missing = str(world.tmp / "missing" / f"no-{inputs[0].name}.file")
            args = _args(world, command, inputs[0], missing)
            cases.append((path, "missing file", [*words, *args], missing))
        # (3) a malformed reference
        refs = [
            p for p in command.params
            if _is_argument(p) and any(m in str(p.metavar or "") for m in REFERENCE_METAVARS)
        ]  # fmt: skip
        if refs:
            args = _args(world, command, refs[0], MALFORMED)
            cases.append((path, "malformed reference", [*words, *args], MALFORMED))
    return cases


def _run_batch(registry: Registry, tmp: Path, cases: list[list[str]]) -> list[dict[str, Any]]:
    cases_file, results_file = tmp / "cases.json", tmp / "results.json"
    cases_file.write_text(json.dumps(cases))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELWARD_")}
    env.update({
        "MODELWARD_URL": registry.url,
        "MODELWARD_TOKEN": registry.server.admin_token,
        "XDG_CONFIG_HOME": str(tmp / "config"),
    })  # fmt: skip
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    work = tmp / "cwd"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "tests.registry.cli_batch", str(cases_file), str(results_file)],
        cwd=work,
        env={**env, "PYTHONSAFEPATH": ""},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert results_file.exists(), done.stderr[-4000:]
    results: list[dict[str, Any]] = json.loads(results_file.read_text())
    return results


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)
def test_every_command_exits_2_naming_the_mistake(registry: Registry, tmp_path: Path) -> None:
    world = World(registry, tmp_path)
    cases = _cases(world)
    walked = {path for path, *_ in cases}
    assert {"pull", "approve", "admin token list", "quarantine lift", "serve"} <= walked
    results = _run_batch(registry, tmp_path, [args for _, _, args, _ in cases])
    wrong = []
    for (path, kind, args, named), result in zip(cases, results, strict=True):
        problems = []
        if result["traceback"] or "Traceback" in result["stderr"]:
            problems.append("a traceback")
        if result["code"] != EXIT_USAGE:
            problems.append(f"exit {result['code']}, not {EXIT_USAGE}")
        if named not in result["stderr"]:
            problems.append(f"stderr does not name {named!r}")
        if cut_off(result["stderr"]):
            problems.append(f"a message cut off at a colon: {cut_off(result['stderr'])}")
        if problems:
            shown = (result["traceback"] or result["stderr"]).strip()[-600:]
            wrong.append(f"{path} ({kind}): {'; '.join(problems)}\n  $ modelward "
                         f"{' '.join(args)}\n  {shown}")  # fmt: skip
    assert not wrong, f"{len(wrong)} of {len(cases)} mistakes:\n" + "\n".join(wrong)


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)
def test_the_issue_cases_and_the_other_codes(registry: Registry, tmp_path: Path) -> None:
    world = World(registry, tmp_path)
    reject = tmp_path / "not-root.json"
    reject.write_text(json.dumps({"signed": {"_type": "targets"}, "signatures": []}))
    missing_root = tmp_path / "missing-root.json"
    bad_results = tmp_path / "results.jsonl"  # a malformed eval attach --results file
    bad_results.write_text('{"case": "a", "candidate": true, "baseline": true}\nnot json\n')
    digest_ref = f"{world.repo}@{world.digest}"
    cache = str(tmp_path / "cache")
    cases = [
        # (args, exit code, what stderr names)
        (["pull", f"{world.repo}@dev", "--public-key", str(world.key), "--trust-root",
          str(world.root), "--cache-dir", cache], EXIT_USAGE, str(world.key)),
        (["approve", digest_ref, "--alias", "prod", "--key", str(world.pub)], EXIT_USAGE,
         str(world.pub)),
        (["pull", f"{world.repo}@dev", "--public-key", str(world.pub), "--trust-root",
          str(missing_root), "--cache-dir", cache], EXIT_USAGE, str(missing_root)),
        (["pull", f"{world.repo}@dev", "--public-key", str(world.pub), "--trust-root",
          str(reject), "--cache-dir", cache], EXIT_USAGE, str(reject)),
        (["serve", "--port", "99999", "--data-dir", str(tmp_path / "d")], EXIT_USAGE, "port"),
        (["admin", "principal", "create", "bob", "--role", "superuser"], EXIT_USAGE,
         "superuser"),
        (["eval", "attach", f"{world.repo}@dev", "--results", str(bad_results), "--key",
          str(world.key)], EXIT_USAGE, str(bad_results)),
        # refused by the registry: 1
        (["alias", "get", f"{world.repo}@nothing-here"], EXIT_FAILED, "nothing-here"),
        (["bundle", "delete", f"{world.repo}@{GONE}", "--reason", "x"], EXIT_FAILED, GONE),
    ]  # fmt: skip
    results = _run_batch(registry, tmp_path, [*(args for args, _, _ in cases), ["--version"]])
    for (args, code, named), result in zip(cases, results[:-1], strict=True):
        assert result["traceback"] is None, (args, result["traceback"])
        assert (result["code"], named in result["stderr"]) == (code, True), (args, result)
    # --version: done (0), the installed package's version on stdout
    version = results[-1]
    assert (version["code"], version["stdout"]) == (0, f"modelward {installed('modelward')}\n")


def test_an_unreachable_registry_exits_3() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELWARD_")}
    env.update({"MODELWARD_URL": "http://127.0.0.1:9", "MODELWARD_TOKEN": "t"})
    for args in (["alias", "get", "acme/x@prod"], ["admin", "token", "list"]):
        out = forkserver.run(args, env, timeout=60)
        assert out.returncode == EXIT_ENVIRONMENT, out.stderr
        assert "http://127.0.0.1:9" in out.stderr
