"""Reach: the roots a tool may see, and whether the host lets it render.

A ref reaches a file only if the file, resolved after every symlink, lies under
one of the resolved roots. Relative refs are taken from the first root. Rendering
(svg, text and pdf become pixels) is a second capability the host may withhold;
raster images are viewable either way.

Errors (``visus.errors``): a path outside every root, whether by ``../`` or by a
symlink, is a ``ReachError`` and never says whether the target exists; a missing
file is ``NotFoundError``; a directory is ``InvalidInputError`` (the argument names
the wrong kind of thing: view and read take a file); a device, socket or fifo is
``UnsupportedTypeError``.

Example:
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (root / "a.txt").write_text("hi")
    >>> Reach([root]).resolve("a.txt") == (root / "a.txt").resolve()
    True
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from visus.errors import (
    InvalidInputError,
    NotFoundError,
    ReachError,
    TooLargeError,
    UnsupportedTypeError,
)
from visus.limits import MAX_SOURCE_BYTES

__all__ = ["Reach"]


@dataclass(frozen=True, slots=True, init=False)
class Reach:
    """Allowed roots (resolved once, after symlinks) and the render capability."""

    roots: tuple[Path, ...]
    render: bool

    def __init__(self, roots: Sequence[Path | str] | Path | str, render: bool = True) -> None:
        if isinstance(roots, (str, os.PathLike)):
            roots = [roots]
        resolved: list[Path] = []
        for root in roots:
            if not isinstance(root, (str, os.PathLike)):
                raise TypeError(f"a reach root is a path, got {type(root).__name__}")
            path = Path(root).expanduser().resolve()
            if path not in resolved:
                resolved.append(path)
        object.__setattr__(self, "roots", tuple(resolved))
        object.__setattr__(self, "render", bool(render))

    @classmethod
    def cwd(cls, *, render: bool = True) -> Reach:
        """The current directory as the only root."""
        return cls([Path.cwd()], render=render)

    def contains(self, path: Path) -> bool:
        """Whether an already-resolved ``path`` lies under a root."""
        return any(path == root or path.is_relative_to(root) for root in self.roots)

    def resolve(self, ref: str | os.PathLike[str]) -> Path:
        """The regular file ``ref`` names, resolved after symlinks, inside a root.

        Raises ``ReachError``, ``NotFoundError``, ``InvalidInputError`` or
        ``UnsupportedTypeError`` as the module docstring says.
        """
        raw = os.fspath(ref)
        if not isinstance(raw, str):
            raise InvalidInputError("a path must be text, not bytes")
        if not raw.strip():
            raise InvalidInputError("empty path")
        if "\x00" in raw:
            raise InvalidInputError("a path cannot contain a NUL character")
        if not self.roots:
            raise ReachError("no roots are allowed: this tool can see no files")
        path = Path(raw).expanduser()
        if not path.is_absolute():
            path = self.roots[0] / path
        try:
            # Non-strict first: a path that leaves the roots is refused the same way
            # whether or not its target exists, so the refusal leaks nothing.
            loose = path.resolve(strict=False)
        except (RuntimeError, OSError) as e:  # symlink loop, name too long
            raise InvalidInputError(f"cannot resolve {raw!r}: {e}") from e
        if not self.contains(loose):
            raise ReachError(f"{raw!r} is outside the allowed roots")
        try:
            real = path.resolve(strict=True)
        except FileNotFoundError as e:
            raise NotFoundError(f"{raw!r} does not exist") from e
        except (RuntimeError, OSError) as e:
            raise InvalidInputError(f"cannot resolve {raw!r}: {e}") from e
        if not self.contains(real):  # changed between the two resolves
            raise ReachError(f"{raw!r} is outside the allowed roots")
        try:
            st = real.stat()
        except FileNotFoundError as e:
            raise NotFoundError(f"{raw!r} does not exist") from e
        except OSError as e:
            raise InvalidInputError(f"cannot stat {raw!r}: {e}") from e
        if stat.S_ISDIR(st.st_mode):
            raise InvalidInputError(f"{raw!r} is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise UnsupportedTypeError(f"{raw!r} is not a regular file")
        return real

    def read_bytes(self, path: Path, *, max_bytes: int = MAX_SOURCE_BYTES) -> bytes:
        """Read a file :meth:`resolve` returned, refusing more than ``max_bytes``.

        The size is checked before reading and again while reading (a file may
        grow); the final path component is opened without following symlinks, and
        where the OS names an open file (``/proc/self/fd``) that name must still lie
        under a root, so a swap after :meth:`resolve` is caught.
        """
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(path, flags)
        except FileNotFoundError as e:
            raise NotFoundError(f"{path.name!r} does not exist") from e
        except PermissionError as e:
            raise ReachError(f"{path.name!r} cannot be read: permission denied") from e
        except OSError as e:  # ELOOP: swapped for a symlink after resolve
            raise ReachError(f"{path.name!r} cannot be opened safely: {e}") from e
        with os.fdopen(fd, "rb") as f:
            opened = _fd_path(fd)
            if opened is not None and not self.contains(opened):
                # A directory on the way was swapped for a symlink after resolve().
                raise ReachError(f"{path.name!r} is outside the allowed roots")
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise UnsupportedTypeError(f"{path.name!r} is not a regular file")
            if st.st_size > max_bytes:
                raise TooLargeError(
                    f"{path.name!r} is {st.st_size} bytes; the limit is {max_bytes} bytes"
                )
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise TooLargeError(f"{path.name!r} is larger than the limit of {max_bytes} bytes")
        return data


def _fd_path(fd: int) -> Path | None:
    """The path the kernel has for an open file descriptor, where it tells (Linux)."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None
