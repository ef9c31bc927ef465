"""Every session of a data folder, wherever the command that wrote it keeps it.

``visus run`` and ``chat`` write ``<data>/sessions``; ``visus serve`` keeps each
instance's sessions (the web chat's included) under ``<data>/serve/instances/<id>/``.
The commands that read sessions (``session list/show/check/rm``, ``usage``, ``lower``,
``view --session``) look in all of them: a web chat session is named by its id alone
when that is unique, else as ``INSTANCE/SESSION``.

Not a command module (the leading underscore keeps discovery away from it).

Example:
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> [p.label for p in places(root)]
    ['visus run/chat']
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from visus.paths import blobs_dir, sessions_dir
from visus.record.blobs import FileBlobStore
from visus.record.sessions import SessionStore

__all__ = ["Found", "Place", "find", "places", "remove", "where_text"]

#: The web chat's instance (``visus.app.DEFAULT_INSTANCE_ID``; not imported: the app
#: pulls in the web framework, and these commands start fast).
WEB_CHAT_INSTANCE = "i-webchat"
_INSTANCE = re.compile(r"i-[A-Za-z0-9_-]+")


@dataclass(frozen=True, slots=True)
class Place:
    """One folder of sessions in a data folder, and how its sessions are named."""

    label: str
    #: ``""`` for ``visus run``'s own sessions, else ``"<instance id>/"``.
    prefix: str
    folder: Path

    @property
    def sessions(self) -> SessionStore:
        return SessionStore(sessions_dir(self.folder))

    @property
    def blobs(self) -> FileBlobStore:
        return FileBlobStore(blobs_dir(self.folder))


@dataclass(frozen=True, slots=True)
class Found:
    """A session found in a place: ``ref`` is how to name it again."""

    place: Place
    id: str

    @property
    def ref(self) -> str:
        return self.place.prefix + self.id


def _instance_label(folder: Path) -> str:
    name = folder.name
    if name == WEB_CHAT_INSTANCE:
        return "web chat"
    try:
        model = json.loads((folder / "instance.json").read_text(encoding="utf-8")).get("model")
    except (OSError, ValueError, AttributeError):
        model = None
    return f"tether instance {name}" + (f" ({model})" if model else "")


def places(root: Path) -> list[Place]:
    """The data folder's own sessions, then each ``visus serve`` instance's."""
    found = [Place("visus run/chat", "", root)]
    instances = root / "serve" / "instances"
    if instances.is_dir():
        for folder in sorted(p for p in instances.iterdir() if p.is_dir()):
            found.append(Place(_instance_label(folder), f"{folder.name}/", folder))
    return found


def where_text(root: Path) -> str:
    """Where sessions are looked for, for a 'not found' message."""
    return f"{sessions_dir(root)} or {root / 'serve' / 'instances'}/*/sessions"


def _fail(message: str) -> NoReturn:
    from visus.cli._common import fail

    fail(message)


def find(root: Path, ref: str) -> Found:
    """The session ``ref`` names (``ID`` or ``INSTANCE/ID``); exit 2 naming where it was
    looked for, or the places to choose from when the id is in several."""
    from visus.errors import InvalidKeyError
    from visus.record.sessions import validate_session_id

    instance, _, sid = ref.rpartition("/")
    try:
        # INSTANCE/ID only with an instance id as visus makes them; else the whole
        # text is checked as an id, and refused as one ("../x", "a/b/c").
        validate_session_id(sid if _INSTANCE.fullmatch(instance) else ref)
    except InvalidKeyError as e:
        _fail(str(e))
    candidates = [p for p in places(root) if not instance or p.prefix == f"{instance}/"]
    hits = [Found(p, sid) for p in candidates if p.sessions.exists(sid)]
    if not hits:
        _fail(f"no session {ref!r} under {where_text(root)} (visus session list shows them)")
    if len(hits) > 1:
        names = ", ".join(h.ref for h in hits)
        _fail(f"session {sid!r} is in {len(hits)} places: {names}; name one of them")
    return hits[0]


def remove(found: Found) -> bool:
    """Delete a session's log and its attachments; its blobs go at the next ``visus gc``
    (another session may hold the same image)."""
    return found.place.sessions.delete(found.id)
