"""A folder held open by descriptor, so a file in it is read and replaced where it was
checked, whatever happens to the path afterwards.

The edit tool checks a path against the roots, then reads and writes it. Between the
two, anyone able to write into a root (another local user of a shared folder, another
tool) could swap a folder on the way for a symlink, and a write by name would follow
it out of the roots. :meth:`PinnedFolder.of` opens the file's folder component by
component from the root it lies under, never following a symlink (``O_NOFOLLOW`` on
each, through ``dir_fd``), and checks the folder it holds against the reach again
(where the OS names an open folder: ``/proc/self/fd``). The file itself is then opened,
created and renamed relative to that descriptor, its last component never followed.

Example:
    >>> import tempfile
    >>> from visus.perception import Reach
    >>> root = Path(tempfile.mkdtemp())
    >>> (root / "a.txt").write_text("hi")
    2
    >>> with PinnedFolder.of(root / "a.txt", Reach([root])) as folder:
    ...     folder.read("a.txt"), folder.replace("a.txt", b"ho")
    (b'hi', None)
    >>> (root / "a.txt").read_text()
    'ho'
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from visus.errors import ReachError, TooLargeError, UnsupportedTypeError
from visus.limits import MAX_SOURCE_BYTES
from visus.perception import Reach

__all__ = ["PinnedFolder"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
#: Whether this OS opens and renames relative to a folder's descriptor (not Windows).
SUPPORTED = os.open in os.supports_dir_fd and os.stat in os.supports_dir_fd and _NOFOLLOW != 0


def _moved(name: str) -> ReachError:
    return ReachError(
        f"{name!r} is outside the allowed roots: a folder or the file on its way was "
        "replaced (a symlink) after it was checked"
    )


@dataclass(frozen=True, slots=True)
class PinnedFolder:
    """An open folder inside the reach; ``fd`` is its descriptor."""

    fd: int

    @classmethod
    @contextlib.contextmanager
    def of(cls, path: Path, reach: Reach) -> Iterator[PinnedFolder]:
        """The folder of ``path`` (a file :meth:`Reach.resolve` returned), opened from the
        root it lies under without following a symlink, and closed on exit. Raises
        :class:`ReachError` when a component is no longer a folder."""
        root = max((r for r in reach.roots if path.is_relative_to(r)), key=lambda r: len(r.parts))
        fd = os.open(root, os.O_RDONLY | _DIRECTORY)
        try:
            for part in path.parent.relative_to(root).parts:
                try:
                    inner = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=fd)
                except OSError as e:  # ELOOP/ENOTDIR: swapped for a symlink or a file
                    raise _moved(path.name) from e
                os.close(fd)
                fd = inner
            opened = _fd_path(fd)
            if opened is not None and not reach.contains(opened / path.name):
                raise _moved(path.name)
            yield cls(fd)
        finally:
            os.close(fd)

    def _open(self, name: str, flags: int) -> int:
        try:
            return os.open(name, flags | _NOFOLLOW, 0o600, dir_fd=self.fd)
        except OSError as e:  # ELOOP: the file was swapped for a symlink
            raise _moved(name) from e

    def read(self, name: str, *, max_bytes: int = MAX_SOURCE_BYTES) -> bytes:
        """The bytes of the regular file ``name`` in this folder (not through a symlink)."""
        fd = self._open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise UnsupportedTypeError(f"{name!r} is not a regular file")
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise TooLargeError(f"{name!r} is larger than the limit of {max_bytes} bytes")
        return data

    def replace(self, name: str, data: bytes) -> None:
        """Replace ``name`` with ``data`` through a new temporary file in this folder
        (created exclusively, never an existing name or symlink), with ``name``'s
        permissions, renamed over it."""
        st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            raise _moved(name)
        tmp = f".{name}.{secrets.token_hex(6)}.visus-tmp"
        fd = self._open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode))
                f.write(data)
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)
            raise


def _fd_path(fd: int) -> Path | None:
    """The path the kernel has for an open descriptor, where it tells (Linux)."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None
