"""Query parameters naming a repository or an alias, checked against the one grammar.

A name taken from a query string reaches code that builds target paths from it
(``attest.rollout.paths``, ``attest.tuf``), which raises ValueError on what is not a name: a
500. The API's path parameters are one segment each; a query parameter can hold anything.
Every query parameter that names a repository or an alias is one of these types, so what is
not a name is refused at the edge (422 ``invalid_request``, naming the parameter) with the
grammar the registry and its clients share (``attest.names``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Query
from pydantic import StringConstraints

from modelward.attest.names import ALIAS_MAX, ALIAS_RE, REPOSITORY_PART_MAX, REPOSITORY_RE

__all__ = ["ALIAS_QUERY", "REPOSITORY_QUERY", "AliasName", "RepositoryName", "RepositoryQuery"]

_REPOSITORY_MAX = 2 * REPOSITORY_PART_MAX + 1  # ORG/NAME

# (FastAPI copies a parameter's FieldInfo for each parameter that names it)
REPOSITORY_QUERY = Query(pattern=REPOSITORY_RE.pattern, max_length=_REPOSITORY_MAX)
ALIAS_QUERY = Query(pattern=ALIAS_RE.pattern, max_length=ALIAS_MAX)
RepositoryQuery = Annotated[str, REPOSITORY_QUERY]

# the same grammar for a request body's fields
RepositoryName = Annotated[
    str, StringConstraints(pattern=REPOSITORY_RE.pattern, max_length=_REPOSITORY_MAX)
]
AliasName = Annotated[str, StringConstraints(pattern=ALIAS_RE.pattern, max_length=ALIAS_MAX)]
