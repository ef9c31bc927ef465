"""SVG sources: parsed defensively, stripped of every outside reference, rendered by librsvg.

librsvg (through libvips's ``svgload``: about a fifth of resvg's time on a busy drawing, see
benchmarks/RESULTS.md) reads a document from memory with no base file, so it cannot
read a local file; resvg, which we used before, loaded ``<image href>`` from local
paths. Either way the renderer is not trusted with that: before it sees a document we:

- refuse a DOCTYPE with an internal subset (``<!ENTITY``: entity expansion, XXE);
  a plain ``<!DOCTYPE svg PUBLIC ...>`` line is dropped, it is never fetched;
- drop every ``href``/``xlink:href`` that is not a ``#fragment`` or a raster ``data:``
  URI (``data:image/svg+xml`` would hand the renderer a nested document we did not clean)
  whose header Pillow reads and whose size passes our decode bounds;
- drop ``url(...)`` and ``@import`` references to anything but ``#fragment`` in every
  attribute (librsvg reads presentation attributes as CSS too) and in the whole text of
  every ``<style>`` (its children are dropped: CSS after a child element, or in a second
  CDATA section, is still stylesheet text to librsvg). CSS escapes (``u\\72l(``) are
  removed first, so no spelling of ``url`` survives. librsvg would load a nested
  ``data:image/svg+xml`` document named there (a gradient, a filter) without our
  complexity caps or this cleaning, so no nested document ever reaches it.

Text uses the shipped DejaVu fonts (Noto for CJK and emoji), never the machine's fonts:
the worker's fontconfig reads a private configuration listing only those
(:func:`visus.media._vips.svg_engine`). The render is sized by us (never the
document's own canvas, which may claim 100000 px), drawn straight at the fitted size,
in the render worker (:mod:`visus.media._worker`), which bounds its time and memory;
:func:`check_complexity` refuses the documents past the ``SVG_MAX_*`` caps before any
of that starts.
"""

from __future__ import annotations

import base64
import contextlib
import io
import math
import re
import urllib.parse
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from PIL import Image

from visus import limits
from visus.errors import InvalidInputError, TooLargeError, UndecodableError, UnsupportedTypeError
from visus.media import _vips
from visus.media.fitting import target_size
from visus.media.types import Region

__all__ = ["ParsedSvg", "check_complexity", "looks_heavy", "parse_svg", "render_svg", "zoom_svg"]

_SVG_NS = "{http://www.w3.org/2000/svg}"
_FEED_CHUNK = 64 * 1024
# usvg's size when the root gives neither width/height nor a viewBox.
_DEFAULT_SIZE = 100.0

# A DOCTYPE, with its internal subset (group 1) when it has one.
_DOCTYPE = re.compile(r"<!DOCTYPE[^\[>]*(\[.*?\]\s*)?>", re.IGNORECASE | re.DOTALL)
_DOCTYPE_ANY = re.compile(r"<!DOCTYPE", re.IGNORECASE)
_ENTITY = re.compile(r"<!ENTITY", re.IGNORECASE)
_SAFE_DATA = re.compile(r"^data:image/(png|jpeg|jpg|gif|webp)[;,]", re.IGNORECASE)
# A url() to anything but a #fragment, terminated or not (CSS closes an unterminated
# url at the end of the stylesheet).
_CSS_URL = re.compile(r"url\(\s*(?!['\"]?\s*#)[^)]*\)?", re.IGNORECASE)
# A CSS escape: up to six hex digits and one optional whitespace, or any other character.
_CSS_ESCAPE = re.compile(r"\\(?:([0-9a-fA-F]{1,6})\s?|(.))", re.DOTALL)
_CSS_IMPORT = re.compile(r"@import[^;]*;?", re.IGNORECASE)
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
# Digits and dots -> "1", anything else -> " ": a number starts at every " 1".
_DIGIT_RUNS = bytes(49 if chr(i) in "0123456789." else 32 for i in range(256))
_TEXT_ELEMENTS = frozenset({"text", "tspan", "textPath"})
_LENGTH = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([a-z%]*)\s*$")
_UNITS = {
    "": 1.0,
    "px": 1.0,
    "pt": 4 / 3,
    "pc": 16.0,
    "mm": 96 / 25.4,
    "cm": 96 / 2.54,
    "in": 96.0,
    "em": 16.0,
    "ex": 8.0,
}


# Filters (``<filter>`` primitives, or CSS filter functions such as ``blur()`` that no
# element count sees) and masks are what make a small document slow to draw: each is a
# pass over the canvas, some (a morphology of radius 200, a wide blur) of large cost per
# pixel. CSS property names are case-insensitive.
_HEAVY = re.compile(rb"filter|mask", re.IGNORECASE)


def looks_heavy(data: bytes) -> bool:
    """Whether ``data`` may be an SVG that uses filters or masks (a byte search, no
    parse; a wrong guess costs a lane, never a refusal): its render starts in the
    render worker's heavy lane.

    Example:
        >>> looks_heavy(b'<svg><filter id="f"><feGaussianBlur/></filter></svg>')
        True
        >>> looks_heavy(b'<svg><rect style="FILTER: blur(9px)"/></svg>')
        True
        >>> looks_heavy(b"<svg><rect/></svg>"), looks_heavy(b"filter(None, xs)")
        (False, False)
    """
    return b"svg" in data and _HEAVY.search(data) is not None


@dataclass(frozen=True, slots=True)
class ParsedSvg:
    """A cleaned SVG document ready for the renderer, with its intrinsic size in px."""

    text: str
    width: float
    height: float


def _strip_doctype(text: str) -> tuple[str, bool]:
    """Drop the first DOCTYPE; say whether any DTD markup (internal subset, ENTITY) remains."""
    m = _DOCTYPE.search(text)
    subset = bool(m and m.group(1))
    if m:
        text = text[: m.start()] + text[m.end() :]
    return text, subset or bool(_DOCTYPE_ANY.search(text) or _ENTITY.search(text))


def _root_and_tree(text: str) -> tuple[str, ET.Element | None, ET.ParseError | None]:
    """Feed the XML parser until the root tag is known; finish only if it is an SVG.

    Returns the root tag ("" if none was reached), the whole tree when the document
    is an SVG that parsed, and the parse error if there was one.
    """
    parser: ET.XMLPullParser[ET.Element] = ET.XMLPullParser(events=("start",))
    root: ET.Element | None = None

    def first_start() -> None:
        nonlocal root
        if root is None:
            for event in parser.read_events():
                element: object = event[-1]
                if isinstance(element, ET.Element):
                    root = element
                    break

    try:
        for i in range(0, len(text), _FEED_CHUNK):
            parser.feed(text[i : i + _FEED_CHUNK])
            first_start()
            if root is not None and root.tag != f"{_SVG_NS}svg":
                return root.tag, None, None
        parser.close()
        first_start()
    except ET.ParseError as e:
        first_start()
        return (root.tag if root is not None else ""), None, e
    return (root.tag, root, None) if root is not None else ("", None, None)


def _unescape_char(m: re.Match[str]) -> str:
    if m.group(1) is None:
        return m.group(2)
    code = int(m.group(1), 16)
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF or (code < 0x20 and code not in (9, 10, 13)):
        return "\ufffd"
    return chr(code)


def _clean_css(value: str) -> str:
    """``value`` (a stylesheet, a style attribute or any attribute) with no outside
    reference left. CSS escapes are resolved first (``u\\72l(`` is ``url(``, ``@\\69mport``
    is ``@import``) and any backslash still left is dropped, so what librsvg reads holds
    no escape at all: every spelling of a reference is the plain one we remove."""
    value = _CSS_ESCAPE.sub(_unescape_char, value).replace("\\", "")
    return _CSS_IMPORT.sub("", _CSS_URL.sub("none", value))


def _safe_data_image(uri: str) -> bool:
    """A raster ``data:`` URI whose header Pillow reads and whose size is in bounds.

    The renderer decodes embedded rasters itself, with no bomb check: a 40000 x 40000 PNG
    header in a data URI makes it allocate 4.8 GB (and abort the process).
    """
    if not _SAFE_DATA.match(uri):
        return False
    meta, sep, payload = uri.partition(",")
    if not sep:
        return False
    try:
        if meta.lower().endswith(";base64"):
            raw = base64.b64decode("".join(payload.split()), validate=True)
        else:
            raw = urllib.parse.unquote_to_bytes(payload)
        with Image.open(io.BytesIO(raw)) as im:
            w, h = im.size
    except (ValueError, OSError, Image.DecompressionBombError, Image.DecompressionBombWarning):
        # binascii.Error is a ValueError; UnidentifiedImageError an OSError.
        return False
    return w * h <= limits.MAX_SOURCE_PIXELS and max(w, h) <= limits.MAX_SOURCE_EDGE


def _numbers(value: str | None) -> list[float]:
    out: list[float] = []
    for token in _NUMBER.findall(value or ""):
        with contextlib.suppress(ValueError):
            out.append(float(token))
    return out


def _coordinates(value: str) -> int:
    """How many numbers path data or a points list holds: its runs of digits and dots.

    Counted at C speed (``bytes.translate`` + ``count``; a regex pass over a 4 MB path
    takes most of a second). "M.5.5" counts as one number: an undercount only there.
    """
    runs = b" " + value.encode("utf-8", "replace").translate(_DIGIT_RUNS)
    return runs.count(b" 1")


def _too_complex(what: str, count: float, bound: str) -> TooLargeError:
    return TooLargeError(
        f"SVG is too complex to render: {what} {count:,g} is over "
        f"{getattr(limits, bound):,} (limits.{bound})"
    )


def _check_filter(local: str, element: ET.Element) -> None:
    """Refuse the filter parameters whose cost grows without bound."""
    if local == "feMorphology":
        radius = max(_numbers(element.get("radius")), default=0.0)
        if radius > limits.SVG_MAX_FILTER_RADIUS:
            raise _too_complex("feMorphology radius", radius, "SVG_MAX_FILTER_RADIUS")
    elif local == "feTurbulence":
        octaves = max(_numbers(element.get("numOctaves")), default=1.0)
        if octaves > limits.SVG_MAX_TURBULENCE_OCTAVES:
            raise _too_complex("feTurbulence numOctaves", octaves, "SVG_MAX_TURBULENCE_OCTAVES")
    elif local == "feConvolveMatrix":
        order = max(_numbers(element.get("order")), default=3.0)
        if order > limits.SVG_MAX_CONVOLVE_ORDER:
            raise _too_complex("feConvolveMatrix order", order, "SVG_MAX_CONVOLVE_ORDER")


def check_complexity(root: ET.Element) -> None:
    """Refuse, before rendering, a document whose render cost is out of all proportion.

    Counts elements, attributes per element, nesting depth, filter primitives, masks,
    text elements and path segments, and checks the parameters of the filters whose
    cost has no ceiling of its own; each bound is in :mod:`visus.limits`. One walk
    over the parsed tree: cheap next to any render.
    """
    elements = filters = masks = texts = 0
    coordinates = 0
    stack = [(root, 1)]
    while stack:
        element, depth = stack.pop()
        elements += 1
        if elements > limits.SVG_MAX_ELEMENTS:
            raise _too_complex("element count", elements, "SVG_MAX_ELEMENTS")
        if depth > limits.SVG_MAX_DEPTH:
            raise _too_complex("nesting depth", depth, "SVG_MAX_DEPTH")
        if len(element.attrib) > limits.SVG_MAX_ATTRIBUTES:
            raise _too_complex(
                "attribute count of one element", len(element.attrib), "SVG_MAX_ATTRIBUTES"
            )
        tag = element.tag if isinstance(element.tag, str) else ""
        local = tag.rsplit("}", 1)[-1]
        if local.startswith("fe") and local[2:3].isupper():
            filters += 1
            if filters > limits.SVG_MAX_FILTER_PRIMITIVES:
                raise _too_complex("filter primitive count", filters, "SVG_MAX_FILTER_PRIMITIVES")
            _check_filter(local, element)
        elif local == "mask":
            masks += 1
            if masks > limits.SVG_MAX_MASKS:
                raise _too_complex("mask count", masks, "SVG_MAX_MASKS")
        elif local in _TEXT_ELEMENTS:
            texts += 1
            if texts > limits.SVG_MAX_TEXT_ELEMENTS:
                raise _too_complex("text element count", texts, "SVG_MAX_TEXT_ELEMENTS")
        for key in ("d", "points"):
            value = element.get(key)
            if value:
                coordinates += _coordinates(value)
        if coordinates > 2 * limits.SVG_MAX_PATH_SEGMENTS:
            raise _too_complex("path segment count", coordinates // 2, "SVG_MAX_PATH_SEGMENTS")
        stack.extend((child, depth + 1) for child in element)


def _is_css(value: str) -> bool:
    lowered = value.lower()
    return "\\" in value or "url(" in lowered or "@import" in lowered


def _sanitise(root: ET.Element) -> None:
    for element in list(root.iter()):
        for key in list(element.attrib):
            value = element.attrib[key]
            local = key.rsplit("}", 1)[-1]
            if local == "href":
                v = value.strip()
                if not (v.startswith("#") or _safe_data_image(v)):
                    del element.attrib[key]
            elif _is_css(value):
                element.attrib[key] = _clean_css(value)
        tag = element.tag if isinstance(element.tag, str) else ""
        if tag.rsplit("}", 1)[-1] == "style":
            # All of it is stylesheet text to librsvg, the tails of child elements too.
            css = "".join(element.itertext())
            for child in list(element):
                element.remove(child)
            element.text = _clean_css(css) if _is_css(css) else css


def _length(value: str | None, reference: float | None) -> float | None:
    if value is None:
        return None
    m = _LENGTH.match(value)
    if not m:
        return None
    number, unit = float(m.group(1)), m.group(2).lower()
    if unit == "%":
        return None if reference is None else reference * number / 100
    factor = _UNITS.get(unit)
    return None if factor is None else number * factor


def _intrinsic_size(root: ET.Element) -> tuple[float, float]:
    vb_w = vb_h = None
    parts = re.split(r"[\s,]+", root.get("viewBox", "").strip())
    if len(parts) == 4:
        with contextlib.suppress(ValueError):
            vb_w, vb_h = float(parts[2]), float(parts[3])
    w = _length(root.get("width"), vb_w) or vb_w or _DEFAULT_SIZE
    h = _length(root.get("height"), vb_h) or vb_h or _DEFAULT_SIZE
    if not (math.isfinite(w) and math.isfinite(h)) or w <= 0 or h <= 0:
        raise UndecodableError(f"SVG has no usable size (width {w}, height {h})")
    return w, h


def parse_svg(data: bytes) -> ParsedSvg | None:
    """The cleaned document when ``data`` is an SVG, ``None`` when it is not one.

    Raises :class:`UnsupportedTypeError` for DTD entity declarations,
    :class:`TooLargeError` past ``limits.MAX_SVG_BYTES`` and
    :class:`UndecodableError` for a document whose root is ``<svg>`` but is malformed.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    if "\x00" in text:
        return None
    text, has_dtd = _strip_doctype(text)
    tag, root, error = _root_and_tree(text)
    if tag != f"{_SVG_NS}svg":
        return None
    if has_dtd:
        raise UnsupportedTypeError(
            "SVG with a DTD internal subset or <!ENTITY> declarations is refused "
            "(entity expansion and external entities are never followed)"
        )
    if len(data) > limits.MAX_SVG_BYTES:
        raise TooLargeError(f"SVG of {len(data)} bytes is over {limits.MAX_SVG_BYTES}")
    if root is None:
        raise UndecodableError(f"malformed SVG: {error}")
    check_complexity(root)
    _sanitise(root)
    width, height = _intrinsic_size(root)
    return ParsedSvg(ET.tostring(root, encoding="unicode"), width, height)


def _librsvg(svg: ParsedSvg, width: int, height: int) -> Image.Image:
    """``svg`` drawn by librsvg (through libvips) to fit ``width`` x ``height``, RGBA."""
    vips = _vips.svg_engine()
    data = svg.text.encode("utf-8")
    # librsvg's own idea of the canvas (a header read: nothing is drawn yet) sets
    # the scale, so its rounding never lands a pixel past our bounds.
    head = vips.Image.svgload_buffer(data)
    scale = min(width / max(1, head.width), height / max(1, head.height))
    thin = min(head.width, head.height) * scale < 1
    if thin:
        # A strip thinner than a pixel at this scale (a 30000 x 1 region fitted to 1568
        # px): librsvg would draw it 0 px thick. Draw it 1 px thick, then shrink its
        # length to the size asked.
        scale = _strip_scale(head.width, head.height)
    im = vips.Image.svgload_buffer(data, scale=scale)
    if thin and (im.width > width or im.height > height):
        im = im.resize(min(1.0, width / im.width), vscale=min(1.0, height / im.height))
    if im.width > width or im.height > height:
        im = im.crop(0, 0, min(im.width, width), min(im.height, height))
    if im.bands != 4 or im.format != "uchar":
        raise UndecodableError(f"librsvg drew {im.bands} bands of {im.format}, not 8-bit RGBA")
    try:
        pixels = im.write_to_memory()
    except vips.Error as e:
        # The document parsed (above); what fails while drawing is a resource: cairo
        # reports a canvas or group layer it could not allocate as a bare "rendering
        # error". In the render worker that is its address-space cap.
        raise TooLargeError(
            f"the SVG could not be drawn at {im.width} x {im.height} within the render "
            "memory cap (limits.RENDER_MAX_MEMORY_BYTES) or librsvg's own limits: "
            + " ".join(str(e).split())
        ) from e
    return Image.frombytes("RGBA", (im.width, im.height), pixels)


def _strip_scale(width: int, height: int) -> float:
    """The scale that draws a ``width`` x ``height`` strip 1 px thick, or
    :class:`InvalidInputError` when its length would then pass ``MAX_SOURCE_EDGE``.

    Example:
        >>> _strip_scale(30_000, 1)
        1.0
        >>> try:
        ...     _strip_scale(30_000, 0)
        ... except InvalidInputError as e:
        ...     print(e)
        the SVG (or its region) is 30000 x 0 px: too thin to draw (at 1 px thick it would be over 30000 px long, MAX_SOURCE_EDGE); ask for a region at most 30000 times as long as it is thick
    """  # noqa: E501
    short, long = min(width, height), max(width, height)
    if short <= 0 or long / short > limits.MAX_SOURCE_EDGE:
        raise InvalidInputError(
            f"the SVG (or its region) is {width} x {height} px: too thin to draw (at 1 px "
            f"thick it would be over {limits.MAX_SOURCE_EDGE} px long, MAX_SOURCE_EDGE); ask "
            f"for a region at most {limits.MAX_SOURCE_EDGE} times as long as it is thick"
        )
    return 1 / short


def render_svg(
    svg: ParsedSvg, max_edge: int, max_pixels: int, *, enlarge: bool = False
) -> Image.Image:
    """Render at the largest size inside both bounds and ``limits.MAX_SVG_RENDER_PIXELS``,
    straight at that size (never the document's own canvas), RGBA. The intrinsic size is
    never exceeded unless ``enlarge`` (a zoomed region: drawn at the scale that fills
    the bounds, vector detail and all).

    Example:
        >>> doc = parse_svg(b'<svg xmlns="http://www.w3.org/2000/svg" width="400" height="200"/>')
        >>> render_svg(doc, 100, 10_000).size
        (100, 50)
        >>> render_svg(doc, 1000, 1_000_000, enlarge=True).size
        (1000, 500)
    """
    pixels = min(max_pixels, limits.MAX_SVG_RENDER_PIXELS)
    k = max(max_edge, math.isqrt(pixels)) * 4 / max(svg.width, svg.height) if enlarge else 1.0
    w, h = target_size(math.ceil(svg.width * k), math.ceil(svg.height * k), max_edge, pixels)
    return _librsvg(svg, w, h)


def zoom_svg(svg: ParsedSvg, region: Region) -> ParsedSvg:
    """The document cut to ``region`` (in its intrinsic px): an outer ``<svg>`` whose
    viewBox is the region holds the document at its intrinsic size, so only the region
    is drawn (at whatever scale it is rendered) and the document's own viewBox and
    aspect rules still apply inside.

    Example:
        >>> doc = parse_svg(b'<svg xmlns="http://www.w3.org/2000/svg" width="400" height="200"/>')
        >>> part = zoom_svg(doc, Region(100, 0, 300, 50))
        >>> (part.width, part.height)
        (200.0, 50.0)
    """
    region.check(max(1, round(svg.width)), max(1, round(svg.height)))
    inner = ET.fromstring(svg.text)
    for key in ("x", "y"):
        inner.attrib.pop(key, None)
    inner.set("width", repr(svg.width))
    inner.set("height", repr(svg.height))
    outer = ET.Element(
        f"{_SVG_NS}svg",
        {
            "width": str(region.width),
            "height": str(region.height),
            "viewBox": " ".join(
                str(v) for v in (region.x0, region.y0, region.width, region.height)
            ),
        },
    )
    outer.append(inner)
    return ParsedSvg(
        ET.tostring(outer, encoding="unicode"), float(region.width), float(region.height)
    )
