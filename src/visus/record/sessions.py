"""The session log: one append-only JSONL file per session, never holding image bytes.

The first line of a file is a header (``{"v": 1, "kind": "session", ...}`` with the
session's meta); every later line is one message as :mod:`visus.record.codec`
writes it. Each append is a single write of one whole line, flushed and fsynced.

Loading never crashes on a damaged log: a torn last line (a crash mid-write) is
skipped and reported, a corrupt line in the middle is reported and the rest still
loads, and, when a blob store is given, an image whose blob is missing or no longer
hashes to its digest (a bit flip on disk) becomes a text note naming its digest. Every
such event is one entry in ``problems``.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> from visus.record.messages import UserMessage, TextPart
    >>> store = SessionStore(Path(tempfile.mkdtemp()))
    >>> sid = store.create("demo", meta={"model": "claude-sonnet-4-6"})
    >>> store.append(sid, UserMessage(parts=(TextPart("hi"),), turn=1))
    >>> s = store.load(sid)
    >>> s.messages[0].text, s.meta["model"], s.problems
    ('hi', 'claude-sonnet-4-6', ())
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from visus import limits
from visus.errors import (
    IntegrityError,
    InvalidInputError,
    InvalidKeyError,
    NotFoundError,
    StoreError,
    VisusError,
    os_reason,
)
from visus.paths import private_dir
from visus.record.blobs import BlobStore
from visus.record.codec import RECORD_VERSION, message_from_dict, message_to_dict
from visus.record.messages import DocumentPart, ImagePart, Message, Part, TextPart

__all__ = [
    "LoadedSession",
    "SessionInfo",
    "SessionLog",
    "SessionStore",
    "check_title",
    "degrade_bad_blobs",
    "degrade_missing_blobs",
    "missing_blob_note",
    "validate_session_id",
]

_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SUFFIX = ".jsonl"
_TITLE_SUFFIX = ".title"
_DIGEST_FIELD = re.compile(rb'"digest"\s*:\s*"([0-9a-f]{64})"')
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def check_title(title: object) -> str | None:
    """A session title as stored: stripped, one line, at most
    ``limits.SESSION_TITLE_MAX_CHARS``; None (or blank) means no title.

    Example:
        >>> check_title("  Trip photos  "), check_title("")
        ('Trip photos', None)
    """
    if title is None:
        return None
    if not isinstance(title, str):
        raise InvalidInputError("a session title is a string")
    clean = " ".join(title.split())
    if len(clean) > limits.SESSION_TITLE_MAX_CHARS:
        raise InvalidInputError(
            f"a session title is at most {limits.SESSION_TITLE_MAX_CHARS} characters "
            f"(SESSION_TITLE_MAX_CHARS), got {len(clean)}"
        )
    return clean or None


def validate_session_id(session_id: object) -> str:
    """Return ``session_id`` if it is safe as a file name, else raise InvalidKeyError.

    Ids start with a letter or digit and hold only letters, digits, ``.``, ``_``
    and ``-`` (so never ``/``, ``..`` at the start, or a hidden file), up to
    ``limits.SESSION_ID_MAX_CHARS`` characters.

    Example:
        >>> validate_session_id("2026-11-22_chat.1")
        '2026-11-22_chat.1'
    """
    if (
        not isinstance(session_id, str)
        or len(session_id) > limits.SESSION_ID_MAX_CHARS
        or not _SESSION_ID.fullmatch(session_id)
    ):
        raise InvalidKeyError(
            f"not a valid session id: {session_id!r} (letters, digits, '.', '_', '-'; "
            f"starting with a letter or digit; at most {limits.SESSION_ID_MAX_CHARS} characters)"
        )
    return session_id


def missing_blob_note(digest: str, kind: str = "image", reason: str = "is missing") -> str:
    """The text an image (or document) whose blob is gone (or damaged) degrades to.

    Example:
        >>> missing_blob_note("ab" * 32, reason="is corrupt")[:40]
        '[image unavailable: blob sha256:abababab'
    """
    return f"[{kind} unavailable: blob sha256:{digest} {reason}]"


@dataclass(frozen=True, slots=True)
class LoadedSession:
    """A session as loaded: its messages, what went wrong reading it, and its meta."""

    id: str
    messages: tuple[Message, ...]
    problems: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    created: float | None = None

    @property
    def turn_count(self) -> int:
        """The highest turn in the session (0 when it holds no messages)."""
        return max((m.turn for m in self.messages), default=0)


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One line of a session listing. ``modified`` is a POSIX timestamp."""

    id: str
    messages: int
    modified: float
    size: int = 0
    turns: int = 0


@runtime_checkable
class SessionLog(Protocol):
    """Where session messages live: :class:`SessionStore` (JSONL files) or a database
    store (:mod:`visus.store`). ``revision`` changes whenever a message is appended by
    anyone, so a reader can keep a loaded history while it stays the same. ``append``
    may return the revision its write made (a database knows it from the write
    itself), saving the reader a ``revision`` call; ``None`` says to ask.
    """

    def exists(self, session_id: str) -> bool: ...

    def create(
        self, session_id: str | None = None, *, meta: Mapping[str, Any] | None = None
    ) -> str: ...

    def append(self, session_id: str, message: Message) -> Hashable | None: ...

    def load(self, session_id: str, *, blobs: BlobStore | None = None) -> LoadedSession: ...

    def revision(self, session_id: str) -> Hashable: ...

    def list(self) -> list[SessionInfo]: ...

    def referenced_digests(self) -> set[str]: ...

    def delete(self, session_id: str) -> bool: ...

    def title(self, session_id: str) -> str | None: ...

    def set_title(self, session_id: str, title: str | None) -> None: ...


def degrade_missing_blobs(
    messages: Iterable[Message], blobs: BlobStore, problems: list[str]
) -> list[Message]:
    """``messages`` with every image (or document) whose blob is absent replaced by
    :func:`missing_blob_note` text; each replacement is noted in ``problems``."""
    return [SessionStore._check_blobs(m, blobs, problems) for m in messages]


def degrade_bad_blobs(
    messages: Iterable[Message], blobs: BlobStore, problems: list[str]
) -> list[Message]:
    """Like :func:`degrade_missing_blobs`, but every blob is read and its bytes hashed:
    one that no longer matches its digest (a bit flip on disk) or cannot be read
    degrades exactly like a missing one (a note naming the digest, and a problem).

    This reads each referenced blob once: every ``load`` with a blob store does it
    (the agent then keeps the history in memory), a listing never does.
    """
    verdicts: dict[str, str | None] = {}

    def fault(digest: str) -> str | None:
        if digest not in verdicts:
            try:
                blobs.get(digest)
                verdicts[digest] = None
            except NotFoundError:
                verdicts[digest] = "is missing"
            except IntegrityError:
                verdicts[digest] = "is corrupt"
            except VisusError as e:
                verdicts[digest] = f"cannot be read ({e})"
        return verdicts[digest]

    return [SessionStore._degrade(m, fault, problems) for m in messages]


def _new_id() -> str:
    # Sortable by creation time, unique enough with 32 random bits behind it.
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(4)


def _encode_line(record: Mapping[str, Any]) -> bytes:
    try:
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidInputError(f"cannot record this message as JSON: {e}") from e
    return text.encode("utf-8") + b"\n"


def _lock_file(fd: int) -> None:
    # Advisory and POSIX-only; closing the descriptor releases it.
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return
    fcntl.flock(fd, fcntl.LOCK_EX)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class SessionStore:
    """Session logs under ``root`` (the data folder's ``sessions``), one JSONL per id.

    Example:
        >>> import tempfile
        >>> store = SessionStore(Path(tempfile.mkdtemp()))
        >>> sid = store.create()
        >>> store.exists(sid), [i.id for i in store.list()] == [sid]
        (True, True)
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SessionStore({str(self.root)!r})"

    def path(self, session_id: str) -> Path:
        """The log file of ``session_id`` (which may not exist yet)."""
        return self.root / (validate_session_id(session_id) + _SUFFIX)

    def exists(self, session_id: str) -> bool:
        return self.path(session_id).is_file()

    def create(
        self, session_id: str | None = None, *, meta: Mapping[str, Any] | None = None
    ) -> str:
        """Start a new session log and return its id (a fresh one when none is given).

        ``meta`` (JSON values) goes into the header line. Creating an id that already
        exists raises :class:`~visus.errors.StoreError`; check :meth:`exists` first
        to resume one.
        """
        sid = validate_session_id(session_id) if session_id is not None else _new_id()
        header: dict[str, Any] = {
            "v": RECORD_VERSION,
            "kind": "session",
            "id": sid,
            "created": time.time(),
            "meta": dict(meta or {}),
        }
        line = _encode_line(header)
        target = self.path(sid)
        try:
            private_dir(self.root)
            # The owner's only: a record holds the conversation and every tool result.
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError as e:
            raise StoreError(f"session {sid!r} already exists") from e
        except OSError as e:
            raise StoreError(f"cannot create session {sid!r}: {os_reason(e)}") from e
        try:
            _write_all(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        return sid

    def append(self, session_id: str, message: Message) -> None:
        """Append one message as one line, flushed and fsynced before returning.

        If the file ends in a torn line (a crash mid-write), the new record starts
        on a line of its own, so the torn bytes stay one corrupt line that a load
        reports and skips.
        """
        line = _encode_line(message_to_dict(message))
        target = self.path(session_id)
        with self._lock:
            try:
                fd = os.open(target, os.O_RDWR | os.O_APPEND)
            except FileNotFoundError as e:
                raise NotFoundError(f"no session {session_id!r}") from e
            except OSError as e:
                raise StoreError(f"cannot open session {session_id!r}: {os_reason(e)}") from e
            try:
                _lock_file(fd)  # another process appending to the same session waits
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line
                _write_all(fd, line)
                os.fsync(fd)
            except OSError as e:
                raise StoreError(f"cannot append to session {session_id!r}: {os_reason(e)}") from e
            finally:
                os.close(fd)

    def load(self, session_id: str, *, blobs: BlobStore | None = None) -> LoadedSession:
        """Read a session; damage is reported in ``problems``, never raised.

        Only a session that does not exist (NotFoundError) or an invalid id
        (InvalidKeyError) raise. With ``blobs``, each referenced blob is read and
        hashed once (:func:`degrade_bad_blobs`): an image part whose blob is absent,
        corrupt or unreadable becomes :func:`missing_blob_note` text and a problem.
        """
        target = self.path(session_id)
        try:
            raw = target.read_bytes()
        except FileNotFoundError as e:
            raise NotFoundError(f"no session {session_id!r}") from e
        except OSError as e:
            raise StoreError(f"cannot read session {session_id!r}: {os_reason(e)}") from e

        problems: list[str] = []
        messages: list[Message] = []
        header: dict[str, Any] = {}
        lines = raw.split(b"\n")
        torn = lines.pop()  # b"" when the file ends with a newline, as it should
        for number, line in enumerate([*lines, torn], start=1):
            if not line.strip():
                continue
            is_torn = number > len(lines)
            # A record is written with its newline in one write; bytes without one are
            # a crash mid-write, unless they happen to hold a complete record.
            found: list[str] = []
            decoded = self._decode(line, number, found, first=number == 1)
            if found and is_torn:
                found = [
                    f"line {number}: torn final line ({len(line)} bytes, "
                    "no newline; likely a crash mid-write) skipped"
                ]
            problems.extend(found)
            if isinstance(decoded, dict):
                header = decoded
            elif decoded is not None:
                messages.append(decoded)

        if blobs is not None:
            messages = degrade_bad_blobs(messages, blobs, problems)
        meta = header.get("meta")
        created = header.get("created")
        return LoadedSession(
            id=session_id,
            messages=tuple(messages),
            problems=tuple(problems),
            meta=MappingProxyType(dict(meta)) if isinstance(meta, dict) else _EMPTY,
            created=float(created)
            if isinstance(created, int | float) and not isinstance(created, bool)
            else None,
        )

    @staticmethod
    def _decode(
        line: bytes, number: int, problems: list[str], *, first: bool
    ) -> Message | dict[str, Any] | None:
        """A message, the header record (a dict), or None after noting a problem."""
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as e:  # bad UTF-8, bad JSON, absurd nesting
            problems.append(f"line {number}: corrupt record skipped (not JSON: {e})")
            return None
        if isinstance(record, dict) and record.get("kind") == "session":
            if not first:
                problems.append(f"line {number}: stray session header skipped")
                return None
            return record
        try:
            return message_from_dict(record)
        except (InvalidInputError, TypeError, ValueError, RecursionError) as e:
            problems.append(f"line {number}: corrupt record skipped ({e})")
            return None

    @staticmethod
    def _check_blobs(message: Message, blobs: BlobStore, problems: list[str]) -> Message:
        def fault(digest: str) -> str | None:
            try:
                return None if blobs.has(digest) else "is missing"
            except VisusError as e:
                problems.append(f"blob sha256:{digest} cannot be checked: {e}")
                return "is missing"

        return SessionStore._degrade(message, fault, problems)

    @staticmethod
    def _degrade(
        message: Message, fault: Callable[[str], str | None], problems: list[str]
    ) -> Message:
        """``message`` with each image/document part whose blob has a ``fault`` (its
        reason, or None when sound) replaced by a note; each one noted in ``problems``."""
        if not any(isinstance(p, ImagePart | DocumentPart) for p in message.parts):
            return message
        parts: list[Part] = []
        changed = False
        for part in message.parts:
            if isinstance(part, ImagePart | DocumentPart):
                reason = fault(part.digest)
                if reason is not None:
                    problems.append(
                        f"turn {message.turn}: blob sha256:{part.digest} {reason}; "
                        f"the {part.kind} is replaced by a note"
                    )
                    parts.append(TextPart(missing_blob_note(part.digest, part.kind, reason)))
                    changed = True
                    continue
            parts.append(part)
        if not changed:
            return message
        # Only user and tool messages hold image parts (assistant parts are text).
        return replace(message, parts=tuple(parts))  # type: ignore[arg-type]

    def revision(self, session_id: str) -> Hashable:
        """Changes whenever the log changes (size and modification time)."""
        try:
            st = self.path(session_id).stat()
        except OSError:
            return (-1, -1)
        return (st.st_size, st.st_mtime_ns)

    def turn_count(self, session_id: str) -> int:
        """The highest turn recorded in ``session_id`` (0 for an empty session)."""
        return self.load(session_id).turn_count

    def _title_path(self, session_id: str) -> Path:
        return self.root / (validate_session_id(session_id) + _TITLE_SUFFIX)

    def title(self, session_id: str) -> str | None:
        """The title a person gave the session (:meth:`set_title`), or None."""
        try:
            text = self._title_path(session_id).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return text or None

    def set_title(self, session_id: str, title: str | None) -> None:
        """Give the session a title (None or blank: back to none). The log is not
        touched: the title is a small file beside it, replaced whole."""
        if not self.exists(session_id):
            raise NotFoundError(f"no session {session_id!r}")
        target = self._title_path(session_id)
        clean = check_title(title)
        if clean is None:
            target.unlink(missing_ok=True)
            return
        tmp = target.with_name(f".{target.name}.tmp")
        try:
            tmp.unlink(missing_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with open(fd, "w", encoding="utf-8") as f:
                f.write(clean)
            os.replace(tmp, target)
        except OSError as e:
            raise StoreError(
                f"cannot set the title of session {session_id!r}: {os_reason(e)}"
            ) from e

    def delete(self, session_id: str) -> bool:
        """Remove a session's log, title and folder (attachments); False if there was
        none. Its blobs stay until ``gc`` finds no other session naming them.
        """
        target = self.path(session_id)
        with self._lock:
            existed = target.is_file()
            try:
                target.unlink(missing_ok=True)
                self._title_path(session_id).unlink(missing_ok=True)
                shutil.rmtree(self.root / session_id, ignore_errors=True)
            except OSError as e:
                raise StoreError(f"cannot delete session {session_id!r}: {os_reason(e)}") from e
        return existed

    def referenced_digests(self) -> set[str]:
        """Every blob digest any session log names: the live set for ``BlobStore.gc``.

        Scans the raw bytes, so digests on damaged lines count too (gc errs towards
        keeping). Run gc only when no writer is adding blobs the scan has not seen.
        """
        found: set[str] = set()
        if not self.root.is_dir():
            return found
        for entry in self.root.iterdir():
            if entry.suffix != _SUFFIX or not entry.is_file():
                continue
            try:
                raw = entry.read_bytes()
            except OSError as e:
                raise StoreError(f"cannot read {entry} to collect its blobs: {e}") from e
            found.update(m.decode() for m in _DIGEST_FIELD.findall(raw))
        return found

    def list(self) -> list[SessionInfo]:
        """Every session under ``root``, most recently modified first."""
        if not self.root.is_dir():
            return []
        infos: list[SessionInfo] = []
        for entry in self.root.iterdir():
            if entry.suffix != _SUFFIX or not entry.is_file():
                continue
            sid = entry.name[: -len(_SUFFIX)]
            try:
                validate_session_id(sid)
                stat = entry.stat()
                loaded = self.load(sid)
            except (VisusError, OSError):
                continue
            infos.append(
                SessionInfo(
                    id=sid,
                    messages=len(loaded.messages),
                    modified=stat.st_mtime,
                    size=stat.st_size,
                    turns=loaded.turn_count,
                )
            )
        infos.sort(key=lambda i: (-i.modified, i.id))
        return infos
