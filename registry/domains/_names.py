"""Query parameters and body fields naming a repository or an alias: the one grammar.

A name taken from a query string reaches code that builds target paths from it
(``attest.rollout.paths``, ``attest.tuf``), which raises ValueError on what is not a name: a
500. The API's path parameters are one segment each; a query parameter can hold anything.
Every query parameter (and body field) that names a repository or an alias is one of these
types, so what is not a name is refused at the edge (422 ``invalid_request``, naming the
parameter) with the grammar the registry and its clients share (``attest.names``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

from modelward.attest.names import ALIAS_MAX, ALIAS_RE, REPOSITORY_PART_MAX, REPOSITORY_RE

__all__ = ["AliasName", "RepositoryName"]

# ORG/NAME; one type each, for a query parameter (FastAPI reads a scalar as one) and a body field
RepositoryName = Annotated[
    str, StringConstraints(pattern=REPOSITORY_RE.pattern, max_length=2 * REPOSITORY_PART_MAX + 1)
]
AliasName = Annotated[str, StringConstraints(pattern=ALIAS_RE.pattern, max_length=ALIAS_MAX)]
