"""The attachment store: one session's dropped files, safe names, caps, a manifest.

See :mod:`visus.attachments` for the whole story (names, caps, no magic-byte tables).

Example:
    >>> import base64, tempfile, pathlib
    >>> store = AttachmentStore(pathlib.Path(tempfile.mkdtemp()))
    >>> store.put("../notes.txt", base64.b64encode(b"hi").decode(), "text/plain").name
    'notes.txt'
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import tempfile
import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from visus import limits
from visus.errors import (
    InvalidInputError,
    LimitError,
    NotFoundError,
    StoreError,
    TooLargeError,
)
from visus.paths import private_dir

__all__ = [
    "AttachmentCaps",
    "AttachmentInfo",
    "AttachmentStore",
    "SessionAttachments",
    "Upload",
    "admit",
    "prepare_upload",
    "safe_name",
]

_MANIFEST = "manifest.json"
_FILES = "files"
_MIME = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$")
# Characters some filesystems refuse or that shells and URLs treat specially.
_AWKWARD = str.maketrans(dict.fromkeys('<>:"|?*', "_"))


@dataclass(frozen=True, slots=True)
class AttachmentInfo:
    """One stored attachment: ``name`` is the safe stored name, ``mime_type`` the
    client's own claim, ``sha256`` the lowercase hex digest of the bytes."""

    name: str
    size: int
    mime_type: str
    sha256: str
    original_name: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def safe_name(filename: str) -> str:
    """The name an uploaded file is stored under (before clash suffixes).

    Example:
        >>> safe_name("../../etc/passwd"), safe_name(".hidden"), safe_name("a/b/c.png")
        ('passwd', 'hidden', 'c.png')
        >>> safe_name("C:\\\\Users\\\\me\\\\shot.png"), safe_name("..")
        ('shot.png', 'attachment')
    """
    if not isinstance(filename, str):
        raise TypeError(f"filename must be a string, got {type(filename).__name__}")
    name = unicodedata.normalize("NFC", filename)
    # Control (Cc), format (Cf: bidi overrides that disguise extensions), separators.
    name = "".join(ch for ch in name if unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp"))
    parts = [p for p in re.split(r"[/\\]", name) if p.strip()]
    name = parts[-1] if parts else ""
    name = name.translate(_AWKWARD).strip().lstrip(".").strip().rstrip(". ")
    if not name:
        return "attachment"
    return _clip(name, limits.ATTACHMENT_MAX_NAME_BYTES)


def _split_ext(name: str) -> tuple[str, str]:
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem or len(ext) > 16:
        return name, ""
    return stem, "." + ext


def _clip(name: str, max_bytes: int) -> str:
    if len(name.encode()) <= max_bytes:
        return name
    stem, ext = _split_ext(name)
    room = max_bytes - len(ext.encode())
    clipped = stem.encode()[:room].decode("utf-8", errors="ignore").rstrip(". ")
    return (clipped or "attachment") + ext


def _decode_base64(content: str) -> bytes:
    if not isinstance(content, str):
        raise InvalidInputError(f"content_base64 must be a string, got {type(content).__name__}")
    compact = "".join(content.split())  # line-wrapped base64 (MIME style) is fine
    if len(compact) % 4 == 1:
        raise InvalidInputError("content_base64 is not valid base64 (bad length)")
    compact += "=" * (-len(compact) % 4)  # padding optional
    try:
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as e:
        raise InvalidInputError(f"content_base64 is not valid base64: {e}") from e


def _check_mime(mime_type: str) -> str:
    if not isinstance(mime_type, str):
        raise InvalidInputError(f"mime_type must be a string, got {type(mime_type).__name__}")
    base = mime_type.split(";", 1)[0].strip().lower()
    if not base:
        return "application/octet-stream"
    if not _MIME.match(base):
        raise InvalidInputError(f"mime_type {mime_type[:80]!r} is not a MIME type like text/plain")
    return base


@runtime_checkable
class SessionAttachments(Protocol):
    """One session's attachments, wherever they live: files (:class:`AttachmentStore`)
    or the shared database (``visus.store``'s ``PgAttachments``, reached through
    ``store.attachments(namespace, session_id)``). Both keep the same names, caps and
    errors; the four tools (:mod:`visus.attachments.tools`) use only these methods.

    Example:
        >>> import tempfile
        >>> isinstance(AttachmentStore(tempfile.mkdtemp()), SessionAttachments)
        True
    """

    def put(self, filename: str, content_base64: str, mime_type: str) -> AttachmentInfo: ...

    def list(self) -> list[AttachmentInfo]: ...

    def info(self, name: str) -> AttachmentInfo: ...

    def read_bytes(self, name: str) -> bytes: ...


@dataclass(frozen=True, slots=True)
class AttachmentCaps:
    """The three bounds a session's attachments keep (defaults from :mod:`visus.limits`).

    Example:
        >>> AttachmentCaps(max_files=3).max_files
        3
    """

    max_file_bytes: int = limits.ATTACHMENT_MAX_FILE_BYTES
    max_session_bytes: int = limits.ATTACHMENT_MAX_SESSION_BYTES
    max_files: int = limits.ATTACHMENT_MAX_FILES
    #: Over all of an instance's sessions (None: ``limits``' value at the check).
    max_instance_bytes: int | None = None
    max_instance_files: int | None = None

    def check_instance(self, files: int, size: int, up: Upload) -> None:
        """Refuse ``up`` (a new file) where the instance's sessions already hold
        ``files`` attachments of ``size`` bytes in all (:class:`LimitError`)."""
        most_files = self.max_instance_files or limits.ATTACHMENT_MAX_INSTANCE_FILES
        most_bytes = self.max_instance_bytes or limits.ATTACHMENT_MAX_INSTANCE_BYTES
        if files >= most_files:
            raise LimitError(
                f"this server's chats already hold {files} attachments, the limit "
                f"(ATTACHMENT_MAX_INSTANCE_FILES = {most_files}); "
                f"{up.wanted} was not stored: delete a chat to make room"
            )
        if size + len(up.data) > most_bytes:
            raise LimitError(
                f"{up.wanted} ({len(up.data)} bytes) would bring this server's chats' "
                f"attachments to {size + len(up.data)} bytes, over the limit of "
                f"{most_bytes} bytes (ATTACHMENT_MAX_INSTANCE_BYTES): "
                "delete a chat to make room"
            )

    def file_too_large(self, name: str, size: int, *, about: bool = False) -> str:
        """The per-file refusal, the same words on every store."""
        return (
            f"{name} is {'about ' if about else ''}{size} bytes, over the per-file limit "
            f"of {self.max_file_bytes} bytes (ATTACHMENT_MAX_FILE_BYTES)"
        )


@dataclass(frozen=True, slots=True)
class Upload:
    """A checked upload, before it meets the session: decoded bytes within the per-file
    cap, their sha256, the normalised MIME type and the safe name it asks for."""

    filename: str
    wanted: str
    mime_type: str
    data: bytes
    sha256: str


def prepare_upload(
    filename: str, content_base64: str, mime_type: str, caps: AttachmentCaps
) -> Upload:
    """Everything ``put`` checks before it looks at the session (no lock needed).

    Raises ``InvalidInputError`` (bad base64 or MIME type) or ``TooLargeError``.

    Example:
        >>> prepare_upload("../a.txt", "aGk=", "Text/Plain", AttachmentCaps()).wanted
        'a.txt'
    """
    mime = _check_mime(mime_type)
    wanted = safe_name(filename)
    # Refuse obviously oversized payloads before decoding them.
    estimate = len(content_base64) // 4 * 3
    if isinstance(content_base64, str) and estimate > caps.max_file_bytes + 3:
        raise TooLargeError(caps.file_too_large(wanted, estimate, about=True))
    data = _decode_base64(content_base64)
    if len(data) > caps.max_file_bytes:
        raise TooLargeError(caps.file_too_large(wanted, len(data)))
    return Upload(filename, wanted, mime, data, hashlib.sha256(data).hexdigest())


def admit(
    files: list[AttachmentInfo], up: Upload, caps: AttachmentCaps
) -> tuple[AttachmentInfo, bool]:
    """Where ``up`` goes in a session already holding ``files``; the caller holds the
    session's lock until it has stored the result, so the caps hold under concurrent
    puts. ``(info, True)``: a new file to store under ``info.name``; ``(existing,
    False)``: a re-send of the same name and bytes. Raises ``LimitError`` past the
    session's byte or file-count cap.

    Example:
        >>> up = prepare_upload("a.txt", "aGk=", "text/plain", AttachmentCaps())
        >>> info, new = admit([], up, AttachmentCaps())
        >>> (info.name, new), admit([info], up, AttachmentCaps())[1]
        (('a.txt', True), False)
    """
    for f in files:
        if f.name == up.wanted and f.sha256 == up.sha256 and f.mime_type == up.mime_type:
            return f, False
    if len(files) >= caps.max_files:
        raise LimitError(
            f"this session already holds {len(files)} attachments, the limit "
            f"(ATTACHMENT_MAX_FILES = {caps.max_files}); {up.wanted} was not stored"
        )
    used = sum(f.size for f in files)
    size = len(up.data)
    if used + size > caps.max_session_bytes:
        raise LimitError(
            f"{up.wanted} ({size} bytes) would bring this session's attachments "
            f"to {used + size} bytes, over the limit of {caps.max_session_bytes} "
            f"bytes (ATTACHMENT_MAX_SESSION_BYTES)"
        )
    name = _unclashed(up.wanted, {f.name.casefold() for f in files})
    return AttachmentInfo(name, size, up.mime_type, up.sha256, original_name=up.filename), True


class AttachmentStore:
    """One session's attachments in ``root`` (created on the first put).

    Example:
        >>> import tempfile, pathlib
        >>> store = AttachmentStore(pathlib.Path(tempfile.mkdtemp()), max_file_bytes=4)
        >>> try:
        ...     store.put("big.bin", "AAAAAAAA", "application/octet-stream")
        ... except TooLargeError as e:
        ...     print(e.__class__.__name__, str(e)[:32])
        TooLargeError big.bin is 6 bytes, over the per
    """

    def __init__(
        self,
        root: Path | str,
        *,
        max_file_bytes: int = limits.ATTACHMENT_MAX_FILE_BYTES,
        max_session_bytes: int = limits.ATTACHMENT_MAX_SESSION_BYTES,
        max_files: int = limits.ATTACHMENT_MAX_FILES,
    ) -> None:
        self.root = Path(root)
        self.max_file_bytes = max_file_bytes
        self.max_session_bytes = max_session_bytes
        self.max_files = max_files
        self._lock = _folder_lock(self.root)
        #: The folder of every session of the instance (``for_session``'s): the caps
        #: over all of them hold there; None, only this session's.
        self.sessions: Path | None = None

    @classmethod
    def for_session(cls, data: Path | str, session_id: str, **caps: int) -> AttachmentStore:
        """The store of session ``session_id`` under the data folder ``data``:
        ``<data>/sessions/<id>/attachments/``. The id is validated (no traversal).

        Example:
            >>> AttachmentStore.for_session("/srv/visus", "chat-1").root
            PosixPath('/srv/visus/sessions/chat-1/attachments')
        """
        from visus.paths import sessions_dir
        from visus.record.sessions import validate_session_id

        root = sessions_dir(data) / validate_session_id(session_id) / "attachments"
        store = cls(root, **caps)
        store.sessions = sessions_dir(data)
        return store

    # --- manifest ---------------------------------------------------------------

    def _load(self) -> list[AttachmentInfo]:
        path = self.root / _MANIFEST
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as e:
            raise StoreError(f"attachment manifest {path} is unreadable: {e}") from e
        try:
            return [
                AttachmentInfo(
                    name=str(f["name"]),
                    size=int(f["size"]),
                    mime_type=str(f["mime_type"]),
                    sha256=str(f["sha256"]),
                    original_name=str(f.get("original_name", "")),
                )
                for f in raw["files"]
            ]
        except (KeyError, TypeError, ValueError) as e:
            raise StoreError(f"attachment manifest {path} is malformed: {e}") from e

    def _save(self, files: list[AttachmentInfo]) -> None:
        body = json.dumps(
            {"version": 1, "files": [f.to_json() for f in files]}, indent=2, ensure_ascii=False
        )
        _write_atomic(self.root / _MANIFEST, body.encode("utf-8"))

    # --- public API -------------------------------------------------------------

    def put(self, filename: str, content_base64: str, mime_type: str) -> AttachmentInfo:
        """Store a file; returns its info (``name`` may differ from ``filename``).

        Re-sending the same name with the same bytes returns the existing entry.
        Raises ``InvalidInputError`` (bad base64 or MIME type), ``TooLargeError``
        (per-file cap) or ``LimitError`` (per-session bytes or file count).
        """
        caps = AttachmentCaps(self.max_file_bytes, self.max_session_bytes, self.max_files)
        up = prepare_upload(filename, content_base64, mime_type, caps)
        together = _folder_lock(self.sessions) if self.sessions is not None else _NO_LOCK
        with together, self._lock:
            files = self._load()
            info, new = admit(files, up, caps)
            if new and self.sessions is not None:
                caps.check_instance(*_held_by(self.sessions), up)
            if new:
                _write_atomic(self.root / _FILES / info.name, up.data)
                self._save([*files, info])
            return info

    def list(self) -> list[AttachmentInfo]:
        """Every attachment, oldest first."""
        return self._load()

    def info(self, name: str) -> AttachmentInfo:
        """The entry for ``name`` (exact stored name); ``NotFoundError`` if absent."""
        for f in self._load():
            if f.name == name:
                return f
        raise NotFoundError(f"no attachment named {name!r}")

    def path(self, name: str) -> Path:
        """Where the bytes of attachment ``name`` are on disk."""
        return self.root / _FILES / self.info(name).name

    def read_bytes(self, name: str) -> bytes:
        """The attachment's bytes, checked against the manifest's sha256."""
        info = self.info(name)
        try:
            data = (self.root / _FILES / info.name).read_bytes()
        except FileNotFoundError as e:
            raise NotFoundError(
                f"attachment {name!r} is in the manifest but its file is gone"
            ) from e
        if hashlib.sha256(data).hexdigest() != info.sha256:
            raise StoreError(f"attachment {name!r} does not match its recorded sha256")
        return data


_LOCKS: dict[Path, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _folder_lock(root: Path) -> threading.Lock:
    # One lock per folder, not per object: the web API opens a new AttachmentStore per
    # request, and two uploads to one session must still see each other's manifest.
    key = Path(os.path.abspath(root))
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(key, threading.Lock())


_NO_LOCK = contextlib.nullcontext()


def _held_by(sessions: Path) -> tuple[int, int]:
    """Attachments, and their bytes, over every session folder in ``sessions``."""
    files = size = 0
    for manifest in sessions.glob(f"*/attachments/{_MANIFEST}"):
        try:
            entries = json.loads(manifest.read_text(encoding="utf-8"))["files"]
            files += len(entries)
            size += sum(int(f["size"]) for f in entries)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a manifest being written or broken: its session reports it
    return files, size


def _unclashed(name: str, taken: set[str]) -> str:
    if name.casefold() not in taken:
        return name
    stem, ext = _split_ext(name)
    n = 2
    while True:
        candidate = _clip(f"{stem} ({n}){ext}", limits.ATTACHMENT_MAX_NAME_BYTES + 12)
        if candidate.casefold() not in taken:
            return candidate
        n += 1


def _write_atomic(path: Path, data: bytes) -> None:
    private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
