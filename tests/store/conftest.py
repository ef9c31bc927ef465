"""The store suites' fixture: each test runs on local files and on a real PostgreSQL
database (a throwaway cluster the tests start; see tests/pgcluster.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from visus.store import Store, open_store

#: Opens the store under test; each call opens it again on the same data (on
#: PostgreSQL with its own connection pool: what another replica has).
Opener = Callable[[], Store]


@pytest.fixture(params=["files", "postgresql"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """A function opening the store under test (again: a reopen sees the same data)."""
    opened: list[Store] = []
    if request.param == "files":
        url = ""
    else:
        from tests.pgcluster import create_database, drop_database

        cluster = request.getfixturevalue("pg_cluster")
        url = create_database(cluster)

    def open_() -> Store:
        store = open_store(url, tmp_path)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()
    if url:
        drop_database(cluster, url)
