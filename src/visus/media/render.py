"""Render a document source (pdf, svg, text) and fit it: what the render worker runs.

:func:`render_source` is the part of :func:`visus.media.load` that is not a raster:
it tries PDFium, then our SVG parser, then UTF-8, in that order. With ``render=True``
it runs inside the render worker (:mod:`visus.media._worker`), under the time budget
and memory cap; with ``render=False`` only the type is decided (nothing is rendered),
in the caller's process.
"""

from __future__ import annotations

from visus import limits
from visus.errors import InvalidInputError, TooLargeError, UnsupportedTypeError
from visus.media import pdf, svg, text
from visus.media.fitting import encode
from visus.media.types import Fitted, Probe, Profile, Region, SourceKind

__all__ = ["only", "probe_document", "render_source", "withheld"]


def withheld(kind: SourceKind) -> UnsupportedTypeError:
    return UnsupportedTypeError(
        f"this source is {kind}; rendering {kind} to pixels is withheld by the host "
        "(only raster images can be viewed)"
    )


def only(kind: SourceKind, page: int | None, offset: int | None, limit: int | None) -> None:
    """Refuse arguments that do not apply to ``kind`` rather than ignore them silently."""
    if kind != "pdf" and page not in (None, 1):
        raise InvalidInputError(f"page applies to PDFs; this source is {kind}")
    if kind != "text" and (offset is not None or limit is not None):
        raise InvalidInputError(f"offset and limit apply to text; this source is {kind}")


def render_source(
    data: bytes,
    *,
    profile: Profile,
    render: bool,
    page: int | None,
    offset: int | None,
    limit: int | None,
    name: str | None,
    region: Region | None = None,
) -> Fitted | None:
    """``data`` rendered and fitted into ``profile``; ``None`` if it is no pdf, svg or text.

    ``region`` shows part of the source, in its reported size's units: a PDF page's
    points or an SVG's pixels, rendered at the scale that fills ``profile``; a text
    page's rendered pixels, cropped before the page is shrunk.
    With ``render=False`` a recognised source raises :class:`UnsupportedTypeError`
    (rendering withheld). Errors as :func:`visus.media.load`.

    Example:
        >>> p = Profile(max_edge=200, max_pixels=40_000, max_bytes=1_000_000)
        >>> f = render_source(b"x = 1\\n", profile=p, render=True, page=None,
        ...                   offset=None, limit=None, name="x.py")
        >>> (f.source_kind, f.line_total)
        ('text', 1)
    """
    doc = pdf.render_pdf(
        data,
        page=page,
        max_edge=profile.max_edge,
        max_pixels=profile.max_pixels,
        render=render,
        region=region,
    )
    if doc is not None:
        only("pdf", page, offset, limit)
        return _pdf_fitted(doc, profile, region)
    parsed = svg.parse_svg(data)
    if parsed is not None:
        only("svg", page, offset, limit)
        if not render:
            raise withheld("svg")
        return _svg_fitted(parsed, profile, region)
    source = text.decode_text(data)
    if source is None:
        return None
    only("text", page, offset, limit)
    if not render:
        raise withheld("text")
    return _text_fitted(data, source, profile, region, offset=offset, limit=limit, name=name)


def probe_document(data: bytes) -> Probe | None:
    """What ``data`` is when it is no raster: a PDF (page count, first page's size), an
    SVG (its size) or text (its lines); ``None`` when it is none of them. Nothing is
    rendered, yet opening a PDF parses its cross-reference and object streams, which
    can inflate to gigabytes: it runs in the render worker, like a render.

    Example:
        >>> probe_document(b"one\\ntwo\\n").line_total
        2
    """
    doc = pdf.open_pdf(data)
    if doc is not None:
        return Probe(
            kind="pdf",
            media_type="application/pdf",
            width=max(1, round(doc.width_pt)),
            height=max(1, round(doc.height_pt)),
            page_count=doc.page_count,
        )
    parsed = svg.parse_svg(data)
    if parsed is not None:
        return Probe(
            kind="svg",
            media_type="image/svg+xml",
            width=max(1, round(parsed.width)),
            height=max(1, round(parsed.height)),
        )
    source = text.decode_text(data)
    if source is not None:
        return Probe(kind="text", media_type="text/plain", line_total=text.count_lines(source))
    return None


def _pdf_fitted(doc: pdf.PdfPage, profile: Profile, region: Region | None) -> Fitted:
    """A PDF page PDFium rendered (already at the fitted size), encoded."""
    if doc.image is None:
        raise withheld("pdf")
    enc = encode(doc.image, profile)
    return Fitted(
        data=enc.data,
        media_type=enc.media_type,
        width=enc.width,
        height=enc.height,
        source_width=max(1, round(doc.width_pt)),
        source_height=max(1, round(doc.height_pt)),
        source_kind="pdf",
        page=doc.page,
        page_count=doc.page_count,
        region=region,
    )


def _svg_fitted(parsed: svg.ParsedSvg, profile: Profile, region: Region | None) -> Fitted:
    """An SVG drawn and encoded."""
    # Drawn straight at the fitted size into memory, then encoded once (line art
    # as a lossless PNG of exactly those pixels); a region at the scale that fills it.
    shown = parsed if region is None else svg.zoom_svg(parsed, region)
    image = svg.render_svg(shown, profile.max_edge, profile.max_pixels, enlarge=region is not None)
    enc = encode(image, profile)
    return Fitted(
        data=enc.data,
        media_type=enc.media_type,
        width=enc.width,
        height=enc.height,
        source_width=max(1, round(parsed.width)),
        source_height=max(1, round(parsed.height)),
        source_kind="svg",
        region=region,
    )


def _text_fitted(
    data: bytes,
    source: str,
    profile: Profile,
    region: Region | None,
    *,
    offset: int | None,
    limit: int | None,
    name: str | None,
) -> Fitted:
    """Text drawn as a page (lines ``offset`` on, at most ``limit``), cropped to
    ``region`` in the page's own pixels, encoded."""
    if len(data) > limits.MAX_TEXT_BYTES:
        raise TooLargeError(
            f"text of {len(data)} bytes is over {limits.MAX_TEXT_BYTES} for rendering"
        )
    shot = text.render_text(
        source,
        offset=offset,
        limit=limit,
        name=name,
        max_edge=profile.max_edge,
        max_pixels=profile.max_pixels,
    )
    drawn = shot.image
    if region is not None:
        region.check(drawn.width, drawn.height, what="rendered text page")
        drawn = drawn.crop((region.x0, region.y0, region.x1, region.y1))
    enc = encode(drawn, profile, content="graphic")
    return Fitted(
        data=enc.data,
        media_type=enc.media_type,
        width=enc.width,
        height=enc.height,
        source_width=shot.image.width,
        source_height=shot.image.height,
        source_kind="text",
        line_start=shot.line_start,
        line_end=shot.line_end,
        line_total=shot.line_total,
        region=region,
    )
