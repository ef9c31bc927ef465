"""Where visus keeps its data: one folder holding the session logs and the blob store.

The data folder is chosen once: an explicit argument (``--data DIR``), else the
``VISUS_DATA`` environment variable, else the user's data dir from platformdirs.
The stores create their folders when they first write, through :func:`private_dir`:
0700, like the 0600 records in them (the names of sessions and instances, and which
images exist, are the owner's business too). A folder that already exists is left as
it is; ``visus serve`` warns when group or others may read one (:func:`exposed`).

Layout::

    <data>/sessions/<id>.jsonl
    <data>/blobs/<ab>/<cd>/<digest>.<ext>
    <data>/files/           the folder served agents read and view (visus serve's root)

Everything in the data folder but ``files`` is visus's own: no agent tool reaches it
(:func:`visus.agent.policy.own_places`).

Example:
    >>> from pathlib import Path
    >>> d = data_dir("/tmp/visus-example")
    >>> sessions_dir(d), blobs_dir(d)
    (PosixPath('/tmp/visus-example/sessions'), PosixPath('/tmp/visus-example/blobs'))
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

import platformdirs

__all__ = [
    "DATA_ENV",
    "PRIVATE_DIR_MODE",
    "blobs_dir",
    "data_dir",
    "exposed",
    "files_dir",
    "integration_blobs_dir",
    "locked",
    "private_dir",
    "refit_index",
    "sessions_dir",
]

#: Environment variable naming the data folder when no explicit one is given.
DATA_ENV = "VISUS_DATA"


def data_dir(explicit: Path | str | None = None) -> Path:
    """The data folder: ``explicit`` > ``$VISUS_DATA`` > the platform's user data dir.

    An empty string counts as "not given", so an unset option or a blank variable
    falls through to the next choice. ``~`` is expanded.

    Example:
        >>> data_dir("~/visus-data") == Path.home() / "visus-data"
        True
    """
    if explicit is not None and str(explicit) != "":
        return Path(explicit).expanduser()
    env = os.environ.get(DATA_ENV, "")
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("visus", appauthor=False))


def sessions_dir(data: Path | str) -> Path:
    """The folder of session logs (``<data>/sessions``)."""
    return Path(data) / "sessions"


def blobs_dir(data: Path | str) -> Path:
    """The content-addressed blob store's root (``<data>/blobs``)."""
    return Path(data) / "blobs"


def files_dir(data: Path | str) -> Path:
    """The folder of a data folder that agents may reach (``<data>/files``): ``visus
    serve``'s default root; the rest of the data folder is out of every agent's reach.

    Example:
        >>> files_dir("/srv/visus").as_posix()
        '/srv/visus/files'
    """
    return Path(data) / "files"


def integration_blobs_dir(data: Path | str) -> Path:
    """The blobs of the framework integrations (``<data>/integrations/blobs``).

    Kept apart from :func:`blobs_dir`: a framework's history (a pydantic-ai message
    list, an Agents SDK session) names these images where ``visus gc`` cannot see,
    so gc never collects them; delete the folder when those histories are gone.

    Example:
        >>> integration_blobs_dir("/srv/visus").as_posix()
        '/srv/visus/integrations/blobs'
    """
    return Path(data) / "integrations" / "blobs"


def refit_index(data: Path | str) -> Path:
    """The refit cache's index (re-fitted images by source digest and profile), kept
    next to the blobs it maps; the agent and ``visus lower`` share it.

    Example:
        >>> refit_index("/srv/visus").as_posix()
        '/srv/visus/blobs/refit-index.json'
    """
    return blobs_dir(data) / "refit-index.json"


#: The mode of every folder visus creates for its data: its owner's only.
PRIVATE_DIR_MODE = 0o700


def private_dir(path: Path | str) -> Path:
    """``path`` as a folder, created with every missing parent 0700 (an existing one is
    left as it is). ``Path.mkdir(parents=True, mode=...)`` would give the parents the
    default 0755, so each level is made here.

    Example:
        >>> import tempfile
        >>> made = private_dir(Path(tempfile.mkdtemp()) / "data" / "sessions")
        >>> oct(made.stat().st_mode & 0o777), oct(made.parent.stat().st_mode & 0o777)
        ('0o700', '0o700')
    """
    path = Path(path)
    missing: list[Path] = []
    for level in (path, *path.parents):
        if level.is_dir():
            break
        missing.append(level)
    for level in reversed(missing):
        try:
            level.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            if not level.is_dir():  # a file in the way: say so as mkdir would
                raise
    return path


def exposed(folders: Iterable[Path]) -> list[Path]:
    """Those of ``folders`` that exist and that group or others may read, list or enter.

    Example:
        >>> import tempfile
        >>> shared = Path(tempfile.mkdtemp()); shared.chmod(0o755)
        >>> exposed([shared, shared / "missing"]) == [shared]
        True
    """
    out: list[Path] = []
    for folder in folders:
        try:
            mode = folder.stat().st_mode
        except OSError:
            continue
        if stat.S_ISDIR(mode) and mode & 0o077:
            out.append(folder)
    return out


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (made 0600) for the block, so one
    process at a time does what it guards; where ``fcntl`` is missing (Windows), no lock.

    Example:
        >>> import tempfile
        >>> with locked(Path(tempfile.mkdtemp()) / "x.lock"):
        ...     pass
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
