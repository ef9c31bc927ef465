"""Files a user dropped into a session, and the four tools an agent uses on them.

:class:`AttachmentStore` keeps one session's attachments in a folder the caller
chooses (``<data>/sessions/<id>/attachments/``): the bytes under ``files/`` and a
``manifest.json`` holding, per file, the stored name, size, sha256 and the MIME type
*the client declared*. visus keeps no table of magic bytes or extensions: whether a
file is an image is settled when our decoders open it (``visus.media``).

Names are made safe before anything touches the disk: the basename only (any ``/``
or ``\\`` path part is dropped), no control or format characters, no leading dots
(no hidden files, no ``..``), at most :data:`~visus.limits.ATTACHMENT_MAX_NAME_BYTES`
bytes, and a clash with an existing name (case-insensitively) gets ``name (2).ext``.
Caps: :data:`~visus.limits.ATTACHMENT_MAX_FILE_BYTES` per file (``TooLargeError``),
:data:`~visus.limits.ATTACHMENT_MAX_SESSION_BYTES` and
:data:`~visus.limits.ATTACHMENT_MAX_FILES` per session (``LimitError``).

The tools are plain functions returning what the model reads:
:func:`list_attachments`, :func:`read_attachment` (text paged by lines; images and
binary get a refusal naming ``view_attachment``), :func:`grep_attachment` (bounded
hits; the pattern runs under a wall-clock budget, see below) and
:func:`view_attachment` (a :class:`~visus.perception.values.Perception` or a
``Refusal``). Mistakes the model makes (a wrong name, a bad pattern) come back as
text, not exceptions, so the model can correct itself.

Catastrophic patterns: Python's ``re`` cannot be interrupted, so grep compiles with
the ``regex`` module (``re``-compatible syntax) and passes every search the time left
of :data:`~visus.limits.GREP_TIME_BUDGET_SECONDS`; a pattern like ``(a+)+$`` on a
long ``aaaa…!`` line stops at the budget with a message saying so. Patterns are
capped at :data:`~visus.limits.GREP_MAX_PATTERN_CHARS` and each line is searched in
its first :data:`~visus.limits.GREP_MAX_LINE_CHARS` characters.

Example:
    >>> import base64, tempfile, pathlib
    >>> store = AttachmentStore(pathlib.Path(tempfile.mkdtemp()))
    >>> content = base64.b64encode(b"alpha\\nbeta\\n").decode()
    >>> info = store.put("../notes.txt", content, "text/plain")
    >>> info.name, info.size
    ('notes.txt', 11)
    >>> print(list_attachments(store))
    notes.txt (11 bytes, text/plain)
    >>> print(grep_attachment(store, "bet"))
    notes.txt:2: beta
    [1 match]
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import os
import re
import tempfile
import threading
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import regex

from visus import limits, media
from visus.errors import (
    InvalidInputError,
    LimitError,
    NotFoundError,
    StoreError,
    TooLargeError,
    UndecodableError,
    VisusError,
)
from visus.media.text import decode_text, split_lines  # read's rules for text and lines
from visus.record.messages import PerceptionOrigin

if TYPE_CHECKING:
    from visus.models.spec import ModelSpec
    from visus.perception.values import Perception, Refusal

__all__ = [
    "AttachmentInfo",
    "AttachmentStore",
    "attachment_origin",
    "grep_attachment",
    "list_attachments",
    "read_attachment",
    "safe_name",
    "view_attachment",
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
        self._lock = threading.Lock()

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
        return cls(root, **caps)

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
        mime = _check_mime(mime_type)
        wanted = safe_name(filename)
        # Refuse obviously oversized payloads before decoding them.
        estimate = len(content_base64) // 4 * 3
        if isinstance(content_base64, str) and estimate > self.max_file_bytes + 3:
            raise TooLargeError(self._file_too_large(wanted, estimate, about=True))
        data = _decode_base64(content_base64)
        if len(data) > self.max_file_bytes:
            raise TooLargeError(self._file_too_large(wanted, len(data)))
        digest = hashlib.sha256(data).hexdigest()
        with self._lock:
            files = self._load()
            for f in files:
                if f.name == wanted and f.sha256 == digest and f.mime_type == mime:
                    return f
            if len(files) >= self.max_files:
                raise LimitError(
                    f"this session already holds {len(files)} attachments, the limit "
                    f"(ATTACHMENT_MAX_FILES = {self.max_files}); {wanted} was not stored"
                )
            used = sum(f.size for f in files)
            if used + len(data) > self.max_session_bytes:
                raise LimitError(
                    f"{wanted} ({len(data)} bytes) would bring this session's attachments "
                    f"to {used + len(data)} bytes, over the limit of {self.max_session_bytes} "
                    f"bytes (ATTACHMENT_MAX_SESSION_BYTES)"
                )
            name = _unclashed(wanted, {f.name.casefold() for f in files})
            _write_atomic(self.root / _FILES / name, data)
            info = AttachmentInfo(name, len(data), mime, digest, original_name=filename)
            self._save([*files, info])
            return info

    def _file_too_large(self, name: str, size: int, *, about: bool = False) -> str:
        return (
            f"{name} is {'about ' if about else ''}{size} bytes, over the per-file limit "
            f"of {self.max_file_bytes} bytes (ATTACHMENT_MAX_FILE_BYTES)"
        )

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
    path.parent.mkdir(parents=True, exist_ok=True)
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


# --- tools ----------------------------------------------------------------------------


def list_attachments(store: AttachmentStore) -> str:
    """One line per attachment: ``name (bytes bytes, mime)``."""
    files = store.list()
    if not files:
        return "No attachments in this session."
    return "\n".join(f"{f.name} ({f.size} bytes, {f.mime_type})" for f in files)


def _missing(store: AttachmentStore, filename: str) -> str:
    names = [f.name for f in store.list()]
    known = ", ".join(names) if names else "none"
    return f"No attachment named {filename!r}. Attachments: {known}."


def _not_text(filename: str, data: bytes, info: AttachmentInfo) -> str:
    """Why read_attachment refuses non-text, decided by our decoders (``media.probe``)."""
    only_text = "read_attachment returns text only."
    try:
        found = media.probe(data)
    except TooLargeError as e:
        return f"{filename} is an image or document too large to view ({e}). {only_text}"
    except UndecodableError:
        return (
            f"{filename} is not text: it looks like a damaged image or document that "
            f"view_attachment cannot decode either. {only_text}"
        )
    except VisusError:
        found = None
    if found is not None and found.kind == "raster":
        size = f" {found.width}x{found.height}" if found.width and found.height else ""
        return (
            f"{filename} is an image ({found.media_type}{size}); {only_text} "
            f"Call view_attachment({filename!r}) to see it."
        )
    if found is not None and found.kind == "pdf":
        pages = f" of {found.page_count} pages" if found.page_count else ""
        return (
            f"{filename} is a PDF{pages}; {only_text} "
            f"Call view_attachment({filename!r}) to see its pages."
        )
    return (
        f"{filename} is binary ({info.mime_type}, {info.size} bytes), not text and not an "
        f"image or PDF our decoders open. {only_text}"
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_attachment(
    store: AttachmentStore, filename: str, offset: int = 0, limit: int | None = None
) -> str:
    """Text of an attachment, numbered lines, ``limit`` lines after skipping ``offset``.

    ``limit`` defaults to, and is capped at, :data:`~visus.limits.READ_DEFAULT_LINES`;
    lines are clipped at :data:`~visus.limits.READ_MAX_LINE_CHARS` characters.
    Example output: ``     1\\talpha`` lines, then ``[lines 1-2000 of 5000; call
    read_attachment('log.txt', offset=2000) for more]``.
    """
    try:
        info = store.info(filename)
        data = store.read_bytes(filename)
    except NotFoundError:
        return _missing(store, filename)
    if (
        not _is_int(offset)
        or offset < 0
        or (limit is not None and (not _is_int(limit) or limit < 1))
    ):
        return "offset must be >= 0 and limit >= 1."
    text = decode_text(data)
    if text is None:
        return _not_text(filename, data, info)
    lines = split_lines(text)
    total = len(lines)
    if total == 0:
        return f"[{filename} is empty]"
    if offset >= total:
        return f"[{filename} has {total} lines; offset {offset} is past the end]"
    count = min(limit or limits.READ_DEFAULT_LINES, limits.READ_DEFAULT_LINES)
    window = lines[offset : offset + count]
    clipped = 0
    out: list[str] = []
    for number, line in enumerate(window, start=offset + 1):
        if len(line) > limits.READ_MAX_LINE_CHARS:
            clipped += 1
            line = line[: limits.READ_MAX_LINE_CHARS] + " […]"
        out.append(f"{number:>6}\t{line}")
    end = offset + len(window)
    footer = f"[lines {offset + 1}-{end} of {total}"
    if end < total:
        footer += f"; call read_attachment({filename!r}, offset={end}) for more"
    if clipped:
        footer += f"; {clipped} long lines clipped at {limits.READ_MAX_LINE_CHARS} characters"
    return "\n".join(out) + "\n" + footer + "]"


def grep_attachment(
    store: AttachmentStore,
    pattern: str,
    filename: str | None = None,
    *,
    time_budget: float = limits.GREP_TIME_BUDGET_SECONDS,
) -> str:
    """Lines matching the regular expression ``pattern``: ``name:line: text``.

    Searches ``filename`` or every text attachment; at most
    :data:`~visus.limits.GREP_MAX_HITS` hits; answers within ``time_budget`` seconds.
    """
    if len(pattern) > limits.GREP_MAX_PATTERN_CHARS:
        return (
            f"The pattern is {len(pattern)} characters, over the limit of "
            f"{limits.GREP_MAX_PATTERN_CHARS} (GREP_MAX_PATTERN_CHARS)."
        )
    try:
        compiled = regex.compile(pattern, regex.VERSION0)
    except regex.error as e:
        return f"Invalid regular expression {pattern!r}: {e}"
    if filename is not None:
        try:
            targets = [store.info(filename)]
        except NotFoundError:
            return _missing(store, filename)
    else:
        targets = store.list()
        if not targets:
            return "No attachments in this session."
    texts: list[tuple[str, str]] = []
    skipped: list[str] = []
    for info in targets:
        text = decode_text(store.read_bytes(info.name))
        if text is None:
            skipped.append(info.name)
        else:
            texts.append((info.name, text))
    search = _Search(compiled, texts, time.monotonic() + time_budget)
    # The search runs in a worker so the answer comes on time even when one match
    # overruns: regex's own timeout stops the worker, but only approximately.
    worker = threading.Thread(target=search.run, name="visus-grep", daemon=True)
    worker.start()
    worker.join(time_budget)
    notes: list[str] = []
    if worker.is_alive() or search.timed_out:
        search.cancelled = True
        notes.append(
            f"stopped: the pattern ran past the time budget of {time_budget:g} s "
            f"(GREP_TIME_BUDGET_SECONDS) at {search.where}; it likely backtracks "
            f"catastrophically (nested quantifiers such as (a+)+). Simplify the pattern."
        )
    elif search.error:
        notes.append(f"stopped: {search.error}")
    stopped = bool(notes)
    hits = list(search.hits)
    if len(hits) >= limits.GREP_MAX_HITS:
        notes.append(f"stopped at the limit of {limits.GREP_MAX_HITS} matches (GREP_MAX_HITS)")
    if skipped:
        notes.append("not text, not searched: " + ", ".join(skipped))
    if search.long_lines:
        cap = limits.GREP_MAX_LINE_CHARS
        notes.append(
            f"{search.long_lines} lines longer than {cap} characters were searched in "
            f"their first {cap} characters only"
        )
    summary = f"{len(hits)} match" + ("" if len(hits) == 1 else "es")
    if not hits and not stopped:
        summary = f"no match for {pattern!r}"
    return "\n".join([*hits, f"[{'; '.join([summary, *notes])}]"])


class _Search:
    """One grep's state, shared between the worker and the caller."""

    def __init__(self, compiled: Any, texts: list[tuple[str, str]], deadline: float) -> None:
        self.compiled = compiled
        self.texts = texts
        self.deadline = deadline
        self.hits: list[str] = []
        self.long_lines = 0
        self.where = ""
        self.timed_out = False
        self.cancelled = False
        self.error = ""

    def run(self) -> None:
        cap = limits.GREP_MAX_LINE_CHARS
        try:
            for name, text in self.texts:
                for number, line in enumerate(split_lines(text), start=1):
                    if self.cancelled:
                        return
                    self.where = f"{name} line {number}"
                    if len(line) > cap:
                        self.long_lines += 1
                        line = line[:cap]
                    left = self.deadline - time.monotonic()
                    if left <= 0:
                        self.timed_out = True
                        return
                    if self.compiled.search(line, timeout=left, concurrent=True):
                        shown = line[: limits.READ_MAX_LINE_CHARS]
                        self.hits.append(f"{name}:{number}: {shown}")
                        if len(self.hits) >= limits.GREP_MAX_HITS:
                            return
        except TimeoutError:
            self.timed_out = True
        except Exception as e:  # a worker must not die silently
            self.error = f"{type(e).__name__}: {e}"


def attachment_origin(filename: str) -> PerceptionOrigin:
    """How a viewed attachment is re-viewed: retention may elide it and say so."""
    return PerceptionOrigin(source=filename, tool="view_attachment")


def view_attachment(
    store: AttachmentStore, filename: str, *, model: str | ModelSpec, render: bool = True
) -> Perception | Refusal:
    """The attachment as an image fitted for ``model``, or a refusal the model reads.

    Images are decoded, and (when ``render``, the host's render capability) text,
    SVG and PDF attachments are rendered, exactly as ``view`` does. The perception's
    ``source`` is the attachment name; record it with :func:`attachment_origin` so it
    can be re-viewed after retention elides it.
    """
    from visus.models.registry import get_model
    from visus.perception import Reach, Refusal, view

    spec = get_model(model) if isinstance(model, str) else model
    if not spec.vision:
        return Refusal(
            "unsupported_type",
            f"The model {spec.name} cannot see images, so {filename!r} cannot be viewed. "
            f"Use read_attachment or grep_attachment for its text, if it has any.",
            source=filename,
        )
    try:
        data = store.read_bytes(filename)
    except NotFoundError:
        return Refusal("not_found", _missing(store, filename), source=filename)
    reach = Reach([store.root], render=render)
    return view(data, reach=reach, model=spec, name=filename)
