"""Authorization is one table (registry/domains/auth/authz.py): no other module of the server
spells a set of roles, and every role the registry issues appears in it."""

from __future__ import annotations

import ast
from pathlib import Path

from modelward.registry.domains.auth.authz import (
    GRANTS,
    PUBLISHER,
    ROLES,
    Action,
    allows,
    roles_for,
)

REGISTRY = Path(__file__).resolve().parents[2] / "registry"
AUTHZ = REGISTRY / "domains" / "auth" / "authz.py"


def _role_sets(path: Path) -> list[str]:
    """Literal sets, tuples and lists of two or more role names in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Set | ast.Tuple | ast.List):
            names = [
                e.value
                for e in node.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in ROLES
            ]
            if len(names) >= 2:
                found.append(f"{path.relative_to(REGISTRY)}:{node.lineno}: {sorted(names)}")
    return found


def test_no_module_but_authz_spells_a_role_set() -> None:
    spelled = [hit for path in REGISTRY.rglob("*.py") if path != AUTHZ for hit in _role_sets(path)]
    assert spelled == []


def test_every_action_has_a_grant_and_every_role_a_place() -> None:
    assert set(GRANTS) == set(Action)
    assert {role for action in Action for role in roles_for(action)} == set(ROLES)


def test_publishing_is_repository_scoped_for_publishers_only() -> None:
    grant = GRANTS[Action.PUBLISH]
    assert grant.listed_publishers
    assert PUBLISHER not in grant.roles  # a publisher publishes only where it is listed
    assert allows(PUBLISHER, Action.PUBLISH)  # ... but may publish somewhere
    assert not allows("reader", Action.PUBLISH)
    assert not allows("superuser", Action.ADMINISTER)  # an unknown role may do nothing
