"""Issue 38 (the class of item 7): a stored ``aliases`` row whose version no move can follow.

A database writer sets an alias's version to the largest its column holds (2**31 - 1, the
INTEGER column on PostgreSQL; 2**63 - 1 on SQLite, which stores it too): every move then
answered 422/409 blaming the caller's ``expected_version``, and the alias could never move
again. The row is refused when it is read, naming it (503 ``alias_row_refused``), on SQLite
and PostgreSQL, against a real ``modelward serve``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, update

from modelward.client.api import APIError
from modelward.registry.domains.moves.repository import LARGEST_ALIAS_VERSION
from modelward.registry.models import Alias, Repository
from tests.registry.conftest import Registry, new_publisher, push_new, unique
from tests.tuf.test_metadata_mirror import signed_move


def test_an_alias_row_at_the_largest_version_is_refused_naming_the_row_not_the_caller(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    first = push_new(pub, repo, tmp_path / unique("w"))
    signed_move(pub, repo, "dev", first)
    second = push_new(pub, repo, tmp_path / unique("w"))
    engine = create_engine(registry.database_url)
    repo_id = select(Repository.id).where(Repository.name == repo).scalar_subquery()
    where = (Alias.repo_id == repo_id, Alias.name == "dev")
    largest = [LARGEST_ALIAS_VERSION]
    if registry.database_url.startswith("sqlite"):
        largest.append(2**63 - 1)  # SQLite stores what PostgreSQL's INTEGER cannot
    try:
        with engine.connect() as conn:
            version = conn.execute(select(Alias.version).where(*where)).scalar_one()
        for garbage in largest:
            with engine.begin() as conn:
                conn.execute(update(Alias).where(*where).values(version=garbage))
            # a move (the client reads the version first), and a read of the alias
            client = pub.actor.client
            calls: list[Callable[[], object]] = [
                partial(client.set_alias, repo, "dev", second),
                partial(client.get_alias, repo, "dev"),
            ]
            for call in calls:
                with pytest.raises(APIError) as refused:
                    call()
                assert refused.value.status == 503, refused.value
                message = str(refused.value)
                assert f"alias {repo}@dev: the stored row" in message, message
                assert f"at version {garbage} is refused: no move can follow it" in message
                assert "expected" not in message, message
        # set back, the alias moves again
        with engine.begin() as conn:
            conn.execute(update(Alias).where(*where).values(version=version))
        signed_move(pub, repo, "dev", second)
        assert pub.actor.client.get_alias(repo, "dev")["digest"] == second
    finally:
        engine.dispose()
