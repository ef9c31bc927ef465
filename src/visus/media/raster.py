"""Raster sources: whatever Pillow identifies, bomb-checked from the header, then decoded.

JPEGs are decoded reduced (libjpeg DCT scaling via ``Image.draft``) to the smallest
power-of-two scale still at least the fitted size, so a 12 MP photo is never decoded
at full size just to be shrunk.
"""

from __future__ import annotations

import dataclasses
import io
import warnings
from dataclasses import dataclass
from typing import cast

from PIL import ExifTags, Image, ImageOps, JpegImagePlugin, UnidentifiedImageError

from visus import limits
from visus.errors import TooLargeError
from visus.media import _vips
from visus.media.fitting import Encoded, classify, encode, resize, target_size
from visus.media.types import Fitted, Profile, Region

__all__ = [
    "SWAPS_AXES",
    "Header",
    "as_is",
    "by_vips",
    "decode",
    "identify",
    "load_raster",
    "read_header",
]

# Pillow's own bomb guard uses our bound too (it errors at twice this value, before
# our check runs; below that, our check in read_header refuses first).
Image.MAX_IMAGE_PIXELS = limits.MAX_SOURCE_PIXELS

# Pillow formats whose bytes we may hand on unchanged when they already fit.
_PASSTHROUGH = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}
#: EXIF orientations that turn the image a quarter (stored axes differ from shown).
SWAPS_AXES = frozenset({5, 6, 7, 8})
# Decoded and shrunk by libvips (see _vips): 8-bit PNG and JPEG, the formats where it
# wins by measurement. The rest (GIF and WebP frames, 16-bit, CMYK...) stay Pillow's.
_VIPS_FORMATS = frozenset({"PNG", "JPEG", "MPO"})
_VIPS_MODES = frozenset({"1", "L", "LA", "P", "RGB", "RGBA"})


@dataclass(frozen=True, slots=True)
class Header:
    """An identified raster before decoding: oriented size and what the header says."""

    image: Image.Image
    format: str
    media_type: str
    width: int
    height: int
    frame_count: int
    orientation: int


class _HeaderTooLong(TooLargeError):
    """Pillow read a header past ``limits.RASTER_HEADER_MAX_READS``."""


class _Metered(io.BytesIO):
    """The bytes Pillow parses a header from, counting its reads.

    Pillow reads a header in Python, one read (or a few) per PNG chunk, GIF block or
    TIFF directory: millions of tiny parts would hold the caller for minutes, outside
    any budget. Past ``limits.RASTER_HEADER_MAX_READS`` reads the parse stops with a
    :class:`TooLargeError`; :func:`read_header` lifts the bound once the header is read
    (the decode's reads are bounded by its own costing, :mod:`visus.media._cost`).
    """

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.reads_left: int | None = limits.RASTER_HEADER_MAX_READS

    def _count(self) -> None:
        if self.reads_left is not None:
            self.reads_left -= 1
            if self.reads_left < 0:
                raise _HeaderTooLong(
                    f"the image header has more than {limits.RASTER_HEADER_MAX_READS:,} "
                    "parts before its pixels (limits.RASTER_HEADER_MAX_READS)"
                )

    def read(self, size: int | None = -1, /) -> bytes:
        self._count()
        return super().read(size)

    def readline(self, size: int | None = -1, /) -> bytes:
        self._count()
        return super().readline(size)


#: Pillow plugins we never open: EPS runs an outside program (Ghostscript) on load; IM
#: and IM Tools read any text as a header, with no signature to check first (a text
#: file is parsed line by line as one); the rest only identify files they cannot decode.
_REFUSED_PLUGINS = frozenset({"EPS", "IM", "IMT", "BUFR", "GRIB", "HDF5", "MPEG", "WMF"})


def _openable() -> tuple[str, ...]:
    """The Pillow plugins registered now (a plugin an application registers later, such
    as pillow-heif's, included) but the refused ones."""
    Image.init()
    return tuple(f for f in Image.OPEN if f not in _REFUSED_PLUGINS)


def identify(data: bytes) -> Image.Image | None:
    """Pillow's header parse of ``data``, or ``None`` when no Pillow plugin accepts it.

    Raises :class:`TooLargeError` in our words when Pillow's own bomb guard fires, or
    when the header takes more than ``limits.RASTER_HEADER_MAX_READS`` reads.
    """
    try:
        with warnings.catch_warnings():
            # Past our bound (and below twice it) Pillow only warns, on stderr; the
            # refusal is read_header's, which runs next on the same size.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            return Image.open(_Metered(data), formats=_openable())
    except UnidentifiedImageError:
        return None
    except Image.DecompressionBombError as e:
        raise TooLargeError(
            f"image header is far past the decode bound ({limits.MAX_SOURCE_PIXELS:,} "
            f"pixels, {limits.MAX_SOURCE_EDGE:,} px per side)"
        ) from e


def _meter(im: Image.Image, reads: int | None) -> None:
    """Let Pillow read ``reads`` more times from ``im``'s bytes (None: no bound)."""
    fp = getattr(im, "fp", None)
    if isinstance(fp, _Metered):
        fp.reads_left = reads


def _frames(im: Image.Image) -> int:
    """How many frames ``im`` has, left at its first. Counting walks every frame's
    header (GIF, TIFF): when that passes the header's read bound, the frames counted
    so far (at least two) are reported rather than the image refused."""
    try:
        frames = int(getattr(im, "n_frames", 1) or 1)
    except _HeaderTooLong:
        frames = max(2, im.tell() + 1)
        _meter(im, limits.RASTER_HEADER_MAX_READS)  # fresh, to go back to the first
    if frames > 1:
        im.seek(0)
    return frames


def _orientation(im: Image.Image) -> int:
    if im.format == "PNG" and "exif" not in im.info:
        # PngImageFile.getexif() decodes the whole image to look for a late eXIf chunk.
        return 1
    try:
        value = im.getexif().get(ExifTags.Base.Orientation, 1)
    except Exception:
        # A broken EXIF block does not make the pixels unreadable; ignore it.
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def read_header(im: Image.Image) -> Header:
    """Check the header's size against the bomb bounds and read frames and orientation.

    Raises :class:`TooLargeError` without decoding a single pixel.
    """
    w, h = im.size
    if w * h > limits.MAX_SOURCE_PIXELS or max(w, h) > limits.MAX_SOURCE_EDGE:
        raise TooLargeError(
            f"{im.format} of {w} x {h} pixels is past the decode bound "
            f"({limits.MAX_SOURCE_PIXELS:,} pixels, {limits.MAX_SOURCE_EDGE:,} px per side)"
        )
    frames = _frames(im)
    orientation = _orientation(im)
    _meter(im, None)  # the header is read: the decode is costed apart
    if orientation in SWAPS_AXES:
        w, h = h, w
    fmt = im.format or "unknown"
    return Header(
        image=im,
        format=fmt,
        media_type=Image.MIME.get(fmt, f"image/{fmt.lower()}"),
        width=w,
        height=h,
        frame_count=frames,
        orientation=orientation,
    )


def _to_8bit(im: Image.Image) -> Image.Image:
    """Scale a 16/32-bit integer or float grey image to 8 bits by its range, not by clipping."""
    if im.mode != "F":
        im = im.convert("I") if im.mode != "I" else im
    lo, hi = cast("tuple[float, float]", im.getextrema())
    if im.mode == "I" and lo >= 0 and hi <= 255:
        return im.convert("L")
    if im.mode == "I" and lo >= 0 and hi <= 65535:
        lo, hi = 0, 65535
    span = (hi - lo) or 1
    return im.point(lambda v: (v - lo) * (255 / span)).convert("L")


def normalise(im: Image.Image) -> Image.Image:
    """RGB, or RGBA when the source has an alpha channel or a transparent colour."""
    mode = im.mode
    if mode in ("RGB", "RGBA"):
        if "transparency" in im.info and mode == "RGB":
            return im.convert("RGBA")
        return im
    if mode in ("P", "PA", "LA", "La", "RGBa") or (
        "transparency" in im.info and mode in ("L", "1")
    ):
        return im.convert("RGBA")
    if mode.startswith("I") or mode == "F":
        return _to_8bit(im).convert("RGB")
    return im.convert("RGB")


def decode(header: Header, profile: Profile) -> Image.Image:
    """Decode the first frame, reduced where the codec allows, oriented and normalised."""
    im = header.image
    tw, th = target_size(header.width, header.height, profile.max_edge, profile.max_pixels)
    # MPO (phone photos with an MPF block) is a JPEG subclass: draft works there too.
    if isinstance(im, JpegImagePlugin.JpegImageFile) and (tw, th) != (header.width, header.height):
        request = (th, tw) if header.orientation in SWAPS_AXES else (tw, th)
        im.draft(None, request)
    im.load()
    if header.orientation != 1:
        im = ImageOps.exif_transpose(im)
    return normalise(im)


def _raw_mode(args: object) -> str:
    return str(args[0] if isinstance(args, tuple) and args else args)


def _can_pass_through(header: Header, data: bytes, profile: Profile) -> bool:
    """The source bytes already meet ``profile`` and need no normalising."""
    im = header.image
    media_type = _PASSTHROUGH.get(header.format)
    if media_type is None or media_type not in profile.media_types:
        return False
    # 8-bit RGB(A) only: a 16-bit PNG decodes to "RGB" but its tile's raw mode says more.
    raw_modes = {_raw_mode(t.args) for t in getattr(im, "tile", None) or ()}
    return (
        im.mode in ("RGB", "RGBA")
        and raw_modes <= {"RGB", "RGBA", "RGBX", "YCbCr"}
        and header.frame_count == 1
        and header.orientation == 1
        and len(data) <= profile.max_bytes
        and target_size(header.width, header.height, profile.max_edge, profile.max_pixels)
        == (header.width, header.height)
    )


def by_vips(header: Header, size: tuple[int, int]) -> bool:
    """libvips decodes and shrinks this source: an 8-bit still PNG or JPEG to shrink."""
    im = header.image
    raw_modes = {_raw_mode(t.args) for t in getattr(im, "tile", None) or ()}
    return (
        header.format in _VIPS_FORMATS
        and size != (header.width, header.height)
        and im.mode in _VIPS_MODES
        and not any("16" in m or m.startswith(("I", "F")) for m in raw_modes)
        and (header.frame_count == 1 or header.format == "MPO")
    )


def _shrink_by_vips(header: Header, data: bytes, size: tuple[int, int]) -> Image.Image:
    im = header.image
    shrunk = _vips.shrink(
        data,
        "PNG" if header.format == "PNG" else "JPEG",
        im.size,
        size,
        swapped=header.orientation in SWAPS_AXES,
    )
    return normalise(shrunk)


def load_raster(
    header: Header, data: bytes, profile: Profile, region: Region | None = None
) -> Fitted:
    """Decode and fit an identified raster (``header``, :func:`read_header` of
    :func:`identify` of ``data``) to ``profile``, here in this process; with ``region``,
    only that part of it, cropped before anything is shrunk.

    :func:`visus.media.load` and :func:`visus.media.fit` first decide where that may
    happen (:mod:`visus.media._cost`): here, or in the render worker.
    """
    if region is not None:
        return _load_region(header, profile, region)
    # Decided before decoding: load() drops the tile list that says the raw bit depth.
    passthrough = _can_pass_through(header, data, profile)
    size = target_size(header.width, header.height, profile.max_edge, profile.max_pixels)
    if by_vips(header, size):
        fitted = _shrink_by_vips(header, data, size)
        header.image.close()
        return _fitted(header, encode(fitted, profile, content=classify(fitted)))
    decoded = decode(header, profile)
    if passthrough:
        return _unchanged(header, data)
    content = classify(decoded)
    fitted = resize(decoded, size, content)
    if fitted is not decoded:
        # Free the decoded frame before encoding: it is the largest buffer we hold.
        decoded.close()
        header.image.close()
    return _fitted(header, encode(fitted, profile, content=content))


def _load_region(header: Header, profile: Profile, region: Region) -> Fitted:
    """``region`` of the oriented source at full resolution, then fitted: a region that
    already fits goes 1:1. Decoded whole by Pillow (the header passed the decode bounds)."""
    region.check(header.width, header.height)
    im = header.image
    im.load()
    if header.orientation != 1:
        im = ImageOps.exif_transpose(im)
    crop = normalise(im).crop((region.x0, region.y0, region.x1, region.y1))
    header.image.close()
    size = target_size(crop.width, crop.height, profile.max_edge, profile.max_pixels)
    content = classify(crop)
    fitted = _fitted(header, encode(resize(crop, size, content), profile, content=content))
    return dataclasses.replace(fitted, region=region)


def as_is(im: Image.Image, data: bytes, profile: Profile) -> Fitted | None:
    """``data`` unchanged when it already meets ``profile`` (see ``_can_pass_through``),
    else ``None``; reads the header only."""
    header = read_header(im)
    return _unchanged(header, data) if _can_pass_through(header, data, profile) else None


def _unchanged(header: Header, data: bytes) -> Fitted:
    as_sent = Encoded(data, _PASSTHROUGH[header.format], header.width, header.height)
    return _fitted(header, as_sent)


def _fitted(header: Header, enc: Encoded) -> Fitted:
    return Fitted(
        data=enc.data,
        media_type=enc.media_type,
        width=enc.width,
        height=enc.height,
        source_width=header.width,
        source_height=header.height,
        source_kind="raster",
        frame_count=header.frame_count,
    )
