"""One tree of errors across attest/, client/, registry/ and loader/ (issue 21): every
exception class is defined once, under one name, and no two names say the same thing in other
words.

A concept is defined at the lowest layer that needs it (attest for what the library decides)
and imported, never copied, by the layers above. The registry's HTTP answers
(registry.errors) and the HTTP client's errors (client.errors) are separate trees
with names of their own.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections import defaultdict
from types import ModuleType

import pytest

PACKAGES = ("modelward.attest", "modelward.client", "modelward.registry", "modelward.loader")

# Names that are known to have been used for one concept; at most one of each set may exist.
SYNONYMS = (
    {"StaleProposal", "ProposalStale"},
    {"BundleQuarantined", "QuarantinedBundle"},
    {"BrokenChain", "ChainBroken"},
    {"InvalidProof", "ProofInvalid"},
    {"DigestMismatch", "IntegrityError"},  # the loader's copy of attest's, now attest's only
)


def _modules() -> list[ModuleType]:
    modules = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        modules.append(package)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            modules.append(importlib.import_module(info.name))
    return modules


def _exception_classes() -> dict[str, set[str]]:
    """Exception class name -> the modules that define a class of that name."""
    defined: dict[str, set[str]] = defaultdict(set)
    for module in _modules():
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
                and not obj.__name__.startswith("_")  # control flow inside one module
            ):
                defined[obj.__name__].add(module.__name__)
    return defined


@pytest.fixture(scope="module")
def defined() -> dict[str, set[str]]:
    classes = _exception_classes()
    assert len(classes) > 50  # the walk found the packages' errors
    return classes


def test_no_two_exception_classes_share_a_name(defined: dict[str, set[str]]) -> None:
    duplicates = {name: sorted(modules) for name, modules in defined.items() if len(modules) > 1}
    assert duplicates == {}


def test_server_answers_and_client_errors_are_told_apart(defined: dict[str, set[str]]) -> None:
    """The registry answers ``NotFound``; the client raises ``NotFoundError`` on reading it."""
    for status in ("BadRequest", "Forbidden", "NotFound", "Conflict"):
        assert defined[status] == {"modelward.registry.errors"}, status
        assert defined[f"{status}Error"] == {"modelward.client.errors"}, status


def test_no_synonyms_of_one_concept(defined: dict[str, set[str]]) -> None:
    for names in SYNONYMS:
        assert len(names & set(defined)) <= 1, sorted(names & set(defined))
    # the same words in another order (StaleProposal / ProposalStale) name one concept
    by_words: dict[tuple[str, ...], set[str]] = defaultdict(set)
    for name in defined:
        by_words[tuple(sorted(re.findall(r"[A-Z][a-z0-9]*", name)))].add(name)
    assert [sorted(v) for v in by_words.values() if len(v) > 1] == []


def test_concepts_live_in_the_lowest_layer(defined: dict[str, set[str]]) -> None:
    """What the library decides is attest's; the registry and the loader import it."""
    for name in (
        "StaleProposal",
        "AuditVerificationError",
        "BrokenChain",
        "InvalidProof",
        "NoteError",
        "MalformedKey",
        "MalformedNote",
        "UnverifiedNote",
        "BadNoteSignature",
        "CheckpointError",
        "MalformedCheckpoint",
        "LogRewritten",
        "TrustedCheckpointRefused",
    ):
        assert defined[name] == {"modelward.attest.errors"}, name


def test_audit_verdicts_are_not_server_faults() -> None:
    """An audit verifier's failure is an attest error: the registry's error handler would
    answer a RegistryError with its status (500 by default), never one of these."""
    from modelward.attest.errors import AttestError, AuditVerificationError
    from modelward.registry.errors import RegistryError

    assert issubclass(AuditVerificationError, AttestError)
    assert not issubclass(AuditVerificationError, RegistryError)
    for sub in AuditVerificationError.__subclasses__():
        assert not issubclass(sub, RegistryError), sub
