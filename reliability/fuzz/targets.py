"""The fuzz targets: every parser in modelward that takes untrusted bytes.

Each ``Target`` names the public function it drives, the exception classes that function
documents for bad input (anything else is a finding), how to build its seed corpus from real
inputs, and the properties it checks on a normal return. Nothing here imports modelward at
module import time: under atheris the modules must be imported inside
``atheris.instrument_imports()`` to be coverage-instrumented.

``prepare(ctx)`` writes the shared material once per campaign into ``ctx``: signing keys
(two trusted, one not), a tiny bundle and its manifest, an OMS signature over a fixture
model, copies of the OMS fixture models; every target and seed builder reads it back.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import pickle
import shutil
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["SHARED_FIXTURES", "TARGETS", "Target", "prepare"]

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_FIXTURES = Path(
    os.environ.get("MODELWARD_SHARED_FIXTURES") or REPO_ROOT.parent / "shared" / "fixtures"
)
SIGSTORE = SHARED_FIXTURES / "sigstore"
OMS = SHARED_FIXTURES / "oms"
PRODUCTION_ROOT = SIGSTORE / "trusted-roots" / "production.json"
CONFORMANCE_IDENTITY = (
    "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/"
    ".github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main"
)
CONFORMANCE_ISSUER = "https://token.actions.githubusercontent.com"
OMS_IDENTITY = "stefanb@us.ibm.com"
OMS_ISSUER = "https://sigstore.verify.ibm.com/oauth2"
OMS_KINDS = {
    "key": "v1.1.0-elliptic-key",
    "x509": "v1.1.0-certificate",
    "sigstore": "v1.1.0-sigstore",
}

Run = Callable[[bytes], None]


@dataclass(frozen=True)
class Target:
    """One fuzz target. ``build(ctx)`` returns the function that takes one input."""

    name: str
    what: str
    documented: tuple[str, ...]  # dotted exception class names, resolved late
    build: Callable[[Path], Run]
    seeds: Callable[[Path], dict[str, bytes]]
    max_len: int = 16384
    instrument: tuple[str, ...] = ("modelward",)
    modules: tuple[str, ...] = ()  # attest/ files whose line coverage the campaign reports


def _fail(message: str) -> None:
    from reliability.fuzz.harness import InvariantViolation

    raise InvariantViolation(message)


# -- shared material ---------------------------------------------------------------------
def _bundle_files(root: Path) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 16}))
    save_file({"w": np.arange(16, dtype=np.float32)}, str(root / "model.safetensors"))
    (root / "README.md").write_text("# tiny\n\nA bundle made for fuzzing.\n")


def prepare(ctx: Path) -> Path:
    """Write the shared material into ``ctx`` (idempotent); return ``ctx``."""
    from modelward.attest.keys import generate_private_key, public_key_pem
    from modelward.attest.manifest import build_bundle
    from modelward.attest.oms import sign_oms

    if (ctx / "ready").exists():
        return ctx
    ctx.mkdir(parents=True, exist_ok=True)
    keys = ctx / "keys"
    keys.mkdir(exist_ok=True)
    from cryptography.hazmat.primitives import serialization

    for name, kind in (("ed", "ed25519"), ("p256", "ecdsa-p256"), ("stranger", "ed25519")):
        key = generate_private_key(kind)  # type: ignore[arg-type]
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        (keys / f"{name}.key").write_bytes(pem)
        (keys / f"{name}.pub").write_bytes(public_key_pem(key.public_key()))
    bundle = ctx / "bundle"
    _bundle_files(bundle)
    (ctx / "manifest.json").write_bytes(build_bundle(bundle).manifest.raw)
    # OMS fixture models (read-only fixtures copied, so a run never touches them)
    for kind, folder in OMS_KINDS.items():
        dst = ctx / "oms" / kind
        if not dst.exists():
            shutil.copytree(OMS / folder, dst)
            for f in dst.iterdir():
                f.chmod(0o644)
    # our own OMS key signature over the elliptic-key model and over the bundle
    key_root = ctx / "oms" / "key"
    (ctx / "oms-ours.sig").write_bytes(
        sign_oms(key_root, keys / "p256.key", ignore_paths=["ignore-me"])
    )
    (ctx / "oms-bundle.sig").write_bytes(sign_oms(bundle, keys / "p256.key"))
    (ctx / "ready").write_text("ok\n")
    return ctx


def _private(ctx: Path, name: str) -> Any:
    from modelward.attest.keys import load_private_key

    return load_private_key(ctx / "keys" / f"{name}.key")


def _trust(ctx: Path) -> Any:
    """Two trusted keys, the OMS fixture key and CA, and two Sigstore identities."""
    from cryptography import x509

    from modelward.attest.keys import load_public_key, trusted_key
    from modelward.attest.policy import trusted_public_key
    from modelward.attest.trust import TrustedCA, TrustedIdentity, TrustSet

    keys = [
        trusted_key(name, load_public_key((ctx / "keys" / f"{name}.pub").read_bytes()))
        for name in ("ed", "p256")
    ]
    keys.append(
        trusted_public_key(
            "oms-fixture", (OMS / "keys" / "signing-key-pub.pem").read_bytes(), "fixture"
        )
    )
    ca = TrustedCA(
        "oms-ca",
        roots=tuple(x509.load_pem_x509_certificates((OMS / "keys" / "ca-cert.pem").read_bytes())),
        intermediates=tuple(
            x509.load_pem_x509_certificates((OMS / "keys" / "int-ca-cert.pem").read_bytes())
        ),
    )
    identities = (
        TrustedIdentity("conformance", CONFORMANCE_IDENTITY, CONFORMANCE_ISSUER, PRODUCTION_ROOT),
        TrustedIdentity("oms-keyless", OMS_IDENTITY, OMS_ISSUER, PRODUCTION_ROOT),
    )
    return TrustSet(keys=tuple(keys), cas=(ca,), identities=identities)


def _statement(digest: str, predicate: dict[str, Any] | None = None) -> bytes:
    from modelward.attest.provenance import make_provenance
    from modelward.attest.statement import PredicateType, make_statement

    if predicate is None:
        from datetime import UTC, datetime

        now = datetime(2026, 1, 1, tzinfo=UTC)
        predicate = make_provenance(started_on=now, finished_on=now)
    return make_statement("bundle", digest, PredicateType.PROVENANCE, predicate)


def _manifest_digest(ctx: Path) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256((ctx / "manifest.json").read_bytes()).hexdigest()


def _fixture_bundles() -> dict[str, bytes]:
    seeds = {
        f"sigstore-{case.name}": (case / "bundle.sigstore.json").read_bytes()
        for case in sorted(SIGSTORE.iterdir())
        if (case / "bundle.sigstore.json").exists()
    }
    for folder in OMS_KINDS.values():
        seeds[f"oms-{folder}"] = (OMS / folder / "model.sig").read_bytes()
    return seeds


def _payloads(documents: dict[str, bytes]) -> dict[str, bytes]:
    """The DSSE payloads inside Sigstore bundles / DSSE envelopes, decoded."""
    out: dict[str, bytes] = {}
    for name, data in documents.items():
        doc = json.loads(data)
        envelope = doc.get("dsseEnvelope", doc)
        if isinstance(envelope, dict) and isinstance(envelope.get("payload"), str):
            out[f"payload-{name}"] = base64.b64decode(envelope["payload"])
    return out


# -- scanner targets ---------------------------------------------------------------------
KNOWN_RULE_PREFIX = ("scan.", "tree.")


def _scan_run(
    names: tuple[str, ...], check: Callable[[str, bytes, Any], None] | None = None
) -> Callable[[Path], Run]:
    def build(_ctx: Path) -> Run:
        from modelward.attest.scanner import FileReport, scan_blob

        def run(data: bytes) -> None:
            for name in names:
                report = scan_blob(name, io.BytesIO(data), len(data))
                if not isinstance(report, FileReport) or report.path != name:
                    _fail(f"scan_blob({name!r}) returned {report!r}")
                if not isinstance(report.kind, str) or not report.kind:
                    _fail(f"scan_blob({name!r}) returned an empty kind")
                for f in report.findings:
                    if f.path != name or not f.rule.startswith(KNOWN_RULE_PREFIX):
                        _fail(f"scan_blob({name!r}) returned a malformed finding {f!r}")
                if check is not None:
                    check(name, data, report)

        return run

    return build


def _check_safetensors(name: str, data: bytes, report: Any) -> None:
    """Differential: what the scanner admits as safetensors, the safetensors library loads."""
    if report.findings or report.kind != "safetensors":
        return
    import safetensors

    try:
        safetensors.deserialize(data)  # type: ignore[no-untyped-call]
    except safetensors.SafetensorError as exc:
        _fail(f"scan_blob admits {name} as safetensors; the library refuses it: {exc}")


def _safetensors_seeds(ctx: Path) -> dict[str, bytes]:
    import numpy as np
    from safetensors.numpy import save

    seeds = {
        "bundle": (ctx / "bundle" / "model.safetensors").read_bytes(),
        "dtypes": save(
            {
                "f16": np.ones((2, 3), dtype=np.float16),
                "i8": np.arange(5, dtype=np.int8),
                "b": np.array([True, False]),
                "i64": np.arange(3, dtype=np.int64),
                "u8": np.zeros((0, 4), dtype=np.uint8),
            }
        ),
        "scalar-metadata": save(
            {"s": np.array(3.0, dtype=np.float64)}, metadata={"format": "pt", "note": "fuzz"}
        ),
        "empty": save({}),
        "many": save(
            {f"layer.{i}.weight": np.full((2, 2), i, dtype=np.float32) for i in range(12)}
        ),
    }
    header = b'{"__metadata__":{"format":"pt"}}'
    seeds["hand-header"] = len(header).to_bytes(8, "little") + header
    return seeds


def _dangerous_pickle(name: str, data: bytes, report: Any) -> None:
    """Differential: a pickle stream that imports a callable is never admitted."""
    if report.findings:
        return
    import pickletools

    try:
        ops = {op.name for op, _arg, _pos in pickletools.genops(data)}
    except Exception:  # noqa: BLE001 - not a complete pickle stream: nothing to compare
        return
    risky = ops & {"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "NEWOBJ", "NEWOBJ_EX"}
    if risky:
        _fail(
            f"scan_blob admits {name} ({report.kind}); it is a pickle stream with "
            f"{', '.join(sorted(risky))}"
        )


class _Callable:
    """Pickles as a call of ``os.getcwd`` (harmless; the bytes are never unpickled)."""

    def __reduce__(self) -> tuple[Any, ...]:
        import os

        return (os.getcwd, ())


def _pickle_seeds(_ctx: Path) -> dict[str, bytes]:
    import numpy as np

    seeds: dict[str, bytes] = {}
    value = {"weights": [1.0, 2.0], "name": "w", "shape": (2,), "nested": {"a": b"xy"}}
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        seeds[f"dict-p{proto}"] = pickle.dumps(value, protocol=proto)
        seeds[f"callable-p{proto}"] = pickle.dumps([_Callable()], protocol=proto)
    seeds["numpy-p4"] = pickle.dumps(np.arange(4, dtype=np.float32), protocol=4)
    seeds["gzip"] = gzip.compress(pickle.dumps(value, protocol=2))
    seeds["zlib-joblib"] = zlib.compress(pickle.dumps([_Callable()], protocol=3))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps({"w": 1}, protocol=2))
        zf.writestr("archive/version", "3\n")
        zf.writestr("archive/data/0", b"\0" * 16)
    seeds["torch-zip"] = buf.getvalue()
    npy = io.BytesIO()
    np.save(npy, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    seeds["npy-object"] = npy.getvalue()
    seeds["proto0-global"] = b"cos\ngetcwd\n(tR."
    return seeds


def _tokenizer_json() -> bytes:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))  # noqa: S106 - a token, not a secret
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 10, trainer=trainer)
    return tok.to_str().encode()


def _check_json(name: str, data: bytes, report: Any) -> None:
    """Differential: an admitted config that transformers would read names no remote code."""
    if report.findings or report.kind != "json":
        return
    try:
        document = json.loads(data.decode("utf-8"))
    except ValueError:
        _fail(f"scan_blob admits {name} as JSON; json.loads refuses it")
        return
    stack: list[Any] = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("auto_map", "custom_pipelines") and isinstance(value, dict | list | str):
                    _fail(f"scan_blob admits {name} with {key!r}: remote code not flagged")
                if key == "trust_remote_code" and value is True:
                    _fail(f"scan_blob admits {name} with trust_remote_code: true")
                stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)


def _json_seeds(_ctx: Path) -> dict[str, bytes]:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 128,
        "num_attention_heads": 2,
        "num_hidden_layers": 2,
        "vocab_size": 300,
        "rope_scaling": None,
        "torch_dtype": "float32",
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-06,
    }
    return {
        "config": json.dumps(config, indent=2).encode(),
        "config-auto-map": json.dumps(
            {**config, "auto_map": {"AutoModel": "other/repo--modeling.MyModel"}}
        ).encode(),
        "generation-config": json.dumps({"bos_token_id": 1, "eos_token_id": 2}).encode(),
        "tokenizer-config": json.dumps(
            {
                "bos_token": "<s>",
                "eos_token": "</s>",
                "model_max_length": 2048,
                "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
                "added_tokens_decoder": {"0": {"content": "<unk>", "special": True}},
            }
        ).encode(),
        "tokenizer": _tokenizer_json(),
        "special-tokens": b'{"bos_token":"<s>","eos_token":"</s>","unk_token":"<unk>"}',
    }


# -- attest targets ----------------------------------------------------------------------
def _manifest_build(_ctx: Path) -> Run:
    from modelward.attest.manifest import bundle_digest, parse_manifest

    def run(data: bytes) -> None:
        manifest = parse_manifest(data)
        if manifest.raw != data or manifest.digest != bundle_digest(data):
            _fail("parse_manifest: raw bytes or digest differ from the input")
        if not manifest.layers:
            _fail("parse_manifest accepted a manifest without layers")
        paths = [layer.path for layer in manifest.layers]
        if len(set(paths)) != len(paths):
            _fail("parse_manifest accepted duplicate layer paths")

    return run


def _manifest_seeds(ctx: Path) -> dict[str, bytes]:
    from modelward.attest.manifest import build_bundle

    seeds = {"bundle": (ctx / "manifest.json").read_bytes()}
    other = ctx / "seed-bundles" / "nested"
    _bundle_files(other)
    (other / "tokenizer").mkdir(exist_ok=True)
    (other / "tokenizer" / "tokenizer.json").write_text('{"version":"1.0"}')
    (other / "docs_ü.md").write_text("unicode name\n")
    (other / "empty.txt").write_bytes(b"")
    seeds["nested"] = build_bundle(other).manifest.raw
    return seeds


def _dsse_build(ctx: Path) -> Run:
    from modelward.attest.dsse import verify_envelope
    from modelward.attest.trust import TrustSet

    trust = TrustSet(keys=_trust(ctx).keys[:2])

    def run(data: bytes) -> None:
        stmt = verify_envelope(data, trust)
        if not stmt.signers or stmt.kind != "dsse":
            _fail("verify_envelope returned a statement without a trusted signer")
        names = [s.name for s in stmt.signers]
        if len(set(names)) != len(names):
            _fail(f"verify_envelope counted a signer twice: {names}")

    return run


def _dsse_seeds(ctx: Path) -> dict[str, bytes]:
    from modelward.attest.dsse import sign_envelope

    payload = _statement(_manifest_digest(ctx))
    ed, p256, stranger = (_private(ctx, n) for n in ("ed", "p256", "stranger"))
    return {
        "ed": sign_envelope(payload, [ed]),
        "p256": sign_envelope(payload, [p256]),
        "both": sign_envelope(payload, [ed, p256]),
        "stranger": sign_envelope(payload, [stranger]),
        "other-type": sign_envelope(b'{"hello": "world"}', [ed], "application/json"),
        **{
            f"envelope-{k}": json.dumps(json.loads(v)["dsseEnvelope"]).encode()
            for k, v in _fixture_bundles().items()
        },
    }


def _statement_build(_ctx: Path) -> Run:
    from modelward.attest.statement import parse_statement

    def run(data: bytes) -> None:
        statement, predicate_type, subjects = parse_statement(data)
        if not subjects or not predicate_type or not isinstance(statement, dict):
            _fail("parse_statement returned an empty part")

    return run


def _statement_seeds(ctx: Path) -> dict[str, bytes]:
    seeds = {"provenance": _statement(_manifest_digest(ctx))}
    seeds.update(_payloads(_fixture_bundles()))
    seeds.update(_payloads({"dsse": _dsse_seeds(ctx)["both"]}))
    return seeds


def _sigstore_build(ctx: Path) -> Run:
    from modelward.attest.sigstore_verify import verify_sigstore_bundle
    from modelward.attest.trust import TrustSet

    trust = TrustSet(identities=_trust(ctx).identities)

    def run(data: bytes) -> None:
        stmt = verify_sigstore_bundle(data, trust)
        if not stmt.signers:
            _fail("verify_sigstore_bundle returned a statement without a signer")

    return run


def _sigstore_seeds(_ctx: Path) -> dict[str, bytes]:
    return _fixture_bundles()


def _oms_build(ctx: Path) -> Run:
    from modelward.attest._oms_envelope import parse_envelope
    from modelward.attest.oms import verify_oms

    trust = _trust(ctx)

    def run(data: bytes) -> None:
        kind = parse_envelope(data).kind
        stmt = verify_oms(data, ctx / "oms" / kind, trust, ignore_paths=["ignore-me"])
        if not stmt.signers or stmt.kind != "oms":
            _fail("verify_oms returned a statement without a signer")

    return run


def _oms_seeds(ctx: Path) -> dict[str, bytes]:
    seeds = {k: v for k, v in _fixture_bundles().items() if k.startswith("oms-")}
    seeds["ours"] = (ctx / "oms-ours.sig").read_bytes()
    return seeds


def _layout_dir(ctx: Path) -> Path:
    """A real OCI layout of the shared bundle (with a DSSE referrer), made once."""
    from modelward.attest.manifest import build_bundle
    from modelward.attest.oci_layout import LayoutWriter

    layout = ctx / "oci-layout"
    if (layout / "index.json").exists():
        return layout
    shutil.rmtree(layout, ignore_errors=True)
    built = build_bundle(ctx / "bundle")
    layers = {layer.path: layer for layer in built.manifest.layers}
    with LayoutWriter(layout) as writer:
        writer.add_bundle(built.manifest.raw, "prod")
        writer.put_bytes(built.config_bytes)
        for file in built.files:
            layer = layers[file.path]
            writer.put_file(layer.digest, layer.size, _copier(file.abspath), fill_verifies=False)
        writer.add_attestation(
            built.manifest.raw,
            b'{"payloadType":"x","payload":"","signatures":[]}',
            "dsse",
            "https://slsa.dev/provenance/v1",
        )
        writer.commit()
    return layout


def _copier(source: Path) -> Callable[[Path], None]:
    def fill(path: Path) -> None:
        shutil.copyfile(source, path)

    return fill


def _layout_build(ctx: Path) -> Run:
    import tempfile

    from modelward.attest.oci_layout import LayoutLimits, open_layout

    source = _layout_dir(ctx)
    work = Path(tempfile.mkdtemp(prefix="fuzz-layout-", dir=ctx))
    shutil.copytree(source, work / "layout")
    index = work / "layout" / "index.json"
    limits = LayoutLimits()

    def run(data: bytes) -> None:
        index.write_bytes(data)
        layout = open_layout(work / "layout", limits)
        for tag in layout.tags():
            bundle = layout.bundle(tag)
            if (
                bundle.digest
                != "sha256:"
                + hashlib.sha256(
                    (work / "layout" / "blobs" / "sha256" / bundle.digest[7:]).read_bytes()
                ).hexdigest()
            ):
                _fail("open_layout: a bundle's digest is not the sha256 of its manifest blob")

    return run


def _layout_seeds(ctx: Path) -> dict[str, bytes]:
    index = (_layout_dir(ctx) / "index.json").read_bytes()
    return {"index": index, "empty": b'{"schemaVersion":2,"manifests":[]}'}


def _policy_build(_ctx: Path) -> Run:
    from modelward.attest.policy import Policy, load_policy

    def run(data: bytes) -> None:
        policy = load_policy(data, source="fuzz")
        if not isinstance(policy, Policy) or policy.threshold < 1:
            _fail(f"load_policy returned {policy!r}")

    return run


def _policy_seeds(_ctx: Path) -> dict[str, bytes]:
    policies = REPO_ROOT / "policies"
    seeds = {p.stem: p.read_bytes() for p in sorted((policies / "examples").glob("*.yaml"))}
    seeds["default"] = (policies / "default.yaml").read_bytes()
    alice = (policies / "examples" / "keys" / "alice.pub").read_text()
    ca = (policies / "examples" / "certs" / "ca-cert.pem").read_text()

    def indent(text: str, n: int) -> str:
        return "\n".join(" " * n + line for line in text.strip().splitlines())

    seeds["inline"] = (
        "version: 1\nsigners:\n  keys:\n    - name: alice\n      pem: |\n"
        f"{indent(alice, 8)}\n  cas:\n    - name: ca\n      roots:\n        - |\n"
        f"{indent(ca, 10)}\n"
        "threshold: 2\nrequired_predicate_types: []\nfiles:\n  allow_globs: ['*.bin']\n"
        "limits:\n  max_files: 10\naliases:\n  - pattern: prod\n    roles: [publisher]\n"
        "    protected: true\n    approvals: 1\n    require_baseline: true\n"
    ).encode()
    return seeds


def _verifier_build(ctx: Path) -> Run:
    from modelward.attest.policy import load_policy
    from modelward.attest.verifier import DirectoryReader, verify_bundle_result

    manifest = (ctx / "manifest.json").read_bytes()
    ed_pem = (ctx / "keys" / "ed.pub").read_text()
    policy = load_policy(
        (
            "version: 1\nsigners:\n  keys:\n    - name: ed\n      pem: |\n"
            + "\n".join("        " + line for line in ed_pem.strip().splitlines())
            + "\nthreshold: 1\nrequired_predicate_types: []\n"
        ).encode(),
        source="fuzz-policy",
    )
    trust = _trust(ctx)
    reader = DirectoryReader(ctx / "bundle")

    def run(data: bytes) -> None:
        verdict = verify_bundle_result(
            manifest,
            [data],
            policy=policy,
            trust=trust,
            reader=reader,
            oms_ignore_paths=("ignore-me",),
        )
        placed = len(verdict.verified) + len(verdict.ignored) + len(verdict.rejected)
        if placed != 1:
            _fail(f"verify_bundle_result placed one attestation {placed} times")
        if verdict.findings:
            _fail(f"the clean bundle has scan findings: {verdict.findings}")
        if verdict.allowed and not verdict.verified:
            _fail("verify_bundle_result allowed the bundle with no verified attestation")
        if verdict.rejected and verdict.allowed:
            _fail("verify_bundle_result allowed a bundle with a rejected attestation")

    return run


def _verifier_seeds(ctx: Path) -> dict[str, bytes]:
    from modelward.attest.dsse import sign_envelope

    digest = _manifest_digest(ctx)
    ed, stranger = _private(ctx, "ed"), _private(ctx, "stranger")
    seeds = {
        "dsse-trusted": sign_envelope(_statement(digest), [ed]),
        "dsse-other-bundle": sign_envelope(_statement("sha256:" + "ab" * 32), [ed]),
        "dsse-stranger": sign_envelope(_statement(digest), [stranger]),
        "oms-bundle": (ctx / "oms-bundle.sig").read_bytes(),
        "not-json": b"hello",
    }
    seeds.update(_fixture_bundles())
    return seeds


ATTEST_ERROR = "modelward.attest.errors.AttestError"
VERIFICATION_ERROR = "modelward.attest.errors.VerificationError"

TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target(
            "safetensors",
            "scan_blob('model.safetensors', ...) + safetensors library diff",
            (),
            _scan_run(("model.safetensors",), _check_safetensors),
            _safetensors_seeds,
            modules=("scanner/_safetensors.py", "scanner/_classify.py"),
        ),
        Target(
            "manifest",
            "attest.manifest.parse_manifest(data)",
            ("modelward.attest.errors.ManifestError",),
            _manifest_build,
            _manifest_seeds,
            modules=("manifest.py",),
        ),
        Target(
            "dsse",
            "attest.dsse.verify_envelope(data, TrustSet(2 keys))",
            (VERIFICATION_ERROR,),
            _dsse_build,
            _dsse_seeds,
            modules=("dsse.py",),
        ),
        Target(
            "statement",
            "attest.statement.parse_statement(data)",
            (VERIFICATION_ERROR,),
            _statement_build,
            _statement_seeds,
            modules=("statement.py",),
        ),
        Target(
            "sigstore",
            "attest.sigstore_verify.verify_sigstore_bundle(data, 2 identities, fixture root)",
            (VERIFICATION_ERROR,),
            _sigstore_build,
            _sigstore_seeds,
            max_len=32768,
            instrument=("modelward", "sigstore", "sigstore_models"),
            modules=("sigstore_verify.py",),
        ),
        Target(
            "oms",
            "attest._oms_envelope.parse_envelope + attest.oms.verify_oms(data, model)",
            (VERIFICATION_ERROR,),
            _oms_build,
            _oms_seeds,
            max_len=32768,
            instrument=("modelward", "sigstore", "sigstore_models"),
            modules=("oms.py", "_oms_envelope.py", "_oms_manifest.py"),
        ),
        Target(
            "oci_layout",
            "attest.oci_layout.open_layout over a real layout, index.json = data",
            ("modelward.attest.oci_layout.LayoutError",),
            _layout_build,
            _layout_seeds,
            modules=("oci_layout.py",),
        ),
        Target(
            "policy",
            "attest.policy.load_policy(data)",
            ("modelward.attest.errors.PolicyError",),
            _policy_build,
            _policy_seeds,
            modules=("policy/_load.py", "_yaml.py"),
        ),
        Target(
            "pickle",
            "scan_blob on 'pytorch_model.bin' and 'model.pkl' + pickletools diff",
            (),
            _scan_run(("pytorch_model.bin", "model.pkl"), _dangerous_pickle),
            _pickle_seeds,
            modules=("scanner/_pickle.py", "scanner/_archive.py", "scanner/_magic.py"),
        ),
        Target(
            "json",
            "scan_blob on 'tokenizer.json' and 'config.json' + json.loads diff",
            (),
            _scan_run(("tokenizer.json", "config.json"), _check_json),
            _json_seeds,
            max_len=65536,
            modules=("scanner/_structured.py", "scanner/_classify.py"),
        ),
        Target(
            "verifier",
            "attest.verifier.verify_bundle_result(manifest, [data], ...)",
            ("modelward.attest.errors.BundleError",),
            _verifier_build,
            _verifier_seeds,
            max_len=32768,
            instrument=("modelward", "sigstore", "sigstore_models"),
            modules=("verifier.py", "verify.py", "policy/_evaluate.py"),
        ),
    )
}
