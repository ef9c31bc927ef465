"""Content-addressed image storage: every blob is keyed by the sha256 of its bytes.

A :class:`BlobStore` is the protocol the rest of visus codes against;
:class:`FileBlobStore` keeps blobs on disk under fan-out folders
(``<root>/<ab>/<cd>/<digest>.<ext>``) and :class:`MemoryBlobStore` keeps them in a
dict for tests. Both write a blob once, verify it against its digest on every read
and refuse keys that are not 64 lowercase hex digits, so a key can never name a
path outside the store.

Example:
    >>> store = MemoryBlobStore()
    >>> key = store.put(b"\\x89PNG...", "image/png")
    >>> store.get(key), store.media_type(key), store.reads
    (b'\\x89PNG...', 'image/png', 1)
"""

from __future__ import annotations

import contextlib
import hashlib
import mimetypes
import os
import re
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

from visus.errors import IntegrityError, InvalidKeyError, NotFoundError, StoreError, os_reason
from visus.paths import private_dir

__all__ = [
    "BlobStore",
    "FileBlobStore",
    "MemoryBlobStore",
    "extension_for",
    "media_type_for_extension",
    "validate_digest",
]

_DIGEST = re.compile(r"[0-9a-f]{64}")
_EXTENSION = re.compile(r"[a-z0-9]{1,10}")

# Our own choices where the platform's mimetypes table is vague or differs between
# systems (image/jpeg may map to .jpe; image/tiff to .tiff or .tif).
_EXTENSIONS: dict[str, str] = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
    "image/avif": "avif",
    "image/bmp": "bmp",
    "image/tiff": "tif",
    "image/heic": "heic",
    "image/heif": "heif",
    "image/svg+xml": "svg",
    "application/pdf": "pdf",
    "application/octet-stream": "bin",
}
_MEDIA_TYPES: dict[str, str] = {ext: mt for mt, ext in _EXTENSIONS.items()}


def validate_digest(digest: object) -> str:
    """Return ``digest`` if it is 64 lowercase hex digits, else raise InvalidKeyError.

    Example:
        >>> validate_digest("../etc/passwd")
        Traceback (most recent call last):
        ...
        visus.errors.InvalidKeyError: not a sha256 digest (64 lowercase hex): '../etc/passwd'
    """
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise InvalidKeyError(f"not a sha256 digest (64 lowercase hex): {digest!r}")
    return digest


def extension_for(media_type: str) -> str:
    """The file extension (no dot) a blob of ``media_type`` is stored under.

    Example:
        >>> extension_for("image/jpeg"), extension_for("image/png")
        ('jpg', 'png')
    """
    base = media_type.split(";", 1)[0].strip().lower()
    if base in _EXTENSIONS:
        return _EXTENSIONS[base]
    guessed = mimetypes.guess_extension(base, strict=False)
    ext = guessed.lstrip(".").lower() if guessed else ""
    return ext if _EXTENSION.fullmatch(ext) else "bin"


def media_type_for_extension(ext: str) -> str | None:
    """The media type a stored extension stands for, or None if unknown."""
    ext = ext.lower()
    if ext in _MEDIA_TYPES:
        return _MEDIA_TYPES[ext]
    guessed, _ = mimetypes.guess_type(f"x.{ext}", strict=False)
    return guessed


@runtime_checkable
class BlobStore(Protocol):
    """Content-addressed storage for image bytes (and other blobs such as PDFs).

    ``put`` is idempotent and returns the lowercase hex sha256 of ``data``;
    ``get`` raises :class:`~visus.errors.NotFoundError` for an absent key and
    :class:`~visus.errors.IntegrityError` when the stored bytes no longer hash to
    it; every method raises :class:`~visus.errors.InvalidKeyError` for a key that
    is not 64 lowercase hex digits.
    """

    def put(self, data: bytes, media_type: str) -> str: ...

    def get(self, digest: str) -> bytes: ...

    def has(self, digest: str) -> bool: ...

    def media_type(self, digest: str) -> str | None: ...

    def gc(self, live: Iterable[str]) -> int: ...


def _live_set(live: Iterable[str]) -> frozenset[str]:
    # Garbage in the live set cannot name a stored blob, so it is simply not kept.
    return frozenset(d for d in live if isinstance(d, str) and _DIGEST.fullmatch(d))


def _fsync_dir(path: Path) -> None:
    # Makes the rename itself durable; not every platform can open a directory.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class FileBlobStore:
    """Blobs on disk under ``root``, written once and verified on read.

    A blob lives at ``<root>/<ab>/<cd>/<digest>.<ext>`` with the extension taken
    from its media type. Writing goes to a temp file in the same folder, is
    fsynced, renamed into place with ``os.replace`` and the folder fsynced, so a
    crash leaves either the whole blob or none. ``reads`` and ``writes`` count
    the blobs read and written, so tests and benchmarks can prove what was touched.

    Example:
        >>> import tempfile
        >>> store = FileBlobStore(Path(tempfile.mkdtemp()))
        >>> key = store.put(b"GIF89a...", "image/gif")
        >>> store.put(b"GIF89a...", "image/gif") == key, store.writes
        (True, 1)
        >>> store.path(key).name == key + ".gif"
        True
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.reads = 0
        self.writes = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FileBlobStore({str(self.root)!r})"

    def _leaf(self, digest: str) -> Path:
        return self.root / digest[:2] / digest[2:4]

    def path(self, digest: str) -> Path | None:
        """Where the blob ``digest`` is stored, or None if it is absent."""
        leaf = self._leaf(validate_digest(digest))
        prefix = digest + "."
        try:
            with os.scandir(leaf) as entries:
                for entry in entries:
                    if entry.name.startswith(prefix) and entry.is_file():
                        return Path(entry.path)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StoreError(f"cannot list blob folder {leaf}: {e}") from e
        return None

    def has(self, digest: str) -> bool:
        return self.path(digest) is not None

    def media_type(self, digest: str) -> str | None:
        found = self.path(digest)
        return None if found is None else media_type_for_extension(found.suffix.lstrip("."))

    def put(self, data: bytes, media_type: str) -> str:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"blob data must be bytes, not {type(data).__name__}")
        data = bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        with self._lock:
            existing = self.path(digest)
            # Written once: an intact copy stays untouched. A copy of the wrong size
            # (damaged on disk) is replaced, since we hold the true bytes right here.
            if existing is not None and existing.stat().st_size == len(data):
                return digest
            leaf = self._leaf(digest)
            target = leaf / f"{digest}.{extension_for(media_type)}"
            try:
                private_dir(leaf)
                self._write_atomically(leaf, target, data)
                if existing is not None and existing != target:
                    existing.unlink(missing_ok=True)
            except OSError as e:
                raise StoreError(f"cannot write blob {digest}: {os_reason(e)}") from e
            self.writes += 1
        return digest

    @staticmethod
    def _write_atomically(leaf: Path, target: Path, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(dir=leaf, prefix=".tmp-", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _fsync_dir(leaf)

    def get(self, digest: str) -> bytes:
        found = self.path(digest)
        if found is None:
            raise NotFoundError(f"blob sha256:{digest} is missing")
        try:
            data = found.read_bytes()
        except FileNotFoundError as e:
            raise NotFoundError(f"blob sha256:{digest} is missing") from e
        except OSError as e:
            raise StoreError(f"cannot read blob {digest}: {os_reason(e)}") from e
        self.reads += 1
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise IntegrityError(
                f"blob {found} does not match its digest: stored bytes hash to sha256:{actual}"
            )
        return data

    def digests(self) -> Iterator[str]:
        """Every stored digest (temp files of writes in progress are not blobs)."""
        if not self.root.is_dir():
            return
        for a in sorted(self.root.iterdir()):
            if not (a.is_dir() and len(a.name) == 2):
                continue
            for b in sorted(a.iterdir()):
                if not (b.is_dir() and len(b.name) == 2):
                    continue
                for f in sorted(b.iterdir()):
                    digest = f.name.split(".", 1)[0]
                    if _DIGEST.fullmatch(digest) and digest.startswith(a.name + b.name):
                        yield digest

    def gc(self, live: Iterable[str]) -> int:
        """Remove every blob whose digest is not in ``live``; return how many went.

        Emptied fan-out folders are removed too. Temp files of writes in progress
        are left alone. ``live`` must name every blob still wanted (for sessions,
        ``SessionStore.referenced_digests()``), and no other process may be adding
        blobs meanwhile: a blob written after the live set was taken would be removed.
        """
        keep = _live_set(live)
        removed = 0
        with self._lock:
            for digest in list(self.digests()):
                if digest in keep:
                    continue
                found = self.path(digest)
                if found is None:
                    continue
                try:
                    found.unlink()
                except FileNotFoundError:
                    continue
                except OSError as e:
                    raise StoreError(f"cannot remove blob {digest}: {os_reason(e)}") from e
                removed += 1
                for folder in (found.parent, found.parent.parent):
                    try:
                        folder.rmdir()
                    except OSError:
                        break
        return removed


class MemoryBlobStore:
    """A dict-backed :class:`BlobStore` with the same contract, for tests.

    ``reads`` and ``writes`` count blob reads and writes like FileBlobStore's.
    """

    def __init__(self) -> None:
        self._blobs: dict[str, tuple[bytes, str]] = {}
        self.reads = 0
        self.writes = 0

    def __len__(self) -> int:
        return len(self._blobs)

    def put(self, data: bytes, media_type: str) -> str:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"blob data must be bytes, not {type(data).__name__}")
        data = bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        stored = self._blobs.get(digest)
        if stored is None or stored[0] != data:
            self._blobs[digest] = (data, media_type)
            self.writes += 1
        return digest

    def get(self, digest: str) -> bytes:
        stored = self._blobs.get(validate_digest(digest))
        if stored is None:
            raise NotFoundError(f"blob sha256:{digest} is missing")
        self.reads += 1
        if hashlib.sha256(stored[0]).hexdigest() != digest:
            raise IntegrityError(f"blob sha256:{digest} does not match its stored bytes")
        return stored[0]

    def has(self, digest: str) -> bool:
        return validate_digest(digest) in self._blobs

    def media_type(self, digest: str) -> str | None:
        stored = self._blobs.get(validate_digest(digest))
        return None if stored is None else stored[1]

    def digests(self) -> Iterator[str]:
        """Every stored digest."""
        return iter(sorted(self._blobs))

    def gc(self, live: Iterable[str]) -> int:
        keep = _live_set(live)
        dead = [d for d in self._blobs if d not in keep]
        for d in dead:
            del self._blobs[d]
        return len(dead)

    def corrupt(self, digest: str, data: bytes) -> None:
        """Replace a blob's bytes without rehashing, to test integrity checks."""
        _, media_type = self._blobs[validate_digest(digest)]
        self._blobs[digest] = (data, media_type)
