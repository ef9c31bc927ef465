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
# Pillow keeps every multi-band pixel in 4 bytes; a decode holds the frame and its
# normalised copy.
_PILLOW_FRAME_COPIES = 2
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


def _decoded_bytes(header: Header, size: tuple[int, int], by_vips: bool, progressive: bool) -> int:
    w, h = header.image.size  # as stored
    comps = _components(header)
    if not by_vips:
        held = w * h * (1 if comps == 1 else 4) * _PILLOW_FRAME_COPIES
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
