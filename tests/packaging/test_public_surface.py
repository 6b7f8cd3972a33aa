"""Each package's public surface, pinned (as httpx pins its exports): a change here is a
deliberate API change."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

EXPECTED = {
    "modelward": ["__version__"],
    "modelward.attest": [
        "AttestError",
        "BlobReader",
        "BundleError",
        "BundleVerdict",
        "Decision",
        "DirectoryReader",
        "Manifest",
        "Policy",
        "PolicyDenied",
        "PolicyError",
        "TrustFlags",
        "TrustSet",
        "TrustedBundle",
        "UntrustedSigner",
        "VerificationError",
        "VerifiedStatement",
        "build_bundle",
        "bundle_digest",
        "parse_manifest",
        "policy_from_flags",
        "verify_bundle",
        "verify_bundle_result",
    ],
    "modelward.registry": ["RegistryError", "Settings", "create_app", "load_settings"],
    "modelward.client": [
        "APIError",
        "Reference",
        "RegistryClient",
        "RegistryClientError",
        "TransferOptions",
        "TransportError",
        "parse_reference",
    ],
    "modelward.loader": [
        "LoaderError",
        "PulledBundle",
        "RefusedError",
        "RegistrySource",
        "pull_bundle",
    ],
    "modelward.cli": ["COMMANDS", "app", "is_modelward_error", "main"],
}


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_exported_names_are_pinned(module: str) -> None:
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == sorted(EXPECTED[module])
    for name in mod.__all__:
        assert hasattr(mod, name), name


def test_importing_the_registry_client_loads_no_server_stack() -> None:
    code = (
        "import sys, modelward.registry, modelward.client, modelward.loader; "
        "print(sorted(m for m in ('fastapi', 'sqlalchemy', 'vllm', 'torch') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_verifier_is_the_only_trusted_bundle_maker() -> None:
    """Nothing outside attest/verifier.py constructs a TrustedBundle."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    makers = [
        str(path.relative_to(root))
        for folder in ("attest", "registry", "loader")
        for path in (root / folder).rglob("*.py")
        if "TrustedBundle(" in path.read_text() and path.name != "verifier.py"
    ]
    assert makers == []
