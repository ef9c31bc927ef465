"""The four attachment tools as plain functions returning what the model reads.

See :mod:`visus.attachments` for how each behaves (paging, refusals naming
``view_attachment``, grep's wall-clock budget against catastrophic patterns).

Example:
    >>> import base64, tempfile, pathlib
    >>> from visus.attachments import AttachmentStore
    >>> store = AttachmentStore(pathlib.Path(tempfile.mkdtemp()))
    >>> _ = store.put("notes.txt", base64.b64encode(b"alpha\\nbeta\\n").decode(), "text/plain")
    >>> print(grep_attachment(store, "bet"))
    notes.txt:2: beta
    [1 match]
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import regex

from visus import limits, media
from visus.errors import (
    NotFoundError,
    TooLargeError,
    UndecodableError,
    VisusError,
)
from visus.media.text import decode_text, split_lines  # read's rules for text and lines
from visus.record.messages import PerceptionOrigin

if TYPE_CHECKING:
    from visus.models.spec import ModelSpec
    from visus.perception.tools import RegionArg
    from visus.perception.values import Perception, Refusal

from visus.attachments.store import AttachmentInfo, SessionAttachments

__all__ = [
    "attachment_origin",
    "grep_attachment",
    "list_attachments",
    "read_attachment",
    "view_attachment",
]


def list_attachments(store: SessionAttachments) -> str:
    """One line per attachment: ``name (bytes bytes, mime)``."""
    files = store.list()
    if not files:
        return "No attachments in this session."
    return "\n".join(f"{f.name} ({f.size} bytes, {f.mime_type})" for f in files)


def _missing(store: SessionAttachments, filename: str) -> str:
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
    store: SessionAttachments, filename: str, offset: int = 0, limit: int | None = None
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
    store: SessionAttachments,
    pattern: str,
    filename: str | None = None,
    *,
    time_budget: float = limits.GREP_TIME_BUDGET_SECONDS,
) -> str:
    """Lines matching the regular expression ``pattern``: ``name:line: text``.

    Searches ``filename`` or every text attachment; at most
    :data:`~visus.limits.GREP_MAX_HITS` hits; answers within ``time_budget`` seconds.
    """
    compiled = _compiled(pattern)
    if isinstance(compiled, str):
        return compiled
    targets = _targets(store, filename)
    if isinstance(targets, str):
        return targets
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
    if worker.is_alive():
        search.cancelled = True
    return _answer(search, pattern, skipped, time_budget)


def _compiled(pattern: str) -> Any:
    """The compiled pattern, or why it is refused (a string)."""
    if len(pattern) > limits.GREP_MAX_PATTERN_CHARS:
        return (
            f"The pattern is {len(pattern)} characters, over the limit of "
            f"{limits.GREP_MAX_PATTERN_CHARS} (GREP_MAX_PATTERN_CHARS)."
        )
    try:
        return regex.compile(pattern, regex.VERSION0)
    except regex.error as e:
        return f"Invalid regular expression {pattern!r}: {e}"


def _targets(store: SessionAttachments, filename: str | None) -> list[AttachmentInfo] | str:
    """The attachments to search (``filename``, else all), or why there are none."""
    if filename is not None:
        try:
            return [store.info(filename)]
        except NotFoundError:
            return _missing(store, filename)
    return store.list() or "No attachments in this session."


def _answer(search: _Search, pattern: str, skipped: list[str], time_budget: float) -> str:
    """The hits, then one bracketed line: how many, and why the search stopped if it did."""
    notes: list[str] = []
    if search.cancelled or search.timed_out:
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
    store: SessionAttachments,
    filename: str,
    *,
    model: str | ModelSpec,
    render: bool = True,
    page: int | None = None,
    region: RegionArg | None = None,
    offset: int | None = None,
    limit: int | None = None,
) -> Perception | Refusal:
    """The attachment as an image fitted for ``model``, or a refusal the model reads.

    Viewed exactly as ``view`` views a file: images are decoded, and (when ``render``,
    the host's render capability) text, SVG and PDF attachments are rendered; ``page``
    picks a PDF page (1-based), ``region=[x0, y0, x1, y1]`` zooms into the source's own
    coordinates, ``offset``/``limit`` page through a text file's lines. The
    perception's ``source`` is the attachment name; record it with
    :func:`attachment_origin` so it can be re-viewed after retention elides it.

    Example:
        >>> import base64, tempfile, pathlib
        >>> from visus.attachments import AttachmentStore
        >>> store = AttachmentStore(pathlib.Path(tempfile.mkdtemp()))
        >>> text = "\\n".join(f"line {n}" for n in range(1, 501)).encode()
        >>> _ = store.put("log.txt", base64.b64encode(text).decode(), "text/plain")
        >>> seen = view_attachment(store, "log.txt", model="gpt-4.1", offset=200, limit=10)
        >>> seen.line_start, seen.line_end, seen.line_total
        (201, 210, 500)
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
    # The bytes are in hand, so the reach only carries the render capability: no
    # folder is needed, and a database store has none to give.
    return view(
        data,
        reach=Reach([], render=render),
        model=spec,
        name=filename,
        page=page,
        region=region,
        offset=offset,
        limit=limit,
    )
