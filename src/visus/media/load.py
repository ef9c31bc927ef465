"""The entry points: ``load`` any source, ``fit`` an encoded raster, ``probe`` a header.

The source type is decided by trying our decoders in order: Pillow identifies a
raster, PDFium opens a PDF, our XML parser finds an ``<svg>`` root that librsvg then
renders, and UTF-8 without NUL bytes is text. We keep no magic-byte or extension
table; ``name`` only steers the Pygments lexer for text.
"""

from __future__ import annotations

from collections.abc import Callable

from PIL import Image

from visus import limits
from visus.budget import MEMORY
from visus.errors import (
    InvalidInputError,
    TooLargeError,
    UndecodableError,
    UnsupportedTypeError,
)
from visus.media import raster, svg
from visus.media._cost import decode_cost
from visus.media._guard import translated
from visus.media._png import without_unusable_chunks
from visus.media._worker import decode_in_worker, probe_in_worker, render_in_worker
from visus.media.fitting import check_profile, target_size
from visus.media.render import only
from visus.media.types import Fitted, Probe, Profile, Region

__all__ = ["fit", "load", "probe", "unchanged"]

_UNKNOWN = "not an image, PDF, SVG or UTF-8 text that visus can decode"


def _check_source(data: bytes) -> None:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"data must be bytes, not {type(data).__name__}")
    if len(data) == 0:
        raise UndecodableError("empty input: zero bytes")
    if len(data) > limits.MAX_SOURCE_BYTES:
        raise TooLargeError(f"source of {len(data)} bytes is over {limits.MAX_SOURCE_BYTES}")


def _check_args(page: int | None, offset: int | None, limit: int | None) -> None:
    if page is not None and page < 1:
        raise InvalidInputError(f"page is 1-based: {page}")
    if offset is not None and offset < 0:
        raise InvalidInputError(f"offset is a 0-based line number: {offset}")
    if limit is not None and limit < 1:
        raise InvalidInputError(f"limit must be at least 1: {limit}")


def load(
    data: bytes,
    *,
    profile: Profile,
    render: bool = True,
    page: int | None = None,
    offset: int | None = None,
    limit: int | None = None,
    name: str | None = None,
    region: Region | None = None,
) -> Fitted:
    """Decode or render any source and fit it into ``profile``.

    ``render=False`` (the host withheld rendering) refuses svg, text and pdf with
    :class:`UnsupportedTypeError`. ``page`` (1-based) is for PDFs, ``offset`` (0-based
    first line) and ``limit`` for text; ``name`` is a filename hint for the lexer.
    ``region`` shows only that part of the source, at up to ``profile``'s size (see
    :class:`Region`; a region outside the source, empty or inverted is
    :class:`InvalidInputError` naming the source's size).

    Raises :class:`TooLargeError`, :class:`UndecodableError`,
    :class:`UnsupportedTypeError` or :class:`InvalidInputError`, nothing else.

    Example:
        >>> p = Profile(max_edge=1568, max_pixels=1_150_000, max_bytes=5 * 1024 * 1024)
        >>> f = load(b"print('hi')\\n", profile=p, name="hi.py")
        >>> (f.source_kind, f.media_type, f.line_start, f.line_end, f.line_total)
        ('text', 'image/png', 1, 1, 1)
    """
    check_profile(profile)
    _check_args(page, offset, limit)
    _check_source(data)
    data = without_unusable_chunks(bytes(data))
    with translated("source"):
        im = raster.identify(data)
        if im is not None:
            only("raster", page, offset, limit)
            with im:
                return _decode(im, data, profile, region)
    return _document(
        data, profile, render, page=page, offset=offset, limit=limit, name=name, region=region
    )


def _document(
    data: bytes,
    profile: Profile,
    render: bool,
    *,
    page: int | None,
    offset: int | None,
    limit: int | None,
    name: str | None,
    region: Region | None,
) -> Fitted:
    """A source that is no raster: a PDF, SVG or text rendered in the render worker,
    or, with rendering withheld, its type decided there and refused."""
    # Rendering can take any time and memory, and so can deciding the type alone
    # (opening a PDF inflates its object streams): a worker process bounds both. A
    # document with filters or masks starts in the heavy lane: a queue of those never
    # holds up a text page or a plain drawing.
    fitted = render_in_worker(
        data,
        profile=profile,
        page=page,
        offset=offset,
        limit=limit,
        name=name,
        region=region,
        lane="heavy" if render and svg.looks_heavy(data) else "light",
        render=render,
    )
    if fitted is not None:
        return fitted
    raise UnsupportedTypeError(_UNKNOWN)


def fit(data: bytes, profile: Profile) -> Fitted:
    """Re-fit an already-encoded raster (png, jpeg, webp, gif, ...) into ``profile``.

    Bytes that already meet the profile (8-bit RGB/RGBA png, jpeg or webp, still,
    upright, inside every bound) come back unchanged. Same errors as :func:`load`;
    anything that is not a raster is :class:`UnsupportedTypeError`.

    Example:
        >>> small = Profile(max_edge=64, max_pixels=64 * 64, max_bytes=100_000)
        >>> f = fit(load(b"hello", profile=Profile(1568, 1_150_000, 5_000_000)).data, small)
        >>> max(f.width, f.height) <= 64
        True
    """
    fitted = _raster(data, profile, _decode)
    if fitted is None:
        raise UnsupportedTypeError("not a raster image Pillow can decode")
    return fitted


def unchanged(data: bytes, profile: Profile) -> Fitted | None:
    """``data`` itself as a :class:`Fitted` when it is a raster that already meets
    ``profile`` (8-bit RGB/RGBA png, jpeg or webp, still, upright, inside every bound),
    else ``None``. Reads the header only; errors as :func:`load`.

    Example:
        >>> p = Profile(max_edge=1568, max_pixels=1_150_000, max_bytes=5_000_000)
        >>> png = load(b"hello", profile=p).data
        >>> unchanged(png, p).data == png, unchanged(b"hello", p)
        (True, None)
    """
    return _raster(data, profile, raster.as_is)


def _decode(im: Image.Image, data: bytes, profile: Profile, region: Region | None = None) -> Fitted:
    """An identified raster decoded and fitted where its cost allows (:mod:`._cost`):
    here, under a reservation of the process's memory budget, or in the worker. A
    ``region`` is cut from the whole frame as Pillow decodes it (never by libvips)."""
    header = raster.read_header(im)
    size = target_size(header.width, header.height, profile.max_edge, profile.max_pixels)
    by_vips = region is None and raster.by_vips(header, size)
    cost = decode_cost(header, data, size, by_vips=by_vips)
    if not cost.in_process:
        im.close()
        return decode_in_worker(data, profile, region)
    w, h = im.size
    with MEMORY.reserve(cost.buffer_bytes, what=f"decoding a {w} x {h} {header.format}"):
        return raster.load_raster(header, data, profile, region)


def _raster(
    data: bytes, profile: Profile, step: Callable[[Image.Image, bytes, Profile], Fitted | None]
) -> Fitted | None:
    """``step`` on the raster ``data`` is (``None`` if it is none) with its header read."""
    check_profile(profile)
    _check_source(data)
    data = without_unusable_chunks(bytes(data))
    with translated("image"):
        im = raster.identify(data)
        if im is None:
            return None
        with im:
            return step(im, data, profile)


def probe(data: bytes) -> Probe:
    """What ``data`` is, from headers only: nothing is decoded or rendered. A raster's
    header is read here; any other source is opened in the render worker, under its
    time budget and memory cap (errors as :func:`load`, :class:`BusyError` included).

    Bombs are refused here already (:class:`TooLargeError`), as are oversized SVG and
    PDFs with too many pages; text reports its line count.

    Example:
        >>> probe(b"line one\\nline two\\n")
        Probe(kind='text', media_type='text/plain', width=None, height=None, \
page_count=None, frame_count=None, line_total=2)
    """
    _check_source(data)
    data = without_unusable_chunks(bytes(data))
    with translated("source"):
        im = raster.identify(data)
        if im is not None:
            with im:
                h = raster.read_header(im)
            return Probe(
                kind="raster",
                media_type=h.media_type,
                width=h.width,
                height=h.height,
                frame_count=h.frame_count,
            )
    # Not a raster: a PDF, SVG or text, told apart in the render worker (a PDF's
    # object streams may inflate to gigabytes before its page count is known).
    found = probe_in_worker(data)
    if found is not None:
        return found
    raise UnsupportedTypeError(_UNKNOWN)
