"""Files a user dropped into a session, and the four tools an agent uses on them.

:class:`AttachmentStore` keeps one session's attachments in a folder the caller
chooses (``<data>/sessions/<id>/attachments/``): the bytes under ``files/`` and a
``manifest.json`` holding, per file, the stored name, size, sha256 and the MIME type
*the client declared*. It is one implementation of :class:`SessionAttachments`; the
PostgreSQL store has another (``store.attachments(namespace, session_id)``, shared by
every ``visus serve`` replica), built on the same :func:`~visus.attachments.store.admit`
rules, so names, caps and errors are the same wherever the bytes live. visus keeps no
table of magic bytes or extensions: whether a file is an image is settled when our
decoders open it (``visus.media``).

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
``Refusal``; viewed as ``view`` views a file: ``page``, ``region``,
``offset``/``limit``). Mistakes the model makes (a wrong name, a bad pattern) come back as
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

from visus.attachments.store import (
    AttachmentCaps,
    AttachmentInfo,
    AttachmentStore,
    SessionAttachments,
    safe_name,
)
from visus.attachments.tools import (
    attachment_origin,
    grep_attachment,
    list_attachments,
    read_attachment,
    view_attachment,
)

__all__ = [
    "AttachmentCaps",
    "AttachmentInfo",
    "AttachmentStore",
    "SessionAttachments",
    "attachment_origin",
    "grep_attachment",
    "list_attachments",
    "read_attachment",
    "safe_name",
    "view_attachment",
]
