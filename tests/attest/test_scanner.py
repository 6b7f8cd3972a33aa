"""The safety scanner against a malicious corpus and a clean tiny model (docs/scanner.md)."""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import modelward.attest.scanner
from modelward.attest.scanner import FileReport, ScanLimits, ScanReport, scan_blob, scan_tree
from modelward.attest.spec import render_spec_template
from tests.attest.corpus import Corpus, build_corpus, canary_pickle, zip_with


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Corpus]:
    base = tmp_path_factory.mktemp("corpus")
    canary = base / "canary"
    return base / "bundle", canary, build_corpus(base / "bundle", canary)


@pytest.fixture(scope="module")
def corpus_report(corpus: tuple[Path, Path, Corpus]) -> ScanReport:
    return scan_tree(corpus[0])


def _rules(report: ScanReport, path: str) -> set[str]:
    return {f.rule for f in report.findings if f.path == path}


def test_public_surface_is_pinned() -> None:
    assert sorted(modelward.attest.scanner.__all__) == [
        "FileReport",
        "Finding",
        "MAX_MODEL_CONFIG_BYTES",
        "SERVING_FILES",
        "ScanLimits",
        "ScanReport",
        "check_serving",
        "scan_blob",
        "scan_tree",
    ]


def test_canary_payload_is_live(tmp_path: Path) -> None:
    """The corpus pickles really would run code: loading one creates its canary."""
    canary = tmp_path / "control-canary"
    pickle.loads(canary_pickle(canary, 2))
    assert canary.exists()


def test_every_attack_is_rejected_naming_the_file(
    corpus: tuple[Path, Path, Corpus], corpus_report: ScanReport
) -> None:
    missing = {
        path: rules - _rules(corpus_report, path)
        for path, rules in corpus[2].expected.items()
        if not rules <= _rules(corpus_report, path)
    }
    assert not missing, missing
    assert not corpus_report.clean


def test_case_and_unicode_collisions_are_findings(
    corpus: tuple[Path, Path, Corpus], corpus_report: ScanReport
) -> None:
    for first, second in corpus[2].collisions:
        flagged = _rules(corpus_report, first) | _rules(corpus_report, second)
        assert "tree.collision" in flagged, (first, second)


def test_scanning_never_loads_a_pickle(
    corpus: tuple[Path, Path, Corpus], corpus_report: ScanReport
) -> None:
    assert corpus_report.findings
    assert not corpus[1].exists()


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("st/overlap.safetensors", ["tensor 'b'", "[4, 12]", "overlap tensor 'w'"]),
        ("st/bomb.safetensors", ["header length 1152921504606846976", "limit"]),
        ("st/out-of-range.safetensors", ["[0, 16]", "past the data section"]),
        ("st/dtype-shape.safetensors", ["shape [2, 3] of F32 needs 24 bytes", "hold 16"]),
        ("model.safetensors", ["archive/data.pkl", "torch"]),
        ("sub/tokenizer_config.json", ["cross-repository", "evil-org/evil-repo--"]),
        ("passwd", ["/etc/passwd"]),
        ("evil.pkl", ["protocol 2", "io.open"]),
    ],
)
def test_findings_give_precise_reasons(
    corpus_report: ScanReport, path: str, words: list[str]
) -> None:
    reasons = " | ".join(f.reason for f in corpus_report.findings if f.path == path)
    for word in words:
        assert word in reasons, reasons


def test_clean_tiny_model_passes(tiny_model: Path) -> None:
    report = scan_tree(tiny_model)
    assert report.findings == ()
    assert report.clean
    kinds = {f.path: f.kind for f in report.files}
    assert kinds["model.safetensors"] == "safetensors"
    assert kinds["config.json"] == "json"
    assert kinds["tokenizer.json"] == "json"


def _sentencepiece_model(tmp_path: Path) -> bytes:
    import sentencepiece as spm

    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(["the quick brown fox jumps over the lazy dog"] * 50))
    prefix = tmp_path / "sp"
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(prefix), vocab_size=30, model_type="bpe", minloglevel=2
    )
    return prefix.with_suffix(".model").read_bytes()


def test_every_allowed_format_passes(tiny_model: Path, tmp_path: Path) -> None:
    (tiny_model / "tokenizer.model").write_bytes(_sentencepiece_model(tmp_path))
    (tiny_model / "chat_template.jinja").write_text(
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    )
    (tiny_model / "merges.txt").write_text("#version: 0.2\nĠ t\nh e\n")
    (tiny_model / "tiktoken.vocab").write_text("IQ== 0\nIg== 1\nIw== 2\n")
    (tiny_model / "README.md").write_text(
        "---\nlicense: mit\n---\n# Tiny\n\n```python\nimport torch\nfrom x import y\n"
        "def f():\n    pass\n```\n"
    )
    # a spec the model's own config admits (a spec it refuses: tests/attest/test_serving_check.py)
    (tiny_model / "modelward.yaml").write_text(render_spec_template(dtype="float32"))
    (tiny_model / "empty.txt").write_bytes(b"")
    report = scan_tree(tiny_model)
    assert report.findings == ()
    kinds = {f.path: f.kind for f in report.files}
    assert kinds["tokenizer.model"] == "sentencepiece"
    assert kinds["chat_template.jinja"] == "jinja template"
    assert kinds["modelward.yaml"] == "bundle spec"


@pytest.mark.parametrize(
    ("name", "data", "rule"),
    [
        ("config.json", b'{"a": 1, "a": 2}', "scan.json"),
        ("config.json", b"not json", "scan.json"),
        ("config.json", b'{"trust_remote_code": true}', "scan.auto_map"),
        ("config.json", b'{"text_config": {"auto_map": {"AutoModel": "m.C"}}}', "scan.auto_map"),
        ("config.json", b'{"custom_pipelines": {"t": {"impl": "p.P"}}}', "scan.auto_map"),
        ("modelward.yaml", b"a: &x 1\nb: *x\n", "scan.yaml"),
        ("modelward.yaml", b"!!python/object/apply:os.system ['id']\n", "scan.yaml"),
        ("notes.txt", b"text\x00with NUL", "scan.unknown"),
        ("blob.bin", b"\x01\x02\x03\x04binary", "scan.unknown"),
        ("tokenizer.model", b"\x0a\x05hello", "scan.sentencepiece"),
        ("data.tar.gz", b"\x1f\x8b\x08\x00" + b"\x00" * 20, "scan.unknown"),
        ("lib.so.1", b"\x7fELF" + b"\x00" * 60, "scan.native"),
        ("mod.wasm", b"\x00asm\x01\x00\x00\x00", "scan.native"),
        (
            "x.keras",
            zip_with({"metadata.json": b"{}", "model.weights.h5": b"\x89HDF\r\n\x1a\n"}),
            "scan.hdf5",
        ),
    ],
)
def test_blob_rules(name: str, data: bytes, rule: str) -> None:
    report = scan_blob(name, io.BytesIO(data), len(data))
    assert rule in {f.rule for f in report.findings}, report
    assert all(f.path == name for f in report.findings)


def test_large_text_is_too_large_not_read() -> None:
    data = b"hello world " * 200
    report = scan_blob(
        "notes.txt", io.BytesIO(data), len(data), ScanLimits(max_text_bytes=1024, probe_bytes=512)
    )
    assert [f.rule for f in report.findings] == ["scan.too-large"]


def test_text_made_of_opcode_letters_is_text() -> None:
    data = b"a" * 200_000 + b"\n" + b"Victor\nPaul\n" * 5000
    report = scan_blob("words.txt", io.BytesIO(data), len(data))
    assert report.findings == ()
    assert report.kind == "text"


def test_large_protocol0_pickle_is_found_from_its_prefix(tmp_path: Path) -> None:
    data = pickle.dumps([{"k": i} for i in range(20_000)] + [np.float64], protocol=0)
    assert len(data) > 64 * 2**10
    data = b"cbuiltins\nprint\n(" + data[:-1] + b"tR."
    report = scan_blob("big.txt", io.BytesIO(data), len(data))
    assert "scan.pickle" in {f.rule for f in report.findings}


def test_numeric_npy_is_unknown_and_allow_globs_admit_it(tmp_path: Path) -> None:
    buf = io.BytesIO()
    np.save(buf, np.arange(4, dtype=np.float32))
    data = buf.getvalue()
    plain = scan_blob("emb/table.npy", io.BytesIO(data), len(data))
    assert [f.rule for f in plain.findings] == ["scan.unknown"]
    admitted = scan_blob(
        "emb/table.npy", io.BytesIO(data), len(data), ScanLimits(allow_globs=("emb/*.npy",))
    )
    assert admitted.findings == ()
    assert "allow_globs" in admitted.kind


def test_allow_globs_never_admit_a_dangerous_format(tmp_path: Path) -> None:
    data = canary_pickle(tmp_path / "canary", 4)
    report = scan_blob("emb/table.npy", io.BytesIO(data), len(data), ScanLimits(allow_globs=("*",)))
    assert "scan.pickle" in {f.rule for f in report.findings}
    assert not (tmp_path / "canary").exists()


def test_numeric_npz_is_unknown_but_pickled_member_is_rejected(tmp_path: Path) -> None:
    buf = io.BytesIO()
    np.savez(buf, a=np.arange(3))
    numeric = scan_blob("a.npz", io.BytesIO(buf.getvalue()), len(buf.getvalue()))
    assert [f.rule for f in numeric.findings] == ["scan.unknown"]
    evil = zip_with({"a.npy": np_bytes(), "b.pkl": b"plain"})
    rules = {f.rule for f in scan_blob("b.npz", io.BytesIO(evil), len(evil)).findings}
    assert rules == {"scan.zip-pickle"}


def np_bytes() -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.arange(3))
    return buf.getvalue()


def test_zip_directory_bomb_is_bounded() -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for i in range(50):
            archive.writestr(f"m{i}.txt", b"x")
    data = buf.getvalue()
    report = scan_blob("many.zip", io.BytesIO(data), len(data), ScanLimits(max_zip_members=10))
    assert [f.rule for f in report.findings] == ["scan.too-large"]


def test_executable_json_is_a_tree_finding(tmp_path: Path) -> None:
    root = tmp_path / "b"
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"a": 1}))
    (root / "config.json").chmod(0o755)
    report = scan_tree(root)
    assert [f.rule for f in report.findings] == ["tree.executable"]


def test_scan_blob_needs_a_seekable_stream() -> None:
    class Pipe(io.RawIOBase):
        def seekable(self) -> bool:
            return False

    with pytest.raises(ValueError, match="seekable"):
        scan_blob("x", Pipe(), 0)  # type: ignore[arg-type]


def test_missing_root_raises(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        scan_tree(tmp_path / "absent")


def test_reports_are_frozen_plain_data(tiny_model: Path) -> None:
    report = scan_tree(tiny_model)
    assert all(isinstance(f, FileReport) for f in report.files)
    with pytest.raises(AttributeError):
        report.files[0].kind = "safetensors"  # type: ignore[misc]


MAGICS = [
    b"",
    b"\x80\x04\x95",
    b"PK\x03\x04",
    b"PK\x05\x06",
    b"\x93NUMPY\x01\x00",
    b"\x93NUMPY\x02\x00",
    b"\x1f\x8b",
    b"BZh",
    b"\xfd7zXZ\x00",
    b"ZF0x",
    b"x\x9c",
    b"\x0a",
    b"{",
    b"[",
    b"#!",
    b"MZ",
    b"\x7fELF",
    b"\x89HDF\r\n\x1a\n",
    b"(",
    b"c",
]
NAMES = [
    "x.safetensors",
    "config.json",
    "tokenizer.model",
    "modelward.yaml",
    "a.npy",
    "b.npz",
    "notes.txt",
    "blob",
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(NAMES), st.sampled_from(MAGICS), st.binary(max_size=200))
def test_scan_blob_is_total(name: str, magic: bytes, tail: bytes) -> None:
    """Whatever the bytes, scan_blob returns a report: it never raises on content."""
    data = magic + tail
    report = scan_blob(name, io.BytesIO(data), len(data))
    assert all(f.path == name and f.rule.startswith("scan.") for f in report.findings)


def test_pickle_walk_past_the_probe_is_bounded_by_max_pickle_walk(tmp_path: Path) -> None:
    """A bare pickle behind a first string longer than the probe is found by reading on; the
    reading stops at ScanLimits.max_pickle_walk, and a stream the unpicklers are still
    reading there is undecided: refused, never admitted as text."""
    data = b"S'" + b"a" * 100_000 + b"'\n0cos\nsystem\n(S'true'\ntR."
    found = scan_blob("notes.txt", io.BytesIO(data), len(data))
    assert [f.rule for f in found.findings] == ["scan.pickle"]
    assert "posix.system" in found.findings[0].reason or "os.system" in found.findings[0].reason
    bounded = scan_blob(
        "notes.txt", io.BytesIO(data), len(data), ScanLimits(max_pickle_walk=50_000)
    )
    assert [f.rule for f in bounded.findings] == ["scan.pickle"]
    assert "50000 bytes (max_pickle_walk)" in bounded.findings[0].reason
    with pytest.raises(ValueError, match="max_pickle_walk"):
        ScanLimits(max_pickle_walk=0)
    with pytest.raises(ValueError, match="max_pickle_ops"):
        ScanLimits(max_pickle_ops=0)
