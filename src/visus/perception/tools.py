"""The view and read tools: a ref becomes pixels, text, or a typed refusal.

``view`` always returns pixels (text, svg and pdf are rendered when the reach
allows rendering) and ``read`` always returns text: never one tool with a mode.
Neither raises: every failure becomes a :class:`Refusal` whose message tells the
model what happened and what to call instead.

Example:
    >>> import io, tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (root / "notes.txt").write_text("one\\ntwo\\n")
    >>> r = read("notes.txt", reach=Reach([root]))
    >>> r.text.splitlines()
    ['     1\\tone', '     2\\ttwo']
    >>> view("missing.png", reach=Reach([root])).reason
    'not_found'
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from visus import media
from visus.errors import (
    BlockedURLError,
    HTTPStatusError,
    InvalidInputError,
    NotFoundError,
    ReachError,
    TooLargeError,
    UndecodableError,
    UnreachableError,
    UnsupportedTypeError,
    VisusError,
)
from visus.limits import (
    MAX_SOURCE_BYTES,
    READ_DEFAULT_LINES,
    READ_MAX_LINE_CHARS,
)
from visus.media import Fitted, Region
from visus.media.text import decode_text, split_lines  # media's rules for "text" and lines
from visus.models import ModelSpec, get_model, image_tokens, pick_detail
from visus.perception.reach import Reach
from visus.perception.values import (
    Perception,
    ReadResult,
    Refusal,
    RefusalReason,
    content_digest,
)

__all__ = [
    "DEFAULT_MODEL",
    "RegionArg",
    "as_region",
    "fetch_refusal",
    "read",
    "refusal_from",
    "view",
]

#: The model ``view`` fits for when the caller names none.
DEFAULT_MODEL = "claude-sonnet-4-6"

Ref = str | os.PathLike[str] | bytes | bytearray | memoryview
#: A region as callers give it: ``[x0, y0, x1, y1]`` or a :class:`~visus.media.Region`.
RegionArg = Sequence[int] | Region


class _Refused(Exception):
    """Internal: a refusal decided before any VisusError (carries its own message)."""

    def __init__(self, reason: RefusalReason, message: str) -> None:
        super().__init__(message)
        self.reason: RefusalReason = reason
        self.message = message


def view(
    ref: Ref,
    *,
    reach: Reach,
    model: str | ModelSpec = DEFAULT_MODEL,
    page: int | None = None,
    offset: int | None = None,
    limit: int | None = None,
    name: str | None = None,
    region: RegionArg | None = None,
) -> Perception | Refusal:
    """See a file (or in-memory bytes) as an image fitted for ``model``.

    ``ref`` is a path under ``reach`` or the bytes of an image/document (no reach
    check; ``name`` then labels it and hints the text lexer). ``page`` picks a PDF
    page (1-based); ``offset`` (0-based first line) and ``limit`` pick the lines of
    a text file to render. ``region`` (``[x0, y0, x1, y1]`` in the source's own
    coordinates, the size the perception reports: pixels, a PDF page's points) zooms
    in: only that part is shown, at up to the model's native resolution (cropped
    before shrinking; PDF and SVG drawn at the scale it needs). Returns a
    :class:`Perception`, or a :class:`Refusal` for any input that cannot become an
    image (a region outside the source, empty or inverted: ``invalid_input`` naming
    its size): no exception escapes.

    Example:
        >>> import tempfile, pathlib
        >>> r = view("nope.png", reach=Reach([tempfile.mkdtemp()]))
        >>> (r.kind, r.reason)
        ('refusal', 'not_found')
    """
    source = _label(ref, name)
    try:
        return _view(ref, source, reach, model, _Args(page, offset, limit, name, region))
    except _Refused as e:
        return Refusal(e.reason, e.message, source)
    except VisusError as e:
        return _refusal(e, source, tool="view")
    except Exception as e:  # last line of defence: a tool result, never a crash
        return Refusal("undecodable", f"{source} could not be viewed: {_why(e)}", source)


def read(
    ref: str | os.PathLike[str],
    *,
    reach: Reach,
    offset: int = 0,
    limit: int | None = None,
) -> ReadResult | Refusal:
    """A text file's lines numbered like ``cat -n``, or a refusal naming ``view``.

    ``offset`` is the 0-based first line, ``limit`` the most lines returned
    (default ``limits.READ_DEFAULT_LINES``); lines longer than
    ``limits.READ_MAX_LINE_CHARS`` are clipped. A file is text when it is UTF-8
    without NUL bytes; anything else is refused, and the refusal says whether
    ``view`` can show it (decided by trying the media decoders).

    Example:
        >>> import tempfile, pathlib
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (root / "a.py").write_text("x = 1\\n" * 5)
        >>> r = read("a.py", reach=Reach([root]), offset=3)
        >>> (r.line_start, r.line_end, r.line_total)
        (4, 5, 5)
    """
    source = _label(ref, None)
    try:
        return _read(ref, source, reach, offset, limit)
    except _Refused as e:
        return Refusal(e.reason, e.message, source)
    except VisusError as e:
        return _refusal(e, source, tool="read")
    except Exception as e:
        return Refusal("undecodable", f"{source} could not be read: {_why(e)}", source)


# --- view -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Args:
    """What ``view`` was asked for, besides the source."""

    page: int | None
    offset: int | None
    limit: int | None
    name: str | None
    region: object


def as_region(value: object) -> Region | None:
    """``value`` (``[x0, y0, x1, y1]`` of whole numbers, or a :class:`Region`) as a
    Region; its shape only is checked here, its place in the source by ``media``.

    Example:
        >>> as_region([10, 20, 110, 70])
        Region(x0=10, y0=20, x1=110, y1=70)
        >>> try:
        ...     as_region([1, 2, 3])
        ... except InvalidInputError as e:
        ...     print(e)
        region must be [x0, y0, x1, y1], four whole numbers in the source's pixels, got [1, 2, 3]
    """
    if value is None or isinstance(value, Region):
        return value
    if (
        isinstance(value, list | tuple)
        and len(value) == 4
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        x0, y0, x1, y1 = value
        return Region(x0, y0, x1, y1)
    shown = repr(value)  # a hostile caller's list can be long: the message stays short
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    raise InvalidInputError(
        f"region must be [x0, y0, x1, y1], four whole numbers in the source's pixels, got {shown}"
    )


def _view(ref: Ref, source: str, reach: Reach, model: str | ModelSpec, args: _Args) -> Perception:
    spec = _model(model)
    if not spec.vision:
        raise _Refused(
            "unsupported_type",
            f"model {spec.name} cannot see images, so view cannot show {source}. "
            "Use read for text files, or switch to a vision model.",
        )
    _check_reach(reach)
    _check_int("page", args.page, minimum=1)
    _check_int("offset", args.offset, minimum=0)
    _check_int("limit", args.limit, minimum=1)
    region = as_region(args.region)
    if args.name is not None and not isinstance(args.name, str):
        raise InvalidInputError("name must be a string")
    path: Path | None = None
    if isinstance(ref, (bytes, bytearray, memoryview)):
        data = bytes(ref)
        if len(data) > MAX_SOURCE_BYTES:
            raise TooLargeError(f"{len(data)} bytes; the limit is {MAX_SOURCE_BYTES} bytes")
        hint = args.name
    else:
        path = _resolve(ref, reach)
        data = reach.read_bytes(path)
        hint = path.name
    fitted = _load(data, spec, reach, args, region, hint, text_file=source if path else None)
    if region is None:
        fitted = _as_sent(data, fitted, spec)
    tokens = _cost(spec, fitted.width, fitted.height)
    return Perception.from_fitted(fitted, source=source, model=spec.name, tokens=tokens, path=path)


def _load(
    data: bytes,
    spec: ModelSpec,
    reach: Reach,
    args: _Args,
    region: Region | None,
    hint: str | None,
    *,
    text_file: str | None,
) -> Fitted:
    """``media.load`` for ``spec``; a file (``text_file`` names it) that is text too large
    or unfit to render gets a refusal that points at ``read``."""
    try:
        return media.load(
            data,
            profile=spec.profile(),
            render=reach.render,
            page=args.page,
            offset=args.offset,
            limit=args.limit,
            name=hint,
            region=region,
        )
    except TooLargeError as e:
        if text_file is not None and decode_text(data) is not None:
            raise _Refused(
                "too_large",
                f"{text_file} is text too large to render: {_detail(e)}. Call "
                f"read({text_file!r}, offset=..., limit=...) to page through its text.",
            ) from e
        raise
    except UnsupportedTypeError as e:
        if text_file is not None and decode_text(data) is not None:
            raise _Refused(
                "unsupported_type",
                f"{text_file} cannot be shown as an image: {_detail(e)}. It is text: call "
                f"read({text_file!r}) to get it.",
            ) from e
        raise


def _cost(spec: ModelSpec, width: int, height: int) -> int:
    """What the image costs ``spec`` at the detail it is sent with."""
    return image_tokens(spec, width, height, detail=pick_detail(spec, width, height))


def _as_sent(data: bytes, fitted: Fitted, spec: ModelSpec) -> Fitted:
    """The source bytes instead of a shrunk raster when the provider takes them as they
    are (``spec.accepted()``) and they cost no more tokens: fitting would change nothing
    the provider accepts or bills, only re-encode the image (often into more bytes)."""
    shrunk = (fitted.width, fitted.height) != (fitted.source_width, fitted.source_height)
    if fitted.source_kind != "raster" or not shrunk or spec.accepted() == spec.profile():
        return fitted
    original = media.unchanged(data, spec.accepted())
    if original is None:
        return fitted
    if _cost(spec, original.width, original.height) > _cost(spec, fitted.width, fitted.height):
        return fitted
    return original


def _model(model: object) -> ModelSpec:
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, str):
        return get_model(model)
    raise InvalidInputError(f"model must be a name or a ModelSpec, not {type(model).__name__}")


# --- read -------------------------------------------------------------------------


def _read(
    ref: object, source: str, reach: Reach, offset: object, limit: object
) -> ReadResult | Refusal:
    _check_reach(reach)
    _check_int("offset", offset, minimum=0)
    _check_int("limit", limit, minimum=1)
    if isinstance(ref, (bytes, bytearray, memoryview)):
        raise InvalidInputError("read takes a path to a file, not bytes")
    path = _resolve(ref, reach)
    data = reach.read_bytes(path)
    text = decode_text(data)
    if text is None:
        return Refusal("unsupported_type", _not_text(data, source), source)
    start = offset if isinstance(offset, int) else 0
    count = limit if isinstance(limit, int) else READ_DEFAULT_LINES
    lines = split_lines(text)  # one rule for line numbers: read, view and attachments
    total = len(lines)
    if start > 0 and start >= total:
        raise InvalidInputError(
            f"offset {start} is past the end of {source}, which has {total} lines"
        )
    window = lines[start : start + count]
    clipped = 0
    out: list[str] = []
    for number, line in enumerate(window, start=start + 1):
        line = line.removesuffix("\r")
        if len(line) > READ_MAX_LINE_CHARS:
            clipped += 1
            line = f"{line[:READ_MAX_LINE_CHARS]}… [clipped {len(line)} chars]"
        out.append(f"{number:>6}\t{line}")
    return ReadResult(
        text="\n".join(out),
        line_start=start + 1 if window else 0,
        line_end=start + len(window),
        line_total=total,
        path=path,
        content_digest=content_digest(data),
        source=source,
        clipped_lines=clipped,
    )


def _not_text(data: bytes, source: str) -> str:
    """Why read refuses non-text, decided by the media decoders' header probe."""
    try:
        found = media.probe(data)
    except TooLargeError as e:
        return (
            f"{source} is not text, and it is an image or document too large for view as "
            f"well ({_detail(e)}). read returns text only."
        )
    except UndecodableError:
        return (
            f"{source} is not text: it looks like a damaged image or document that view "
            "cannot decode either. read returns text only."
        )
    except VisusError:
        return (
            f"{source} is a binary file (not UTF-8 text), and not an image or PDF that "
            "view could show. read returns text only."
        )
    if found.kind == "pdf":
        pages = f"{found.page_count} pages" if found.page_count else "pages"
        return (
            f"{source} is a PDF document ({pages}); read returns text only. "
            f"Call view({source!r}, page=N) to see a page."
        )
    size = f" ({found.width}x{found.height})" if found.width and found.height else ""
    return f"{source} is an image{size}; read returns text only. Call view({source!r}) to see it."


# --- shared -----------------------------------------------------------------------


def _label(ref: object, name: str | None) -> str:
    """How a refusal or perception names the source: the ref as given."""
    if isinstance(ref, (bytes, bytearray, memoryview)):
        return name if isinstance(name, str) and name else "the given image bytes"
    if isinstance(ref, str):
        return ref
    if isinstance(ref, os.PathLike):
        try:
            raw = os.fspath(ref)
        except Exception:
            raw = None
        if isinstance(raw, str):
            return raw
    return f"<{type(ref).__name__}>"


def _resolve(ref: object, reach: Reach) -> Path:
    if isinstance(ref, str):
        if "://" in ref:
            raise InvalidInputError(
                f"{ref!r} is a URL; view and read take a path to a file under the allowed roots"
            )
        return reach.resolve(ref)
    if isinstance(ref, os.PathLike):
        return reach.resolve(ref)
    raise InvalidInputError(f"expected a path, got {type(ref).__name__}")


def _check_reach(reach: object) -> None:
    if not isinstance(reach, Reach):
        raise InvalidInputError(f"reach must be a Reach, not {type(reach).__name__}")


def _check_int(field: str, value: object, *, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{field} must be a whole number, got {value!r}")
    if value < minimum:
        raise InvalidInputError(f"{field} must be at least {minimum}, got {value}")


def _why(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


#: How the media layer's decode errors begin (``source could not be decoded: ...``).
_DECODE_PREFIX = re.compile(r"^[^:]{0,200}? could not be decoded: ")


def _detail(e: BaseException) -> str:
    """An error's text without a trailing full stop, to sit inside a sentence."""
    return str(e).strip().rstrip(".") or type(e).__name__


def fetch_refusal(url: str, e: VisusError) -> Refusal:
    """The refusal for a URL that could not be fetched (any :class:`~visus.errors.NetError`),
    telling a server that answered an error apart from one that was never reached.

    Example:
        >>> gone = HTTPStatusError("HTTP 404", status=404)
        >>> fetch_refusal("https://x.example/a.png", gone).message.split(":")[1]
        '//x.example/a.png answered HTTP 404'
    """
    detail = _detail(e)
    if isinstance(e, BlockedURLError):
        return Refusal("outside_reach", f"{url} is not fetched: {detail}.", source=url)
    if isinstance(e, HTTPStatusError):
        what = "has no such file" if e.status in (404, 410) else "refused or failed the request"
        return Refusal(
            "not_found",
            f"{url} answered HTTP {e.status}: the server is up but {what}. Check the URL.",
            source=url,
        )
    if isinstance(e, UnreachableError):
        return Refusal(
            "not_found",
            f"{url} could not be reached ({detail}): no server answered. Check the host "
            "name and the network; the file itself was never asked for.",
            source=url,
        )
    return Refusal("not_found", f"{url} could not be fetched: {detail}.", source=url)


def refusal_from(e: VisusError, source: str, *, tool: str) -> Refusal:
    """One of our errors as the refusal ``view`` would give for it, worded for ``tool``
    (``view``, ``read``, ``send``...): a reason and a message saying what to do next.

    Example:
        >>> from visus.errors import NotFoundError
        >>> refusal_from(NotFoundError("gone"), "a.png", tool="send").reason
        'not_found'
    """
    return _refusal(e, source, tool=tool)


def _refusal(e: VisusError, source: str, *, tool: str) -> Refusal:
    """Map one of our errors to a refusal whose message says what to do next."""
    detail = _detail(e)
    reason: RefusalReason
    if isinstance(e, ReachError):
        reason = "outside_reach"
        why = "" if "outside the allowed roots" in detail else f" ({detail})"
        message = (
            f"{source} is outside the allowed roots{why}, so this tool cannot open it "
            "(symlinks are resolved first). Use a path under the allowed roots."
        )
    elif isinstance(e, NotFoundError):
        reason = "not_found"
        message = (
            f"{source} does not exist. Check the path (relative paths start at the "
            "first allowed root)."
        )
    elif isinstance(e, TooLargeError):
        reason = "too_large"
        message = f"{source} is too large to {tool}: {detail}."
        if tool == "view":
            message += " Try a smaller file, another page, or fewer lines."
    elif isinstance(e, UndecodableError):
        reason = "undecodable"
        # The decoder's error already says "<what> could not be decoded: <why>": keep the why.
        why = _DECODE_PREFIX.sub("", detail, count=1)
        message = f"{source} could not be decoded: {why}. The file may be corrupt or truncated."
    elif isinstance(e, UnsupportedTypeError):
        reason = "unsupported_type"
        doing = "sent" if tool == "send" else "shown as an image"
        message = f"{source} cannot be {doing}: {detail}."
    else:  # InvalidInputError and anything else we raise on purpose
        reason = "invalid_input"
        message = f"Cannot {tool} {source}: {detail}."
    return Refusal(reason, message, source)
