"""The read rule has one way in (issue 31): a repository is looked up by name only through
``repos.listing.readable_repo`` (``repos.service.get_repo`` is it, and needs the caller),
so a new read door cannot forget private repositories. The few lookups by name that are
not a read door are listed here, each with the reason it is not one; a new one fails this
test until it uses the rule (or is added here with its reason)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from modelward.registry.domains.repos import listing, service

REGISTRY = Path(__file__).resolve().parents[2] / "registry"

# (file, function) that compare ``Repository.name ==`` something, and why that is no door.
ALLOWED = {
    ("domains/repos/listing.py", "readable_repo"): "the rule itself",
    ("domains/repos/service.py", "create_repo"): "is the name free (org owners, admins)",
    ("domains/repos/service.py", "writable_repo"): "publishers read what they publish to",
    ("domains/repos/service.py", "authorized_repo"): "a write its caller was authorized for",
    ("domains/oci/auth.py", "granted"): "push scope, from readable_repos",
    ("domains/signing/role_access.py", "may_read_role"): "the rule for TUF role files",
    ("domains/signing/sign.py", "_excluded"): "the two-person rule, no answer to a caller",
    (
        "domains/signing/sign.py",
        "_evaluators",
    ): "the rule's distinct_from, no answer to a caller",
    (
        "domains/signing/tuf/state.py",
        "repository_trusts",
    ): "TUF delegations: every repository, no caller",
}
# callers of ``authorized_repo`` (no read rule: the caller was authorized for the write)
AUTHORIZED_REPO_CALLERS = {("domains/moves/service.py", "record_move")}


def _functions(path: Path) -> list[tuple[str, ast.AST]]:
    tree = ast.parse(path.read_text())
    out: list[tuple[str, ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out.extend((node.name, child) for child in ast.walk(node))
    return out


def _is_repository_name(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "name"
        and isinstance(node.value, ast.Name)
        and node.value.id == "Repository"
    )


def test_get_repo_needs_the_caller() -> None:
    for function in (service.get_repo, listing.readable_repo):
        parameter = inspect.signature(function).parameters["caller"]
        assert parameter.default is inspect.Parameter.empty


def test_no_lookup_of_a_repository_by_name_escapes_the_read_rule() -> None:
    found: set[tuple[str, str]] = set()
    authorized: set[tuple[str, str]] = set()
    for path in REGISTRY.rglob("*.py"):
        rel = str(path.relative_to(REGISTRY))
        for function, node in _functions(path):
            if (
                isinstance(node, ast.Compare)
                and any(isinstance(op, ast.Eq) for op in node.ops)
                and (
                    _is_repository_name(node.left)
                    or any(map(_is_repository_name, node.comparators))
                )
            ):
                found.add((rel, function))
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "authorized_repo"
            ):
                authorized.add((rel, function))
    assert found <= set(ALLOWED), sorted(found - set(ALLOWED))
    assert authorized == AUTHORIZED_REPO_CALLERS
