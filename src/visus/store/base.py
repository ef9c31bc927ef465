"""The store protocol: where instances, session messages, attachments and blobs live.

Two stores implement it: :class:`~visus.store.files.FileStore` (local files, the
embedded default, today's layout) and :class:`~visus.store.postgres.PostgresStore`
(one PostgreSQL database shared by any number of ``visus serve`` replicas). A
*namespace* groups the sessions (and, on files, the blobs) of one owner: ``""`` is
the data folder itself, ``"instances/<id>"`` a tether instance's.

A shared store (``shared`` true) also holds the tether ring and the turn claims;
that part of it is :class:`SharedRingStore`, implemented by PostgreSQL only (the file
store keeps frames in the serving process, as before).

This module is the package's bottom: it imports none of the implementations
(:func:`visus.store.factory.open_store` picks one).

Example:
    >>> validate_namespace("instances/i-1"), is_database_url("postgresql://db/visus")
    ('instances/i-1', True)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from visus.attachments import SessionAttachments
from visus.errors import InvalidKeyError
from visus.record.blobs import BlobStore
from visus.record.sessions import SessionLog

__all__ = [
    "STORE_ENV",
    "ClaimedTurn",
    "FramePage",
    "NewFrame",
    "RingStats",
    "SharedRingStore",
    "Store",
    "StoredFrame",
    "is_database_url",
    "redact_url",
    "validate_namespace",
]

#: Environment variable naming the store (a ``postgresql://`` URL) when none is given.
STORE_ENV = "VISUS_STORE"

_NAMESPACE = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9._-]*)(?:/[A-Za-z0-9][A-Za-z0-9._-]*)*")


def validate_namespace(namespace: str) -> str:
    """``""`` or slash-separated safe names (never ``..``, never absolute).

    Example:
        >>> validate_namespace("instances/i-0123")
        'instances/i-0123'
    """
    if namespace and (not _NAMESPACE.fullmatch(namespace) or len(namespace) > 200):
        raise InvalidKeyError(f"not a valid store namespace: {namespace!r}")
    return namespace


def is_database_url(url: str | None) -> bool:
    """True for a ``postgresql://`` (or ``postgres://``) URL."""
    return bool(url) and str(url).split("://", 1)[0] in ("postgresql", "postgres")


@dataclass(frozen=True, slots=True)
class Collected:
    """What a store's ``gc`` did: blobs ``removed``, and ``young`` ones no session names
    that stayed because they were written within the grace period (a turn may store an
    image before it records the message naming it)."""

    removed: int
    young: int = 0


@runtime_checkable
class Store(Protocol):
    """Instances, sessions, their attachments and blobs. Every method is synchronous
    and thread-safe.

    ``schema_version`` is the version the store runs at (files: 0, no schema).
    ``attachments(namespace, session_id)`` is one session's attachments: files under
    the namespace's folder, or rows every replica sharing the database sees.
    """

    shared: bool
    schema_version: int

    def sessions(self, namespace: str = "") -> SessionLog: ...

    def attachments(self, namespace: str, session_id: str) -> SessionAttachments: ...

    def blobs(self, namespace: str = "") -> BlobStore: ...

    def put_instance(self, config: Mapping[str, Any]) -> None: ...

    def get_instance(self, instance_id: str) -> dict[str, Any] | None: ...

    def list_instances(self) -> list[dict[str, Any]]: ...

    def delete_instance(self, instance_id: str) -> bool: ...

    def gc(self, *, grace_seconds: float = 3600.0) -> Collected: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StoredFrame:
    """One frame as the store holds it: its seq, session and encoded bytes."""

    seq: int
    session: str
    body: bytes


@dataclass(frozen=True, slots=True)
class NewFrame:
    """A frame to append: its session, its payload's size (what the ring's byte bound
    counts) and its encoding cut where the seq the store gives it goes
    (``head + b"%d" % seq + tail``, see :func:`visus.tether.frames.encode_around_seq`)."""

    session: str
    size: int
    head: bytes
    tail: bytes


@dataclass(frozen=True, slots=True)
class FramePage:
    """A read of the ring. ``gap``: frames after ``after_seq`` were evicted."""

    frames: tuple[StoredFrame, ...]
    next_seq: int
    gap: bool
    first_seq: int


@dataclass(frozen=True, slots=True)
class RingStats:
    """How full one instance's ring is, and its turns queued or running (``pending``)."""

    last_seq: int
    first_seq: int
    frames: int
    bytes: int
    pending: int = 0


@dataclass(frozen=True, slots=True)
class ClaimedTurn:
    """A turn this replica now owns. ``request`` is the user message frame's bytes;
    ``expired`` is true when the claim took over a turn whose owner stopped renewing
    its lease (that replica died mid-turn); ``stopped`` when a client had asked that
    turn to stop (it then ends as stopped, not as interrupted)."""

    instance_id: str
    seq: int
    session: str
    request: bytes
    expired: bool
    owner: str
    stopped: bool = False


@runtime_checkable
class SharedRingStore(Protocol):
    """The tether ring and turn claims in a shared store (async; one event loop).

    ``append_frames`` gives the frames the instance's next seqs (gap-free, in commit
    order; it returns the first) and evicts the oldest frames past
    ``max_frames``/``max_bytes`` (the newest always stays), all at once. With ``turn``
    the append happens only while this replica still owns that turn (``None`` is
    returned otherwise), and ``finish`` ends the turn with it. ``queue`` makes the
    (one) frame a turn request too (``request_id``: its msg_id, which a stop names).

    ``claim_turns`` takes up to ``limit`` claimable turns at once (the oldest first; a
    session's turns one at a time, in order). ``renew_leases`` extends this replica's
    leases and returns the turns among them a client asked to stop (a fallback for a
    stop notification missed).

    ``stop_turn`` asks for the open turn answering ``request_id`` to stop: a queued one
    ends at once (``"queued"``: nobody will run it), a running one is flagged and its
    replica told (``"running"``: that replica's ``on_turn_stopped`` callbacks hear
    ``(instance_id, seq)``); ``None`` when no such turn is open. ``open_turns`` lists
    the msg_ids of a session's turns queued or running, oldest first (a page reloaded
    mid-turn shows them as working). ``ring_stats`` counts ``pending`` turns too.
    """

    replica: str

    async def start(self) -> None: ...

    async def append_frames(
        self,
        instance_id: str,
        frames: Sequence[NewFrame],
        *,
        turn: int | None = None,
        finish: bool = False,
        queue: bool = False,
        request_id: str | None = None,
    ) -> int | None: ...

    async def read_frames(
        self, instance_id: str, after_seq: int, *, session: str | None, limit: int | None
    ) -> FramePage: ...

    async def wait_frames(
        self,
        instance_id: str,
        after_seq: int,
        *,
        session: str | None,
        limit: int | None,
        timeout: float,
        closed: Callable[[], bool] = lambda: False,
    ) -> FramePage: ...

    async def ring_stats(self, instance_id: str) -> RingStats: ...

    async def claim_turns(self, limit: int) -> list[ClaimedTurn]: ...

    async def renew_leases(self) -> list[tuple[str, int]]: ...

    async def stop_turn(
        self, instance_id: str, session: str, request_id: str
    ) -> Literal["queued", "running"] | None: ...

    async def open_turns(self, instance_id: str, session: str) -> list[str]: ...

    def on_turn_stopped(self, callback: Callable[[str, int], None]) -> None: ...

    def wake(self, instance_id: str) -> None: ...

    def on_turn_queued(self, callback: Callable[[], None]) -> None: ...

    def on_instance_deleted(self, callback: Callable[[str], None]) -> None: ...

    async def aclose(self) -> None: ...


def redact_url(url: str) -> str:
    """``url`` with its password masked, to print or log.

    Example:
        >>> redact_url("postgresql://visus:s3cret@db/visus")
        'postgresql://visus:***@db/visus'
    """
    # user:password@ -> user:***@ so a refused URL never prints a password.
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)
