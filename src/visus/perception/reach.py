"""Reach: the roots a tool may see, what it may never see, whether it may render, and
whether it may fetch URLs.

A ref reaches a file only if the file, resolved after every symlink, lies under
one of the resolved roots and under none of the denied places (``deny``: visus's own
config, data folder, blobs, records and logs), unless it also lies under one of the
folders carved out of them (``deny_except``: the files folder visus hands its agents).
A root that contains a denied place does not open it: the deny-list holds whatever
the roots, and whatever the spelling (a denied folder is known by its device and inode
too, so a case-insensitive file system or a second mount does not open it). Relative
refs are taken from the first root. Rendering (svg, text and pdf become pixels) is a
second capability the host may withhold; raster images are viewable either way.
Fetching an https URL a tool is given (``view("https://...")``, ``vision_analyze``'s
``file_url``, through :mod:`visus.net`'s SSRF gate) is a third: a server's operator may
turn it off (``[server] fetch_urls = false``), and :meth:`Reach.check_url` says so.

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
    >>> (root / "own").mkdir(); _ = (root / "own" / "visus.toml").write_text("x")
    >>> Reach([root], deny=[root / "own"]).resolve("own/visus.toml")
    Traceback (most recent call last):
    ...
    visus.errors.ReachError: 'own/visus.toml' is among visus's own files: no tool reaches them
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
    os_reason,
)
from visus.limits import MAX_SOURCE_BYTES

__all__ = ["Reach"]


def _resolved(paths: Sequence[Path | str] | Path | str, what: str) -> tuple[Path, ...]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[Path] = []
    for item in paths:
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(f"a reach {what} is a path, got {type(item).__name__}")
        path = Path(item).expanduser().resolve()
        if path not in out:
            out.append(path)
    return tuple(out)


def _under(path: Path, places: tuple[Path, ...]) -> bool:
    return any(path == place or path.is_relative_to(place) for place in places)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _identities(places: tuple[Path, ...]) -> set[tuple[int, int]]:
    """The (device, inode) of each place that exists now."""
    return {i for i in map(_identity, places) if i is not None}


def _first_of(path: Path, places: set[tuple[int, int]]) -> int | None:
    """How many levels up from ``path`` the nearest folder of ``places`` is, or None."""
    for level, folder in enumerate((path, *path.parents)):
        if _identity(folder) in places:
            return level
    return None


@dataclass(frozen=True, slots=True, init=False)
class Reach:
    """Allowed roots, denied places and their carve-outs (all resolved once, after
    symlinks), and the render and URL capabilities."""

    roots: tuple[Path, ...]
    render: bool
    deny: tuple[Path, ...]
    deny_except: tuple[Path, ...]
    urls: bool

    def __init__(
        self,
        roots: Sequence[Path | str] | Path | str,
        render: bool = True,
        *,
        deny: Sequence[Path | str] = (),
        deny_except: Sequence[Path | str] = (),
        urls: bool = True,
    ) -> None:
        object.__setattr__(self, "roots", _resolved(roots, "root"))
        object.__setattr__(self, "render", bool(render))
        object.__setattr__(self, "urls", bool(urls))
        object.__setattr__(self, "deny", _resolved(deny, "denied place"))
        object.__setattr__(self, "deny_except", _resolved(deny_except, "carve-out"))

    @classmethod
    def cwd(cls, *, render: bool = True) -> Reach:
        """The current directory as the only root."""
        return cls([Path.cwd()], render=render)

    def denies(self, path: Path) -> bool:
        """Whether an already-resolved ``path`` is one of the denied places.

        By spelling, and by what the folders are (device and inode): on a
        case-insensitive file system (macOS, Windows) or through a second mount, another
        spelling of a denied folder is still that folder.

        Example:
            >>> Reach(["/srv"], deny=["/srv/data"], deny_except=["/srv/data/files"]).denies(
            ...     Path("/srv/data/files/a.png"))
            False
        """
        if _under(path, self.deny) and not _under(path, self.deny_except):
            return True
        denied = _first_of(path, _identities(self.deny))
        if denied is None:
            return False
        carved = _first_of(path, _identities(self.deny_except))
        return carved is None or carved > denied  # a carve-out counts only inside the denial

    def check_url(self, url: str) -> None:
        """Raise :class:`ReachError` when this reach may not fetch ``url`` (URL fetches
        are off); whether the URL itself may be fetched is :mod:`visus.net`'s to say.

        Example:
            >>> Reach(["/srv"], urls=False).check_url("https://example.com/a.png")
            Traceback (most recent call last):
            ...
            visus.errors.ReachError: 'https://example.com/a.png': this server fetches no URLs...
        """
        if not self.urls:
            shown = url if len(url) <= 200 else url[:200] + "..."
            raise ReachError(
                f"{shown!r}: this server fetches no URLs; its operator turned them off "
                "([server] fetch_urls = false, or --no-fetch-urls). Give a file under the "
                "roots (or its bytes) instead"
            )

    def contains(self, path: Path) -> bool:
        """Whether an already-resolved ``path`` lies under a root and is not denied."""
        return _under(path, self.roots) and not self.denies(path)

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
            raise InvalidInputError(f"cannot resolve {raw!r}: {os_reason(e)}") from e
        if not self.contains(loose):
            raise self._outside(raw, loose)
        try:
            real = path.resolve(strict=True)
        except FileNotFoundError as e:
            raise NotFoundError(f"{raw!r} does not exist") from e
        except (RuntimeError, OSError) as e:
            raise InvalidInputError(f"cannot resolve {raw!r}: {os_reason(e)}") from e
        if not self.contains(real):  # changed between the two resolves
            raise self._outside(raw, real)
        try:
            st = real.stat()
        except FileNotFoundError as e:
            raise NotFoundError(f"{raw!r} does not exist") from e
        except OSError as e:
            raise InvalidInputError(f"cannot stat {raw!r}: {os_reason(e)}") from e
        if stat.S_ISDIR(st.st_mode):
            raise InvalidInputError(f"{raw!r} is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise UnsupportedTypeError(f"{raw!r} is not a regular file")
        return real

    def _outside(self, raw: str, path: Path) -> ReachError:
        # Said the same whether or not the file exists: the refusal leaks nothing.
        if self.denies(path):
            return ReachError(f"{raw!r} is among visus's own files: no tool reaches them")
        return ReachError(f"{raw!r} is outside the allowed roots")

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
            raise ReachError(f"{path.name!r} cannot be opened safely: {os_reason(e)}") from e
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
