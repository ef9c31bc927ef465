"""From a :class:`FileSource` to bytes, and from bytes to fitted pictures for one model.

Every library error is translated here, once, into an :class:`AnalyzeError` code:
a missing file or one outside the reach is ``FILE_NOT_FOUND``, the SSRF gate's
refusal ``URL_BLOCKED``, anything past a byte or pixel bound ``FILE_TOO_LARGE``,
and bytes none of our decoders open ``UNSUPPORTED_FILE_TYPE``.

Example:
    >>> decode_base64("data:image/png;base64,aGk=")
    b'hi'
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass

from visus import limits, media
from visus.analyze._values import FileSource, fail
from visus.errors import (
    AnalyzeError,
    BlockedURLError,
    InvalidInputError,
    MediaError,
    NetError,
    NotFoundError,
    ReachError,
    TooLargeError,
    VisusError,
)
from visus.models import ModelSpec
from visus.net import afetch
from visus.perception import Reach, content_digest

__all__ = [
    "Document",
    "Loaded",
    "Picture",
    "decode_base64",
    "load_source",
    "native_document",
    "pictures",
    "translated",
]

_DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+)?(?:;[\w-]+=[^;,]*)*;base64,", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Loaded:
    """A source's bytes as read, with its label and digest (the cache key's part)."""

    data: bytes
    label: str

    @property
    def digest(self) -> str:
        return content_digest(self.data)


@dataclass(frozen=True, slots=True)
class Picture:
    """A fitted image for the model, and the line that introduces it."""

    data: bytes
    media_type: str
    width: int
    height: int
    caption: str
    page: int | None = None


@dataclass(frozen=True, slots=True)
class Document:
    """A PDF sent as it is (natively), and the line that introduces it."""

    data: bytes
    page_count: int
    filename: str
    caption: str
    media_type: str = "application/pdf"


@contextlib.contextmanager
def translated(label: str) -> Iterator[None]:
    """Turn visus errors raised inside into :class:`AnalyzeError` codes."""
    try:
        yield
    except AnalyzeError:
        raise
    except BlockedURLError as e:
        raise fail("URL_BLOCKED", f"{label}: {e}") from e
    except NetError as e:
        if "over the limit" in str(e):
            raise fail("FILE_TOO_LARGE", f"{label}: {e}") from e
        raise fail("FILE_NOT_FOUND", f"{label}: could not fetch: {e}") from e
    except (NotFoundError, ReachError) as e:
        raise fail("FILE_NOT_FOUND", f"{label}: {e}") from e
    except TooLargeError as e:
        raise fail("FILE_TOO_LARGE", f"{label}: {e}") from e
    except MediaError as e:  # undecodable or unsupported
        raise fail("UNSUPPORTED_FILE_TYPE", f"{label}: {e}") from e
    except InvalidInputError as e:
        raise fail("INVALID_INPUT", f"{label}: {e}") from e
    except VisusError as e:
        raise fail("INVALID_INPUT", f"{label}: {e}") from e


def decode_base64(text: str, *, max_bytes: int = limits.ANALYZE_MAX_INPUT_BYTES) -> bytes:
    """Strict base64 (a ``data:<mime>;base64,`` prefix and whitespace allowed).

    Raises ``INVALID_INPUT`` for text that is not base64 and ``FILE_TOO_LARGE``
    (before decoding) past ``max_bytes``.
    """
    body = _DATA_URL.sub("", text.strip(), count=1)
    body = "".join(body.split())
    if not body:
        raise fail("INVALID_INPUT", "file_base64 is empty")
    if len(body) // 4 * 3 > max_bytes + 2:
        raise fail(
            "FILE_TOO_LARGE",
            f"file_base64 holds about {len(body) // 4 * 3} bytes; the limit is {max_bytes}",
        )
    try:
        data = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError) as e:
        raise fail("INVALID_INPUT", f"file_base64 is not valid base64: {e}") from e
    if len(data) > max_bytes:
        raise fail("FILE_TOO_LARGE", f"file_base64 is {len(data)} bytes; the limit is {max_bytes}")
    if not data:
        raise fail("INVALID_INPUT", "file_base64 decodes to zero bytes")
    return data


async def load_source(
    source: FileSource,
    *,
    reach: Reach,
    max_bytes: int = limits.ANALYZE_MAX_INPUT_BYTES,
    allow_loopback_http: bool = False,
) -> Loaded:
    """The bytes of ``source``: a path under ``reach``, a URL through ``visus.net``, base64."""
    label = source.label
    with translated(label):
        if source.path is not None:
            path = reach.resolve(source.path)
            return Loaded(reach.read_bytes(path, max_bytes=max_bytes), label)
        if source.url is not None:
            url = source.url.strip()
            if not url.lower().startswith(("https://", "http://")):
                raise fail("URL_BLOCKED", f"{label}: only https URLs are fetched")
            try:
                reach.check_url(url)  # the operator's [server] fetch_urls
            except ReachError as e:
                raise fail("URL_BLOCKED", str(e)) from e
            fetched = await afetch(
                url, max_bytes=max_bytes, allow_loopback_http=allow_loopback_http
            )
            if not fetched.data:
                raise fail("UNSUPPORTED_FILE_TYPE", f"{label}: the URL returned no bytes")
            return Loaded(fetched.data, label)
        assert source.base64 is not None
        return Loaded(decode_base64(source.base64, max_bytes=max_bytes), label)


def _picture(fitted: media.Fitted, caption: str) -> Picture:
    return Picture(
        fitted.data, fitted.media_type, fitted.width, fitted.height, caption, fitted.page
    )


def pictures(
    loaded: Loaded,
    *,
    spec: ModelSpec,
    render: bool,
    pages: tuple[int, int] | None,
    index: int,
    count: int,
) -> list[Picture]:
    """The images one file becomes for ``spec``: one raster or SVG, or PDF pages.

    PDFs become rendered pages ``pages`` (1-based, inclusive; default all) and at
    most ``limits.ANALYZE_MAX_PDF_PAGES`` of them (``pages`` is ignored for images).
    Even PDF-capable models get pages: the record has no document part yet. Text
    files are refused: the model would only read a screenshot of what ``read`` gives.
    """
    head = f"File {index} of {count}: {loaded.label}" if count > 1 else f"File: {loaded.label}"
    with translated(loaded.label):
        kind = media.probe(loaded.data)
        if kind.kind == "text":
            raise fail(
                "UNSUPPORTED_FILE_TYPE",
                f"{loaded.label} is text, not an image or PDF; read it as text instead",
            )
        profile = spec.profile()
        if kind.kind != "pdf":
            if kind.kind == "svg" and not render:
                raise fail(
                    "UNSUPPORTED_FILE_TYPE",
                    f"{loaded.label} is SVG and rendering is withheld by the host",
                )
            fitted = media.load(loaded.data, profile=profile, render=render)
            return [_picture(fitted, f"{head} ({kind.media_type})")]
        total = kind.page_count or 1
        first, last = _page_range(pages, total, loaded.label)
        if not render:
            raise fail(
                "PDF_NOT_SUPPORTED",
                f"{loaded.label} is a PDF; {spec.name} gets PDFs as rendered pages here "
                "and rendering is withheld by the host",
            )
        out: list[Picture] = []
        for number in range(first, last + 1):
            fitted = media.load(loaded.data, profile=profile, page=number)
            out.append(_picture(fitted, f"{head}, page {number} of {total}"))
        return out


def native_document(
    loaded: Loaded,
    *,
    spec: ModelSpec,
    max_pages: int | None,
    max_bytes: int | None,
    index: int,
    count: int,
) -> Document | None:
    """``loaded`` as a native document for a PDF-capable model, or ``None`` if it is not a PDF.

    Past ``max_pages`` (the provider's cap per document) it is ``PDF_TOO_MANY_PAGES``;
    over ``max_bytes`` (what the wire takes of one document) it is ``None`` too, so the
    caller sends rendered pages instead of failing.
    """
    with translated(loaded.label):
        kind = media.probe(loaded.data)
    if kind.kind != "pdf":
        return None
    total = kind.page_count or 1
    if max_pages is not None and total > max_pages:
        raise fail(
            "PDF_TOO_MANY_PAGES",
            f"{loaded.label} has {total} pages; {spec.name} takes at most {max_pages} pages "
            "per PDF: pass pages=(first, last) to send rendered pages instead",
        )
    if max_bytes is not None and len(loaded.data) > max_bytes:
        return None
    head = f"File {index} of {count}: {loaded.label}" if count > 1 else f"File: {loaded.label}"
    name = loaded.label.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]
    return Document(
        data=loaded.data,
        page_count=total,
        filename=name or "document.pdf",
        caption=f"{head} (PDF, {total} pages)",
    )


def _page_range(pages: tuple[int, int] | None, total: int, label: str) -> tuple[int, int]:
    if pages is None:
        first, last = 1, total
    else:
        if (
            not isinstance(pages, tuple | list)
            or len(pages) != 2
            or not all(isinstance(p, int) and not isinstance(p, bool) for p in pages)
        ):
            raise fail("INVALID_INPUT", "pages is a pair of 1-based page numbers (first, last)")
        first, last = pages
        if first < 1 or last < first:
            raise fail("INVALID_INPUT", f"pages ({first}, {last}) is not a range of pages")
        if last > total:
            raise fail("INVALID_INPUT", f"{label} has {total} pages; pages asks up to {last}")
    if last - first + 1 > limits.ANALYZE_MAX_PDF_PAGES:
        raise fail(
            "PDF_TOO_MANY_PAGES",
            f"{label}: {last - first + 1} pages asked (of {total}); at most "
            f"{limits.ANALYZE_MAX_PDF_PAGES} per call: pass pages=(first, last)",
        )
    return first, last
