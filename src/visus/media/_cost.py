"""What decoding an identified raster costs, from its header, before a pixel is decoded.

Pixels alone do not bound a decode. A progressive JPEG is decoded scan by scan, each a
pass over every block of the image, and a scan of "end of band" runs costs a few
bytes: 600 scans over 10000 x 10000 fit in 700 KB and held libvips for 22 s (Pillow
alike). An interlaced PNG, or any frame Pillow decodes, is held whole in memory. So:

- a JPEG with more than ``limits.RASTER_MAX_JPEG_SCANS`` scans is refused at once;
- a decode runs in the calling process only when it is small on every count
  (``RASTER_INPROCESS_MAX_PIXELS``, ``RASTER_INPROCESS_MAX_SCAN_PIXELS``,
  ``RASTER_INPROCESS_MAX_BYTES``) and its format is one whose decoders we measured
  (PNG, JPEG, GIF, WebP): its time is bounded by those counts, and its buffers are
  reserved against the process's memory budget (:mod:`visus.budget`) first;
- everything else decodes in the heavy lane of the render worker
  (:mod:`visus.media._worker`), under its time budget and memory cap.

Example:
    >>> import io
    >>> from PIL import Image
    >>> from visus.media.raster import identify, read_header
    >>> buf = io.BytesIO(); Image.new("RGB", (4000, 3000), "red").save(buf, "JPEG")
    >>> data = buf.getvalue()
    >>> cost = decode_cost(read_header(identify(data)), data, (1238, 928), by_vips=True)
    >>> cost.scans, cost.in_process, cost.buffer_bytes < 32 * 2**20
    (1, True, True)
"""

from __future__ import annotations

from dataclasses import dataclass

from visus import limits
from visus.errors import TooLargeError
from visus.media._vips import jpeg_shrink
from visus.media.raster import SWAPS_AXES, Header

__all__ = ["DecodeCost", "decode_cost", "jpeg_scans"]

# Formats whose decoders' cost we measured per pixel; the rest go to the worker.
_IN_PROCESS_FORMATS = frozenset({"PNG", "JPEG", "MPO", "GIF", "WEBP"})
# libvips streams a non-interlaced PNG through a band of rows this tall (generous).
_BAND_ROWS = 256
# The fitted image as libvips hands it over, as Pillow's copy, and normalised.
_OUTPUT_COPIES = 3


@dataclass(frozen=True, slots=True)
class DecodeCost:
    """Where a raster decode runs, and what it holds there."""

    #: Source pixels (stored width x height).
    pixels: int
    #: Scans of a JPEG (each a pass over the image when progressive); 1 otherwise.
    scans: int
    progressive: bool
    #: Estimated peak of the decode's buffers (bytes).
    buffer_bytes: int
    #: Small enough on every count to decode in the calling process.
    in_process: bool


def jpeg_scans(data: bytes) -> int:
    """How many scans (SOS markers) ``data`` holds, counted at C speed.

    The entropy-coded data of a JPEG never holds ``FF DA`` (a data ``FF`` is followed
    by ``00``), so only a marker-like run inside a metadata segment could add to the
    count: an overcount, never an undercount.

    Example:
        >>> jpeg_scans(b"\\xff\\xd8\\xff\\xda..\\xff\\xda..\\xff\\xd9")
        2
    """
    return data.count(b"\xff\xda")


def _components(header: Header) -> int:
    layers = getattr(header.image, "layers", None)
    if isinstance(layers, int) and layers > 0:
        return layers
    return len(header.image.getbands())


# Bytes per pixel Pillow keeps a decoded frame in, by mode (every other mode: 4).
_FRAME_BYTES = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16B": 2, "I;16L": 2, "I;16N": 2}


def _pillow_bytes(header: Header, pixels: int) -> int:
    """What a decode by Pillow (:func:`visus.media.raster.decode`, then the resize)
    holds at its peak, per pixel of the source: the frame as decoded, its RGB(A) copy
    when normalising converts it, a turned copy for an EXIF orientation, and the
    premultiplied copy a resize of an image with alpha makes. Measured: a 6000 x 6000
    palette GIF held 9 bytes a pixel (324 MB), not the 2 reserved for it."""
    im = header.image
    mode = im.mode
    per_pixel = _FRAME_BYTES.get(mode, 4)
    alpha = "A" in mode or mode in ("P", "PA", "La", "RGBa") or "transparency" in im.info
    if mode not in ("RGB", "RGBA") or (mode == "RGB" and alpha):
        per_pixel += 4  # normalised to RGB or RGBA
    if header.orientation != 1:
        per_pixel += 4
    if alpha:
        per_pixel += 4  # premultiplied once for the resize
    return pixels * per_pixel


def _decoded_bytes(header: Header, size: tuple[int, int], by_vips: bool, progressive: bool) -> int:
    w, h = header.image.size  # as stored
    comps = _components(header)
    if not by_vips:
        held = _pillow_bytes(header, w * h)
    elif header.format == "PNG":
        interlaced = bool(header.image.info.get("interlace"))
        held = w * h * comps if interlaced else w * _BAND_ROWS * comps
    else:
        stored = (size[1], size[0]) if header.orientation in SWAPS_AXES else size
        s = jpeg_shrink((w, h), stored)
        held = (w // s) * (h // s) * comps
    if progressive:
        # libjpeg keeps every DCT coefficient of the image (2 bytes each) across scans.
        held += w * h * 2 * comps
    return held


def decode_cost(header: Header, data: bytes, size: tuple[int, int], *, by_vips: bool) -> DecodeCost:
    """The cost of decoding ``header`` (of ``data``) to ``size``; ``by_vips``: libvips
    decodes it (:func:`visus.media.raster.by_vips`).

    Raises :class:`TooLargeError` for a JPEG past ``limits.RASTER_MAX_JPEG_SCANS``.
    """
    w, h = header.image.size
    pixels = w * h
    scans, progressive = 1, False
    if header.format in ("JPEG", "MPO"):
        scans = jpeg_scans(data)
        if scans > limits.RASTER_MAX_JPEG_SCANS:
            raise TooLargeError(
                f"JPEG of {w} x {h} pixels has {scans} scans, over "
                f"{limits.RASTER_MAX_JPEG_SCANS} (limits.RASTER_MAX_JPEG_SCANS): each scan "
                "is one more pass over the whole image"
            )
        progressive = bool(header.image.info.get("progressive"))
    held = _decoded_bytes(header, size, by_vips, progressive)
    held += size[0] * size[1] * 4 * _OUTPUT_COPIES
    in_process = (
        header.format in _IN_PROCESS_FORMATS
        and pixels <= limits.RASTER_INPROCESS_MAX_PIXELS
        and held <= limits.RASTER_INPROCESS_MAX_BYTES
        and (not progressive or pixels * scans <= limits.RASTER_INPROCESS_MAX_SCAN_PIXELS)
    )
    return DecodeCost(pixels, scans, progressive, held, in_process)
