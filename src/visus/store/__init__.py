"""Where records live: local files (the embedded default) or PostgreSQL.

One protocol (:class:`Store`) for instances, sessions (messages) and blobs, with two
implementations: :class:`FileStore` (today's folders) and ``PostgresStore``
(:mod:`visus.store.postgres`, ``pip install -e '.[postgres]'`` in the visus checkout),
which also holds the tether ring and turn claims that several ``visus serve`` replicas share
(:class:`SharedRingStore`). :func:`open_store` picks one from a URL.

Example:
    >>> import tempfile
    >>> store = open_store("", tempfile.mkdtemp())
    >>> type(store).__name__, store.shared
    ('FileStore', False)
"""

from visus.store.base import (
    STORE_ENV,
    ClaimedTurn,
    Collected,
    FramePage,
    NewFrame,
    RingStats,
    SharedRingStore,
    Store,
    StoredFrame,
    is_database_url,
    redact_url,
    validate_namespace,
)
from visus.store.factory import open_store
from visus.store.files import FileStore

__all__ = [
    "STORE_ENV",
    "ClaimedTurn",
    "Collected",
    "FileStore",
    "FramePage",
    "NewFrame",
    "RingStats",
    "SharedRingStore",
    "Store",
    "StoredFrame",
    "is_database_url",
    "open_store",
    "redact_url",
    "validate_namespace",
]
