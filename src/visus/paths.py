"""Where visus keeps its data: one folder holding the session logs and the blob store.

The data folder is chosen once: an explicit argument (``--data DIR``), else the
``VISUS_DATA`` environment variable, else the user's data dir from platformdirs.
Nothing here creates folders; the stores do that when they first write.

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

import os
from pathlib import Path

import platformdirs

__all__ = [
    "DATA_ENV",
    "blobs_dir",
    "data_dir",
    "files_dir",
    "integration_blobs_dir",
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
