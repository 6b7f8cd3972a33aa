"""The demo's steps, in the order of the story (see demo/run_demo.py for the overview)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import time
from pathlib import Path

import httpx

from demo._runner import Runner, StepFailedError, StepSkippedError

__all__ = ["PRINCIPALS", "REPO", "Story"]

REPO = "acme/tiny-llama"
# (name, role, token variable, who they are in the story)
PRINCIPALS = (
    ("alice", "publisher", "$ALICE_TOKEN", "publisher: builds, signs and pushes bundles"),
    ("bob", "publisher", "$BOB_TOKEN", "release manager: moves the prod alias"),
    (
        "carol",
        "reviewer",
        "$CAROL_TOKEN",
        "security reviewer: signs prod moves, quarantines, audits",
    ),
    ("dave", "reviewer", "$DAVE_TOKEN", "second reviewer: prod needs two signatures"),
    ("worker-1", "reader", "$WORKER_TOKEN", "serving worker: pulls, verifies, boots vLLM"),
)
ANALYSIS = """\
thresholds:
  error_rate: {max: 0.01}
  ttft_p95_ms: {max: 800}
triggers:
  - {name: sustained-errors, metric: error_rate, above: 0.05, for: 2m}
"""
# the rehearsal fleet (docs/rollouts.md#rehearsal): stand-in engines, real signed reports;
# v3's engine fails 30% of its requests at a TTFT around 1200 ms
FLEET_WORKERS = 3
BAD_V3 = "0.3,1200"
SOURCE_REVISION = "0123456789abcdef0123456789abcdef01234567"
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
FLIP_BYTE = (
    "import sys, os; p = sys.argv[1]; os.chmod(p, 0o644); f = open(p, 'r+b'); "
    "f.seek(os.path.getsize(p) // 2); b = f.read(1); f.seek(-1, 1); "
    "f.write(bytes([b[0] ^ 1])); f.close(); print('flipped one byte of', p)"
)


def _digest(text: str, what: str) -> str:
    found: list[str] = DIGEST_RE.findall(text)
    if not found:
        raise StepFailedError(f"no digest in the output of {what}")
    return found[-1]


def _expect(text: str, *needles: str) -> None:
    low = text.lower()
    for needle in needles:
        if needle.lower() not in low:
            raise StepFailedError(f"expected {needle!r} in the output; got: {text.strip()[-400:]}")


class Story:
    """The state the steps share: URLs, digests, paths."""

    def __init__(
        self,
        runner: Runner,
        *,
        workdir: Path,
        port: int,
        serve_port: int,
        admin_token: str,
        skip_vllm: bool,
    ) -> None:
        self.r = runner
        self.workdir = workdir
        self.data = workdir / "data"
        self.keys = workdir / "keys"
        self.url = f"http://127.0.0.1:{port}"
        self.port = port
        self.serve_port = serve_port
        self.admin_token = admin_token
        self.skip_vllm = skip_vllm
        self.v1 = ""
        self.v2 = ""
        self.v3 = ""
        self.v1_dir: Path | None = None
        self.fleet: subprocess.Popen[bytes] | None = None  # the rehearsal fleet
        self._commands: dict[tuple[str, ...], bool] = {}

    # -- helpers ---------------------------------------------------------------------------
    def as_(self, name: str) -> dict[str, str]:
        var = {p[0]: p[2] for p in PRINCIPALS}.get(name, "$ADMIN_TOKEN")
        return {"MODELWARD_TOKEN": var}

    def has(self, *words: str) -> bool:
        """Does this modelward have the command ``words``?"""
        if words not in self._commands:
            proc = subprocess.run(
                [self.r.modelward(), *words, "--help"],
                capture_output=True,
                env=self.r.base_env,
                check=False,
                timeout=120,
            )
            self._commands[words] = proc.returncode == 0
        return self._commands[words]

    def need(self, *words: str) -> None:
        if not self.has(*words):
            raise StepSkippedError(f"`modelward {' '.join(words)}` does not exist yet")

    def need_vllm(self) -> None:
        if self.skip_vllm:
            raise StepSkippedError("vLLM steps skipped (--skip-vllm)")
        if importlib.util.find_spec("vllm") is None:
            raise StepSkippedError("vLLM is not installed: pip install -e '.[vllm]'")
        self.need("boot")

    def trust(self, cache: str = "cache") -> list[str]:
        """The worker's own trust, pinned out of band: the publisher's public key and the
        registry's TUF root."""
        return [
            "--public-key",
            str(self.keys / "alice.key.pub"),
            "--trust-root",
            str(self.workdir / "root.json"),
            "--cache-dir",
            str(self.workdir / cache),
        ]

    def reviewers_sign(self, digest: str) -> None:
        """carol, then dave, sign the pending prod proposal for ``digest`` with their keys."""
        for name in ("carol", "dave"):
            self.r.run(
                [
                    "approve",
                    f"{REPO}@{digest}",
                    "--alias",
                    "prod",
                    "--key",
                    str(self.keys / f"{name}.key"),
                ],
                env=self.as_(name),
            )

    def note(self, text: str) -> None:
        self.r.console.print(
            f"  {self.r.redact(text)}", style="magenta", markup=False, soft_wrap=True
        )

    def add_publisher(self, principal: str) -> None:
        """An admin lets ``principal`` publish to REPO (the CLI command, or the HTTP API)."""
        if self.has("repo", "add-publisher"):
            self.r.run(["repo", "add-publisher", REPO, principal], env=self.as_("admin"))
            return
        path = f"/v1/repos/{REPO}/publishers"
        self.note("(no `modelward repo add-publisher` command yet; the HTTP API call:)")
        self.note(
            f'curl -s -X POST $MODELWARD_URL{path} -H "Authorization: Bearer '
            f"$ADMIN_TOKEN\" -H 'Content-Type: application/json' "
            f'-d \'{{"principal": "{principal}"}}\''
        )
        answer = httpx.post(
            f"{self.url}{path}",
            json={"principal": principal},
            timeout=30,
            headers={"Authorization": f"Bearer {self.admin_token}"},
        )
        if answer.status_code != 201:
            raise StepFailedError(
                f"adding publisher {principal}: {answer.status_code} {answer.text}"
            )
        self.r.console.print(f"    {answer.text}", style="dim", markup=False)

    # -- the story -------------------------------------------------------------------------
    def play(self) -> None:
        steps = [
            (
                "Start a registry",
                "modelward serve: SQLite and local blobs under $DEMO/data, "
                "admin token from MODELWARD_BOOTSTRAP_TOKEN.",
                self.start_registry,
            ),
            (
                "Principals and tokens",
                "Five people and machines, each with their own role "
                "and API token, created over the API by the admin (tokens are shown once, "
                "stored hashed).",
                self.principals,
            ),
            (
                "Build a bundle",
                "A tiny random Llama; modelward.yaml pins its serving inputs; "
                "the content scan admits only safe formats; one digest names it all.",
                self.build_bundle,
            ),
            (
                "Signing keys",
                "alice (publisher), carol and dave (reviewers) generate signing "
                "keys and register their public halves; the worker gets a key for its baselines. "
                "Private keys never leave their owners' machines.",
                self.keys_step,
            ),
            (
                "Sign provenance",
                "alice signs SLSA provenance about this exact digest (DSSE) and checks it locally.",
                self.sign,
            ),
            (
                "Push",
                "the admin makes alice an owner of the org acme, whose floor protects "
                "prod; alice creates the repository with a policy whose prod needs two "
                "reviewers' signatures, the admin lets bob publish there too; alice uploads "
                "blobs, manifest and provenance and points staging at it.",
                self.push,
            ),
            (
                "Refused alias moves",
                "prod is protected: a reader may not move it at all, and "
                "the publisher may not approve her own bundle, neither by token nor by key.",
                self.refused_moves,
            ),
            (
                "prod proposed",
                "bob, the release manager, moves prod: a protected alias "
                "becomes a proposal (the next version of prod's TUF role), not a move.",
                self.propose_prod,
            ),
            (
                "Reviewers sign",
                "carol and dave each see what changes and sign it on their own "
                "machine; at two signatures the registry verifies them and publishes.",
                self.sign_prod,
            ),
            (
                "Worker pulls and verifies",
                "worker-1 pins the registry's TUF root and resolves "
                "prod through signed metadata, then checks digest, signatures against ITS "
                "policy, scan, and makes a read-only materialized copy.",
                self.pull,
            ),
            (
                "Boot vLLM and record a baseline",
                "Re-hash right before the engine opens the "
                "files, boot with pinned arguments, record a signed determinism baseline.",
                self.boot,
            ),
            (
                "Generate a reply",
                "`modelward boot --serve` runs vLLM's OpenAI-compatible "
                "server from the verified directory; ask it something.",
                self.reply,
            ),
            (
                "Tampered blob refused",
                "An attacker flips one byte in the worker's cache: verify and boot both refuse it.",
                self.tamper,
            ),
            (
                "Release v2",
                "alice pushes a second bundle (signed during push), bob proposes "
                "it for prod, carol and dave sign.",
                self.release_v2,
            ),
            (
                "Quarantine",
                "carol finds a problem in v2 and quarantines it, signing the "
                "quarantine role: no worker will load it anywhere.",
                self.quarantine,
            ),
            (
                "prod rolled back",
                "bob proposes rolling prod back to v1, both reviewers sign; "
                "the history records the rollback and workers pull v1 again.",
                self.rollback,
            ),
            (
                "Canary rollout",
                "a rehearsal fleet of 3 workers (stand-in engines, no GPU, real signed "
                "reports) follows prod; alice pushes v3; bob proposes rolling prod out to it "
                "in signed steps (5, 20, 50, 100%) under an analysis with thresholds and "
                "triggers, the plan listing the 3 workers it knows; carol and dave sign it; "
                "the registry signs the first step: 5%, one worker of the 3.",
                self.canary,
            ),
            (
                "Canary aborted",
                "the canary worker's reports show v3's errors and TTFT over the plan's "
                "thresholds: the registry's analysis aborts the rollout and signs the abort; "
                "every worker is back on v1, and the status records why.",
                self.abort_canary,
            ),
            (
                "Audit",
                "carol pages through the audit log and recomputes its hash chain, "
                "through the API and straight from the database.",
                self.audit,
            ),
        ]
        for title, why, body in steps:
            self.r.step(title, why, body)

    def start_registry(self) -> str:
        self.need("serve")
        self.r.secrets[self.admin_token] = "$ADMIN_TOKEN"
        self.note(
            "export ADMIN_TOKEN=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
        proc = self.r.start(
            ["serve", "--data-dir", str(self.data), "--port", str(self.port)],
            env={"MODELWARD_BOOTSTRAP_TOKEN": "$ADMIN_TOKEN"},
            log=self.workdir / "registry.log",
        )
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                log = (self.workdir / "registry.log").read_text(errors="replace")[-800:]
                raise StepFailedError(f"modelward serve exited {proc.returncode}: {log}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise StepFailedError("the registry did not become ready in 90 s")
            time.sleep(0.3)
        self.r.base_env["MODELWARD_URL"] = self.url
        self.note(f"export MODELWARD_URL={self.url}")
        proc2 = self.r.run(["login", self.url, "--token", "$ADMIN_TOKEN"], env=self.as_("admin"))
        _expect(proc2.stdout, "admin")
        # every signer verifies what it signs from a pinned root (docs/tuf.md#what-a-signer-
        # checks); the demo's people share one machine, so one pin serves them all
        self.note("# each signer pins the registry's root once (check its keys out of band)")
        root = self.workdir / "root.json"
        self.r.run(["trust", "root", "--out", str(root)], env=self.as_("admin"))
        self.r.run(["trust", "pin", "--trust-root", str(root)], env=self.as_("admin"))
        return f"registry ready at {self.url}; the admin token works; its root is pinned"

    def principals(self) -> str:
        self.need("admin", "principal", "create")
        admin = self.as_("admin")  # over the API, as the logged-in admin
        for name, role, var, who in PRINCIPALS:
            self.note(f"# {name}: {who}")
            self.r.run(["admin", "principal", "create", name, "--role", role], env=admin)
            self.r.run(["admin", "token", "create", name], env=admin, secret_last_line=var)
            if var not in self.r.secrets.values():
                raise StepFailedError(f"no token printed for {name}")
            self.note(f"{var[1:]}=<the last line above>")
        listed = self.r.run(["admin", "principal", "list"], env=admin).stdout
        _expect(listed, *(p[0] for p in PRINCIPALS))
        return (
            "alice (publisher), bob (release manager), carol and dave (reviewers), "
            "worker-1 (reader)"
        )

    def build_bundle(self) -> str:
        model = str(self.workdir / "model")
        self.r.run(["-m", "demo.make_model", model], python=True, timeout=600)
        self.r.run(["bundle", "init", model])
        self.r.run(["bundle", "scan", model])
        self.v1 = _digest(self.r.run(["bundle", "digest", model]).stdout, "bundle digest")
        return f"bundle v1 = {self.v1[:19]}..."

    def keys_step(self) -> str:
        self.keys.mkdir(exist_ok=True)
        for name in ("alice", "carol", "dave", "worker-1"):
            self.r.run(["key", "generate", "--out", str(self.keys / f"{name}.key")])
        mode = (self.keys / "alice.key").stat().st_mode & 0o777
        if mode != 0o600:
            raise StepFailedError(f"private key mode is {oct(mode)}, not 0600")
        self.need("key", "register")
        for name in ("alice", "carol", "dave"):
            self.r.run(["key", "register", str(self.keys / f"{name}.key.pub")], env=self.as_(name))
        self.r.run(
            ["key", "register", str(self.keys / "worker-1.key.pub"), "--principal", "worker-1"],
            env=self.as_("admin"),
        )
        return (
            "alice, carol and dave registered their own keys; worker-1's key registered "
            "by the admin"
        )

    def sign(self) -> str:
        model = str(self.workdir / "model")
        out = str(self.workdir / "provenance.dsse.json")
        self.r.run(
            [
                "bundle",
                "sign",
                model,
                "--key",
                str(self.keys / "alice.key"),
                "--out",
                out,
                "--source",
                "hf://acme/tiny-llama",
                "--source-revision",
                SOURCE_REVISION,
            ]
        )
        self.r.run(
            [
                "bundle",
                "verify",
                model,
                "--signature",
                out,
                "--public-key",
                str(self.keys / "alice.key.pub"),
            ]
        )
        return "SLSA provenance signed by alice and verified locally"

    def push(self) -> str:
        self.need("push")
        if self.has("org", "create"):  # publishers create repositories only in orgs they own
            self.r.run(
                [
                    "org",
                    "create",
                    REPO.partition("/")[0],
                    "--owner",
                    "alice",
                    "--protect",
                    "prod:1",
                ],
                env=self.as_("admin"),
            )
        policy = self.workdir / "repo-policy.yaml"
        default = Path(__file__).resolve().parents[1] / "policies" / "default.yaml"
        policy.write_text(default.read_text().replace("approvals: 1", "approvals: 2"))
        self.r.run(["repo", "create", REPO, "--policy", str(policy)], env=self.as_("alice"))
        self.add_publisher("bob")
        pushed = self.r.run(
            [
                "push",
                str(self.workdir / "model"),
                REPO,
                "--attestation",
                str(self.workdir / "provenance.dsse.json"),
                "--alias",
                "staging",
            ],
            env=self.as_("alice"),
        )
        if self.v1 not in pushed.stdout:
            raise StepFailedError(f"push did not report {self.v1}")
        shown = self.r.run(["bundle", "show", f"{REPO}@staging"], env=self.as_("worker-1"))
        _expect(shown.stdout, self.v1)
        return f"{REPO}@staging -> v1; the registry re-checked digest, scan and policy"

    def refused_moves(self) -> str:
        self.need("alias", "set")
        ref = f"{REPO}@prod"
        by_reader = self.r.run(["alias", "set", ref, self.v1], env=self.as_("worker-1"), expect=1)
        _expect(by_reader.stderr + by_reader.stdout, "forbidden")
        self.need("approve")
        own = f"{REPO}@{self.v1}"
        self.r.run(["approve", own, "--alias", "prod"], env=self.as_("alice"), expect=1)
        return "worker-1 (reader): 403 forbidden; alice may not approve her own bundle"

    def propose_prod(self) -> str:
        ref = f"{REPO}@prod"
        proposed = self.r.run(
            ["alias", "set", ref, self.v1, "--reason", "release 1"], env=self.as_("bob")
        )
        _expect(proposed.stdout, "proposed", "signatures 0/2")
        self.need("alias", "pending")
        pending = self.r.run(["alias", "pending", REPO], env=self.as_("carol"))
        _expect(pending.stdout, "pending")
        by_alice = self.r.run(
            [
                "approve",
                f"{REPO}@{self.v1}",
                "--alias",
                "prod",
                "--key",
                str(self.keys / "alice.key"),
            ],
            env=self.as_("alice"),
            expect=1,
        )
        _expect(by_alice.stderr, "not one of the keys")
        return f"{ref} -> v1 proposed; it waits for two reviewers' signatures"

    def sign_prod(self) -> str:
        self.reviewers_sign(self.v1)
        got = self.r.run(["alias", "get", f"{REPO}@prod"], env=self.as_("worker-1"))
        _expect(got.stdout, self.v1)
        if "UNSIGNED" in got.stdout:
            raise StepFailedError("prod is not signed after two reviewers' signatures")
        return f"{REPO}@prod -> v1, signed by carol and dave (published as TUF metadata)"

    def pull(self) -> str:
        self.need("pull")
        self.need("trust", "root")
        self.r.run(
            ["trust", "root", "--out", str(self.workdir / "root.json")], env=self.as_("worker-1")
        )
        pulled = self.r.run(["pull", f"{REPO}@prod", *self.trust()], env=self.as_("worker-1"))
        lines = pulled.stdout.strip().splitlines()
        if len(lines) < 2 or lines[-2].strip() != self.v1:
            raise StepFailedError(f"pull did not print {self.v1} and a directory")
        self.v1_dir = Path(lines[-1].strip())
        if not self.v1_dir.is_dir():
            raise StepFailedError(f"pull printed {self.v1_dir}, which is not a directory")
        self.r.run(["verify", str(self.v1_dir)], env=self.as_("worker-1"))
        return "v1 pulled, verified against the worker's own trust, re-hashed on disk"

    def boot(self) -> str:
        self.need_vllm()
        booted = self.r.run(
            [
                "boot",
                f"{REPO}@prod",
                *self.trust(),
                "--worker-key",
                str(self.keys / "worker-1.key"),
                "--",
                "--enforce-eager",
            ],
            env=self.as_("worker-1"),
            timeout=1200,
        )
        _expect(booted.stdout, "baseline", "recorded")
        shown = self.r.run(
            [
                "baseline",
                "show",
                f"{REPO}@prod",
                "--trust-root",
                str(self.workdir / "root.json"),
                "--worker-public-key",
                str(self.keys / "worker-1.key.pub"),
            ],
            env=self.as_("carol"),
        )
        _expect(shown.stdout, "1 baseline")
        aggregate = re.search(r"baseline (\S+) recorded", booted.stdout)
        return f"vLLM booted; baseline {aggregate.group(1)[:20] if aggregate else ''}... recorded"

    def reply(self) -> str:
        self.need_vllm()
        proc = self.r.start(
            [
                "boot",
                f"{REPO}@prod",
                *self.trust(),
                "--serve",
                "--port",
                str(self.serve_port),
                "--",
                "--enforce-eager",
                "--served-model-name",
                "tiny-llama",
            ],
            env=self.as_("worker-1"),
            log=self.workdir / "vllm-serve.log",
        )
        base = f"http://127.0.0.1:{self.serve_port}"
        try:
            model = self._wait_for_models(proc, base)
            prompt = "the quick brown fox"
            self.note(
                f"curl -s {base}/v1/completions -H 'Content-Type: application/json' "
                f'-d \'{{"model": "{model}", "prompt": "{prompt}", '
                f'"max_tokens": 12, "temperature": 0}}\''
            )
            answer = httpx.post(
                f"{base}/v1/completions",
                timeout=300,
                json={"model": model, "prompt": prompt, "max_tokens": 12, "temperature": 0},
            )
            if answer.status_code != 200:
                raise StepFailedError(
                    f"completion failed: {answer.status_code} {answer.text[:300]}"
                )
            text = str(answer.json()["choices"][0]["text"])
            self.note(f"reply: {prompt!r} -> {text!r}")
            self.note(
                "(random weights: the words are noise; what matters is which bytes produced them)"
            )
        finally:
            code = self.r.stop(proc, timeout=60)
        self.note(f"SIGTERM forwarded to vLLM; modelward boot --serve exited {code}")
        return f"the served model answered {text[:40]!r}"

    def _wait_for_models(self, proc: subprocess.Popen[bytes], base: str) -> str:
        deadline = time.monotonic() + 1200
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log = (self.workdir / "vllm-serve.log").read_text(errors="replace")[-800:]
                raise StepFailedError(f"modelward boot --serve exited {proc.returncode}: {log}")
            try:
                got = httpx.get(f"{base}/v1/models", timeout=5)
                if got.status_code == 200 and got.json().get("data"):
                    return str(got.json()["data"][0]["id"])
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(2)
        raise StepFailedError("the vLLM server did not come up in 20 minutes")

    def tamper(self) -> str:
        if self.v1_dir is None:
            raise StepFailedError("no pulled directory to tamper with")
        target = self.v1_dir / "model.safetensors"
        self.r.run(["-c", FLIP_BYTE, str(target)], python=True)
        checked = self.r.run(["verify", str(self.v1_dir)], env=self.as_("worker-1"), expect=1)
        _expect(checked.stderr + checked.stdout, "model.safetensors")
        outcome = "verify refused the flipped byte"
        try:
            self.need_vllm()
        except StepSkippedError as exc:
            return f"{outcome}; boot not tried ({exc})"
        booted = self.r.run(
            [
                "boot",
                f"{REPO}@prod",
                *self.trust(),
                "--worker-key",
                str(self.keys / "worker-1.key"),
                "--",
                "--enforce-eager",
            ],
            env=self.as_("worker-1"),
            expect=1,
            timeout=1200,
        )
        _expect(booted.stderr + booted.stdout, "model.safetensors")
        return f"{outcome}; boot refused it before vLLM opened a file"

    def release_v2(self) -> str:
        model = str(self.workdir / "model-v2")
        self.r.run(["-m", "demo.make_model", model, "--seed", "1"], python=True, timeout=600)
        self.r.run(["bundle", "init", model])
        pushed = self.r.run(
            [
                "push",
                model,
                REPO,
                "--sign",
                "--key",
                str(self.keys / "alice.key"),
                "--alias",
                "staging",
            ],
            env=self.as_("alice"),
        )
        self.v2 = _digest(pushed.stdout, "push")
        if self.v2 == self.v1:
            raise StepFailedError("v2 has the same digest as v1")
        self.r.run(
            ["alias", "set", f"{REPO}@prod", self.v2, "--reason", "release 2"], env=self.as_("bob")
        )
        self.reviewers_sign(self.v2)
        return f"bundle v2 = {self.v2[:19]}...; prod -> v2, signed by carol and dave"

    def quarantine(self) -> str:
        self.need("quarantine")
        self.r.run(
            [
                "quarantine",
                f"{REPO}@{self.v2}",
                "--reason",
                "reviewer found an unexpected weight change",
                "--key",
                str(self.keys / "carol.key"),
            ],
            env=self.as_("carol"),
        )
        refused = self.r.run(
            ["pull", f"{REPO}@prod", *self.trust("cache-2")], env=self.as_("worker-1"), expect=1
        )
        _expect(refused.stderr + refused.stdout, "quarantin")
        return "v2 quarantined; the worker refuses to pull prod while it points at v2"

    def rollback(self) -> str:
        self.need("alias", "rollback")
        ref = f"{REPO}@prod"
        rolled = self.r.run(
            ["alias", "rollback", ref, self.v1, "--reason", "v2 quarantined"], env=self.as_("bob")
        )
        _expect(rolled.stdout, "proposed", self.v1)
        self.reviewers_sign(self.v1)
        history = self.r.run(["alias", "history", ref, "--json"], env=self.as_("carol"))
        if not any(move.get("rollback") for move in json.loads(history.stdout)):
            raise StepFailedError("the alias history does not record a rollback")
        pulled = self.r.run(["pull", ref, *self.trust("cache-2")], env=self.as_("worker-1"))
        _expect(pulled.stdout, self.v1)
        if self.has("bundle", "list"):  # every bundle, newest first: its state and aliases
            listed = self.r.run(["bundle", "list", REPO], env=self.as_("carol"))
            _expect(listed.stdout, "quarantined", "prod")
        return "prod -> v1 again (recorded as a rollback); the worker pulls v1"

    def _fleet_serving(self) -> dict[str, str]:
        """What each rehearsal worker serves now (its ready file; none while switching)."""
        listing = self.workdir / "fleet" / "fleet.json"
        if not listing.is_file():
            return {}
        serving = {}
        for worker in json.loads(listing.read_text())["workers"]:
            try:
                ready = json.loads(Path(worker["ready_file"]).read_text())
                serving[str(worker["keyid"])] = str(ready["digest"])
            except (FileNotFoundError, ValueError, KeyError):
                continue
        return serving

    def _wait_for_fleet(self, want: dict[str, str] | str, what: str, timeout: float = 240) -> None:
        """Until the fleet serves ``want`` (one digest for all, or per key id)."""
        deadline = time.monotonic() + timeout
        while True:
            serving = self._fleet_serving()
            done = (
                len(serving) == FLEET_WORKERS and set(serving.values()) == {want}
                if isinstance(want, str)
                else serving == want
            )
            if done:
                return
            if self.fleet is not None and self.fleet.poll() is not None:
                log = (self.workdir / "fleet.log").read_text(errors="replace")[-800:]
                raise StepFailedError(f"the rehearsal fleet exited: {log}")
            if time.monotonic() > deadline:
                raise StepFailedError(f"{what}: not reached in {timeout:.0f} s ({serving})")
            time.sleep(0.5)

    def canary(self) -> str:
        self.need("rollout", "start")
        model = str(self.workdir / "model-v3")
        self.r.run(["-m", "demo.make_model", model, "--seed", "2"], python=True, timeout=600)
        self.r.run(["bundle", "init", model])
        pushed = self.r.run(
            ["push", model, REPO, "--sign", "--key", str(self.keys / "alice.key")],
            env=self.as_("alice"),
        )
        self.v3 = _digest(pushed.stdout, "push")
        ref = f"{REPO}@prod"
        self.note("# a fleet to rehearse with: the admin enrols 3 workers (docs/rollouts.md)")
        self.fleet = self.r.start(
            [
                "-m", "modelward.rehearsal", "fleet", ref,
                "--workers", str(FLEET_WORKERS), "--dir", str(self.workdir / "fleet"),
                "--public-key", str(self.keys / "alice.key.pub"),
                "--trust-root", str(self.workdir / "root.json"),
                "--behave", f"{self.v3}={BAD_V3}",
            ],
            env=self.as_("admin"),
            log=self.workdir / "fleet.log",
            python=True,
        )  # fmt: skip
        self._wait_for_fleet(self.v1, "the rehearsal fleet serving v1")
        time.sleep(3)  # a report from each worker: the registry knows the fleet
        analysis = self.workdir / "analysis.yaml"
        analysis.write_text(ANALYSIS)
        self.note(f"$DEMO/analysis.yaml: {ANALYSIS.strip()}")
        started = self.r.run(
            [
                "rollout",
                "start",
                ref,
                "--to",
                self.v3,
                "--steps",
                "5,20,50,100",
                "--window",
                "10m",
                "--min-samples",
                "200",
                "--analysis",
                str(analysis),
                "--reason",
                "release 3, canary first",
            ],
            env=self.as_("bob"),
        )
        _expect(started.stdout, f"5%: 1 of {FLEET_WORKERS}")
        proposal = re.search(r"proposal #(\d+)", started.stdout)
        if proposal is None:
            raise StepFailedError("rollout start did not name the plan's proposal")
        for name in ("carol", "dave"):
            self.r.run(
                ["trust", "sign", proposal.group(1), "--key", str(self.keys / f"{name}.key")],
                env=self.as_(name),
            )
        advanced = self.r.run(
            ["rollout", "advance", ref, "--reason", "canary: 5% of the workers"],
            env=self.as_("bob"),
        )
        _expect(advanced.stdout, "signed by the alias's role", "5% candidate")
        weights = self.r.run(["rollout", "weights", ref], env=self.as_("worker-1"))
        _expect(weights.stdout, f" 95%  {self.v1}", f"  5%  {self.v3}")
        return f"bundle v3 = {self.v3[:19]}...; prod at step 1 of 4: one worker of 3 runs v3"

    def abort_canary(self) -> str:
        self.need("rollout", "abort")
        ref = f"{REPO}@prod"
        deadline = time.monotonic() + 240
        while True:  # the registry's rollout controller judges the step every 10 s
            quiet = subprocess.run(
                [self.r.modelward(), "rollout", "status", ref, "--json"],
                capture_output=True,
                env=self.r.env_for(self.as_("carol")),
                check=False,
                timeout=120,
            )
            if quiet.returncode == 0 and json.loads(quiet.stdout)["state"] == "aborted":
                break
            if time.monotonic() > deadline:
                raise StepFailedError("the analysis did not abort the canary in 240 s")
            time.sleep(1)
        status = self.r.run(["rollout", "status", ref], env=self.as_("carol"))
        _expect(status.stdout, "aborted", "analysis failed at step 0 (5%)")
        self._wait_for_fleet(self.v1, "every rehearsal worker back on v1")
        if self.fleet is not None:
            self.r.stop(self.fleet)
            self.fleet = None
        weights = self.r.run(["rollout", "weights", ref], env=self.as_("worker-1"))
        _expect(weights.stdout, f"100%  {self.v1}")
        pulled = self.r.run(["pull", ref, *self.trust("cache-2")], env=self.as_("worker-1"))
        _expect(pulled.stdout, self.v1)
        return "the analysis aborted the rollout from the fleet's reports: every worker on v1"

    def audit(self) -> str:
        self.need("audit", "verify")
        log = self.r.run(["audit", "log", "--limit", "1000", "--json"], env=self.as_("carol"))
        events = json.loads(log.stdout)["events"]
        denied = sum(event["action"] == "denied" for event in events)
        verified = self.r.run(["audit", "verify"], env=self.as_("carol"))
        _expect(verified.stdout, "audit chain ok")
        if self.has("trust", "status"):  # the embedded default says its root key is online
            status = self.r.run(["trust", "status"], env=self.as_("carol"))
            _expect(status.stdout, "root key is ONLINE")
        db = f"sqlite:///{self.data / 'registry.db'}"
        self.r.run(["audit", "verify", "--database-url", db])
        return f"{len(events)} events, {denied} of them refused requests; the hash chain verifies"
