"""Every ```console block of the guides runs, as written, against a real ``modelward serve``.

The guides are one story, run in this order, each by its own user in its own directory and
``$HOME`` (the convention for the blocks is in tests/docs/console.py and docs/guides/README.md):

1. setup (an admin, before the story): a registry on loopback; principals alice and bob
   (publishers), carol (reviewer) and worker-1 (reader), their tokens in ``$ALICE_TOKEN``,
   ``$BOB_TOKEN``, ``$CAROL_TOKEN``, ``$WORKER_TOKEN`` and the admin's in ``$ADMIN_TOKEN`` for
   every user; the org ``acme`` owned by alice; the tiny Llama (demo/tinymodel.py) at
   ``./tiny-llama`` in alice's directory.
   carol's signing key at ``~/.config/modelward/carol.key`` in her home, registered.
2. publishers.md, as alice: release 1 is proposed for ``prod``; then carol signs the
   proposal with her key (reviewers.md shows how), which publishes it.
3. serving-workers.md, as worker-1, handed ``alice.key.pub``. Its vLLM boots are ``not run``
   (tests/e2e/test_demo_flow.py boots vLLM); in their place the glue below attaches the
   baseline such a boot records, signed by the worker key the guide generated.
4. between: alice pushes release 2 (the same model, a few weights scaled) to ``staging``;
   carol is handed ``alice.key.pub`` and ``worker-1.key.pub``; ``$AUDIT_KEY`` is the registry's
   checkpoint verifier key and ``$AUDIT_DATABASE_URL`` its database, as the guide says.
5. reviewers.md, as carol.
6. README.md's tours, meanwhile, as an admin on the host of a registry of their own (its
   ``modelward serve`` line is in a ```sh block: the test starts that registry, with its data
   dir at ``./registry-data`` and its admin token in ``$ADMIN_TOKEN``), ``./my-model`` the
   tiny Llama.

``https://registry.example.com`` (and the README's ``http://127.0.0.1:8700``) in a guide mean
the test's registry, ``/var/cache/modelward`` a directory of the worker's.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.docs.console import (
    Command,
    Result,
    output_matches,
    parse_console_blocks,
    run_session,
)
from tests.inprocess import run_modelward
from tests.registry.conftest import MODELWARD, Registry, Server, start_registry

REPO_ROOT = Path(__file__).resolve().parents[2]
GUIDES = REPO_ROOT / "docs" / "guides"
EXAMPLE_URL = "https://registry.example.com"
README_URL = "http://127.0.0.1:8700"
WORKER_CACHE = "/var/cache/modelward"  # the worker's cache in serving-workers.md
TOKEN_VARS = {
    "alice": "ALICE_TOKEN",
    "bob": "BOB_TOKEN",
    "carol": "CAROL_TOKEN",
    "worker-1": "WORKER_TOKEN",
    "admin": "ADMIN_TOKEN",
}
ORDER = ("publishers.md", "serving-workers.md", "reviewers.md", "README.md")


def _doc(name: str) -> Path:
    return REPO_ROOT / name if name == "README.md" else GUIDES / name


@dataclass
class Story:
    reg: Registry
    base: Path
    tiny_model: Path
    tokens: dict[str, str] = field(default_factory=dict)
    results: dict[str, list[Result]] = field(default_factory=dict)

    def user_dir(self, name: str) -> Path:
        path = self.base / name
        (path / "home").mkdir(parents=True, exist_ok=True)
        return path

    def env(self, user: str, *, tokens: bool = True, **extra: str) -> dict[str, str]:
        home = self.user_dir(user) / "home"
        env = {
            "PATH": f"{Path(MODELWARD).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "LANG": "C.UTF-8",
            "EDITOR": "true",
            # (the README's thread never reads self.tokens, which _setup fills meanwhile)
            **({TOKEN_VARS[name]: token for name, token in self.tokens.items()} if tokens else {}),
            **extra,
        }
        for var in ("TMPDIR", "PYTHONPATH"):
            if var in os.environ:
                env[var] = os.environ[var]
        return env

    def cli(self, user: str, *args: str, token: str, **extra: str) -> str:
        env = {**self.env(user, **extra), "MODELWARD_URL": self.reg.url, "MODELWARD_TOKEN": token}
        proc = run_modelward(args, env, cwd=self.user_dir(user))
        assert proc.returncode == 0, f"modelward {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout

    def run_guide(
        self,
        name: str,
        user: str,
        *,
        url: str | None = None,
        tokens: bool = True,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        commands = parse_console_blocks(_doc(name).read_text(encoding="utf-8"), name)
        url = url or self.reg.url
        env = self.env(user, tokens=tokens, **(extra_env or {}))
        self.results[name] = run_session(
            commands,
            cwd=self.user_dir(user),
            env=env,
            record_dir=self.base / "records" / name,
            substitutions={
                EXAMPLE_URL: url,
                README_URL: url,
                WORKER_CACHE: str(self.user_dir("worker") / "var-cache-modelward"),
            },
        )

    def ok(self, name: str) -> bool:
        return name in self.results and not problems(self.results[name])


def problems(results: list[Result]) -> list[str]:
    return [p for p in (r.problem() for r in results) if p is not None]


# -- the glue between the guides ---------------------------------------------------------------
def _setup(story: Story) -> None:
    for name, role in (
        ("alice", "publisher"),
        ("bob", "publisher"),
        ("carol", "reviewer"),
        ("worker-1", "reader"),
    ):
        story.tokens[name] = story.reg.actor(role, name).token
    story.tokens["admin"] = story.reg.server.admin_token
    story.cli("host", "org", "create", "acme", "--owner", "alice", token=story.tokens["admin"])
    shutil.copytree(story.tiny_model, story.user_dir("alice") / "tiny-llama")
    key = story.user_dir("carol") / "home" / ".config" / "modelward" / "carol.key"
    key.parent.mkdir(parents=True, exist_ok=True)
    story.cli("carol", "key", "generate", "--out", str(key), token=story.tokens["carol"])
    story.cli("carol", "key", "register", str(key) + ".pub", token=story.tokens["carol"])


def _carol_signs_release_1(story: Story) -> None:
    """Between the publishers' guide and the workers': carol signs prod's proposal."""
    pending = json.loads(
        story.cli(
            "carol",
            "alias",
            "pending",
            "acme/tiny-llama@prod",
            "--json",
            token=story.tokens["carol"],
        )
    )
    digest = pending[0]["to_digest"]
    key = story.user_dir("carol") / "home" / ".config" / "modelward" / "carol.key"
    # signing verifies from a pinned root; carol pins hers in reviewers.md, so here she signs
    # with the registry's root handed to her and a cache of this step's own
    root = story.base / "carol-setup" / "root.json"
    root.parent.mkdir(parents=True, exist_ok=True)
    root.write_bytes(story.reg.admin.tuf_file("1.root.json"))
    story.cli(
        "carol",
        "approve",
        f"acme/tiny-llama@{digest}",
        "--alias",
        "prod",
        "--key",
        str(key),
        token=story.tokens["carol"],
        MODELWARD_TRUST_ROOT=str(root),
        XDG_CACHE_HOME=str(root.parent / "cache"),
    )


def _hand_keys_to_worker(story: Story) -> None:
    pub = story.user_dir("alice") / "home" / ".config" / "modelward" / "alice.key.pub"
    shutil.copy(pub, story.user_dir("worker") / "alice.key.pub")


def _after_worker(story: Story) -> None:
    """What the guide's `# not run` boot does to the registry: a baseline signed by worker.key."""
    from modelward.attest.statement import PredicateType
    from modelward.loader.baseline import Baseline, ProbeResult, aggregate_hash, token_hash
    from modelward.loader.fingerprint import Fingerprint, fingerprint_id
    from modelward.loader.statements import load_worker_key, sign_predicate

    worker = story.user_dir("worker")
    answer = story.cli(
        "worker", "alias", "get", "acme/tiny-llama@prod", "--json", token=story.tokens["worker-1"]
    )
    digest = json.loads(answer)["digest"]
    data = {
        "engine": {"name": "vllm", "version": "0.32.0"},
        "dtype": "float32",
        "device": {"type": "cpu", "name": "test-cpu", "count": 1},
        "entrypoint": "llm",
    }
    probes = tuple(
        ProbeResult(f"p0{i}", f"prompt {i}", (i, 7, 11), token_hash((i, 7, 11))) for i in range(8)
    )
    baseline = Baseline(
        digest,
        Fingerprint(data, fingerprint_id(data)),
        probes,
        aggregate_hash(probes),
        True,
        (),
        16,
        0,
    )
    envelope = sign_predicate(
        load_worker_key(worker / "worker.key"),
        "acme/tiny-llama",
        digest,
        PredicateType.BASELINE,
        baseline.to_predicate(),
    )
    story.reg.client(story.tokens["worker-1"]).add_attestation("acme/tiny-llama", digest, envelope)

    # release 2: the same model with a few weights scaled, signed and pushed by alice
    from safetensors.numpy import load_file, save_file

    alice = story.user_dir("alice")
    release2 = alice / "tiny-llama-2"
    shutil.copytree(alice / "tiny-llama", release2)
    weights = release2 / "model.safetensors"
    tensors = load_file(str(weights))
    tensors["lm_head.weight"][7:12] *= 25.0
    weights.chmod(0o644)
    save_file(tensors, str(weights), metadata={"format": "pt"})
    key = alice / "home" / ".config" / "modelward" / "alice.key"
    story.cli(
        "alice",
        "push",
        str(release2),
        "acme/tiny-llama",
        "--sign",
        "--key",
        str(key),
        "--alias",
        "staging",
        "--reason",
        "release 2",
        token=story.tokens["alice"],
    )

    carol = story.user_dir("carol")
    shutil.copy(key.with_name("alice.key.pub"), carol / "alice.key.pub")
    shutil.copy(worker / "worker.key.pub", carol / "worker-1.key.pub")


def _audit_env(story: Story) -> dict[str, str]:
    data_dir = story.reg.server.data_dir
    # the registry creates its checkpoint key on first use, as any first checkpoint does
    story.cli(
        "host", "audit", "checkpoint", "--out", "first.checkpoint", token=story.tokens["admin"]
    )
    key = (
        story.cli("host", "audit", "key", "--data-dir", str(data_dir), token=story.tokens["admin"])
        .strip()
        .splitlines()[-1]
    )
    return {"AUDIT_KEY": key, "AUDIT_DATABASE_URL": story.reg.database_url}


def _run_readme(story: Story) -> None:
    """README.md's tours, by an admin on the registry host, against a registry of their own."""
    admin = story.user_dir("admin")
    shutil.copytree(story.tiny_model, admin / "my-model")
    server = Server(data_dir=admin / "registry-data", admin_token=secrets.token_urlsafe(32))
    server.start()
    try:
        story.run_guide(
            "README.md",
            "admin",
            url=server.url,
            tokens=False,
            extra_env={"ADMIN_TOKEN": server.admin_token},
        )
    finally:
        server.stop()


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory, tiny_model_master: Path) -> Iterator[Story]:
    base = tmp_path_factory.mktemp("guides")
    reg = start_registry("sqlite", base / "registry", None)
    try:
        story = Story(reg, base, tiny_model_master)
        # the README runs on a registry of its own, alongside the guides' story
        with ThreadPoolExecutor(1) as pool:
            readme = pool.submit(_run_readme, story)
            _setup(story)
            story.run_guide("publishers.md", "alice")
            if story.ok("publishers.md"):
                _carol_signs_release_1(story)
                _hand_keys_to_worker(story)
                story.run_guide("serving-workers.md", "worker")
            if story.ok("serving-workers.md"):
                _after_worker(story)
                story.run_guide("reviewers.md", "carol", extra_env=_audit_env(story))
            readme.result()
        yield story
    finally:
        reg.close()
        reg.server.stop()


@pytest.mark.parametrize("guide", ORDER)
def test_guide_console_blocks_say_what_the_code_does(story: Story, guide: str) -> None:
    if guide not in story.results:  # the guides are one story: each needs the one before
        pytest.fail(f"{guide} did not run: the guide before it failed")
    found = problems(story.results[guide])
    assert not found, f"{guide} is not what the code does:\n\n" + "\n\n".join(found[:3])
    assert story.results[guide], f"{guide} has no console block"


# -- the harness itself can fail ----------------------------------------------------------------
def test_parser_splits_commands_continuations_and_output() -> None:
    doc = (
        "x\n```console\n$ a \\\n    --b\nout 1\n\nout 2\n$ c   # not run\n```\n"
        "```yaml\n$ not: a command\n```\n"
    )
    first, second = parse_console_blocks(doc, "d.md")
    assert first == Command("d.md", 3, "a \\\n    --b", ("out 1", "", "out 2"))
    assert first.runs
    assert not second.runs


def test_wildcards_match_within_a_line_and_across_lines() -> None:
    assert output_matches(["sha256:b6c2..."], ["sha256:b6c2ff"])
    assert not output_matches(["sha256:b6c2..."], ["sha256:eb30ff"])
    assert output_matches(["first", "...", "last"], ["first", "a", "b", "last"])
    assert output_matches(["first", "...", "last"], ["first", "last"])
    assert not output_matches(["first"], ["first", "more"])
    assert not output_matches(["a(b)"], ["ab"])


def test_a_wrong_guide_is_reported(tmp_path: Path) -> None:
    doc = (
        "```console\n$ X=hello\n$ echo $X\nhello\n$ echo nope\nyes\n"
        "$ true\nerror: must fail\n$ echo never\n```\n"
    )
    results = run_session(
        parse_console_blocks(doc, "d.md"),
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        record_dir=tmp_path / "r",
    )
    assert [r.problem() is None for r in results] == [True, True, False, False, False]
    assert "its output is not what the guide shows" in str(results[2].problem())
    assert "exits 0, the guide says it fails" in str(results[3].problem())
    assert "never ran" in str(results[4].problem())


def test_an_expected_error_is_read_from_stderr(tmp_path: Path) -> None:
    doc = (
        "```console\n$ echo 'error: no' >&2; false\nerror: no\n"
        "$ echo 'error: no'; false\nerror: no\n```\n"
    )
    ok, on_stdout = run_session(
        parse_console_blocks(doc, "d.md"),
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        record_dir=tmp_path / "r",
    )
    assert ok.problem() is None
    assert "stderr is not what the guide shows" in str(on_stdout.problem())
