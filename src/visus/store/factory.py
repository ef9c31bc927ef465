"""Opening a store: the one place that knows every implementation.

:mod:`visus.store.base` is the package's bottom (the protocol and its value types);
:mod:`visus.store.files` and the PostgreSQL modules build on it, and this module
picks one of them from a URL.

Example:
    >>> import tempfile
    >>> store = open_store(None, tempfile.mkdtemp())
    >>> store.put_instance({"id": "i-1", "model": "reference", "created": "t"})
    >>> [c["id"] for c in store.list_instances()], store.shared
    (['i-1'], False)
"""

from __future__ import annotations

import os
from pathlib import Path

from visus.errors import ConfigError
from visus.store.base import Store, is_database_url, redact_url
from visus.store.files import FileStore

__all__ = ["open_store"]


def open_store(
    url: str | None,
    data: Path | str,
    *,
    migrate: bool = True,
    replica: str | None = None,
    lease_seconds: float | None = None,
    pool_size: int = 4,
    max_turns: int | None = None,
) -> Store:
    """The store ``url`` names: ``postgresql://...`` opens the database (migrating its
    schema first unless ``migrate`` is false), anything empty the files under ``data``.
    ``pool_size`` and ``max_turns`` are a replica's budget on the database (see
    :class:`~visus.store.postgres.PostgresStore`).

    A ``postgresql`` URL needs ``pip install -e '.[postgres]'`` in the visus checkout.
    """
    if not url:
        return FileStore(Path(data))
    if not is_database_url(url):
        raise ConfigError(
            f"store: {redact_url(url)!r} is not a store URL; give postgresql://user@host/db "
            "or leave it empty for local files"
        )
    from visus.store.postgres import DEFAULT_LEASE_SECONDS, PostgresStore

    return PostgresStore(
        url,
        migrate=migrate,
        replica=replica or _replica_name(),
        lease_seconds=DEFAULT_LEASE_SECONDS if lease_seconds is None else lease_seconds,
        pool_size=pool_size,
        max_turns=max_turns,
    )


def _replica_name() -> str:
    import secrets
    import socket

    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
