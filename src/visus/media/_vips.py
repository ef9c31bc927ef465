"""libvips (through pyvips) for the decode+shrink of large PNGs and JPEGs.

Measured in ``python -m benchmarks media`` (benchmarks/RESULTS.md): libvips decodes a
PNG several times faster than Pillow and streams it (a 2000 x 12000 page is shrunk
band by band, never held whole), and decodes JPEGs with DCT scaling on its own
threads. Pillow still identifies every source and reads its header first, so the
bomb bounds of :mod:`visus.limits` are checked before libvips sees a byte; libvips only
ever decodes what Pillow already called a PNG or a JPEG, through that one loader
named explicitly (no format sniffing).

On first use the engine is locked down for untrusted input: libvips's untrusted
operations are blocked and so is every loader but PNG and JPEG (a ``.v``, matrix,
CSV, FITS, SVG or TIFF file can never be decoded here, whatever it claims to be);
the operation cache is off (no source outlives its call) and the thread pool is sized
for a small server. Decoding is sequential and fails on truncation, like Pillow.

Example:
    >>> import io
    >>> from PIL import Image
    >>> buf = io.BytesIO(); Image.new("RGB", (400, 200), "red").save(buf, "PNG")
    >>> shrink(buf.getvalue(), "PNG", (400, 200), (100, 50)).size
    (100, 50)
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path
from types import ModuleType
from xml.sax.saxutils import escape

from PIL import Image

__all__ = ["engine", "jpeg_shrink", "png", "shrink", "svg_engine"]

#: Loaders libvips may run: the ones Pillow identified for us (their buffer variants).
ALLOWED_LOADERS = ("VipsForeignLoadPng", "VipsForeignLoadJpeg")
# libvips's own threads per pipeline: a couple are what a small server can spare
# (requests run side by side), and more gain little on a thumbnail.
_MAX_THREADS = 4
_MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}
_MISSING = (
    "visus decodes large PNG and JPEG images with libvips, which it cannot load here "
    "({error}); pyvips and pyvips-binary are core dependencies of visus: reinstall "
    "them with `pip install --force-reinstall 'pyvips>=3,<4' 'pyvips-binary>=8.16,<9'`"
)


@functools.cache
def engine() -> ModuleType:
    """pyvips, configured for untrusted input (see the module docstring), once per process.

    Raises :class:`ImportError` with the fix when pyvips or its libvips cannot load.
    """
    try:
        import pyvips
    except (ImportError, OSError) as e:
        raise ImportError(_MISSING.format(error=f"{type(e).__name__}: {e}")) from e
    pyvips.block_untrusted_set(True)
    pyvips.operation_block_set("VipsForeignLoad", True)
    for loader in ALLOWED_LOADERS:
        pyvips.operation_block_set(loader, False)
    # Every source is decoded once: a cache would only keep its buffers alive.
    pyvips.cache_set_max(0)
    pyvips.cache_set_max_mem(0)
    pyvips.cache_set_max_files(0)
    if "VIPS_CONCURRENCY" not in os.environ:
        pyvips.concurrency_set(min(_MAX_THREADS, os.cpu_count() or 1))
    module: ModuleType = pyvips
    return module


def _isolate_fonts() -> None:
    """Point fontconfig (which librsvg's text goes through) at visus's fonts alone.

    A private ``fonts.conf`` lists only the shipped DejaVu and the Noto fallback
    packages, maps the generic families to DejaVu and appends DejaVu Sans to every
    request (so an unknown family never picks an arbitrary font); it and fontconfig's
    cache live in :func:`_font_home`. Must run before fontconfig starts in
    this process: it reads ``FONTCONFIG_FILE`` once.
    """
    from visus.media._fonts import fallback_font_paths, font_dir

    dirs = [str(font_dir())]
    dirs += sorted({str(Path(p).parent) for p in fallback_font_paths()} - set(dirs))
    generic = {
        "sans-serif": "DejaVu Sans",
        "serif": "DejaVu Serif",
        "monospace": "DejaVu Sans Mono",
        "cursive": "DejaVu Sans",
        "fantasy": "DejaVu Sans",
        "system-ui": "DejaVu Sans",
    }
    body = [f"  <dir>{escape(d)}</dir>" for d in dirs]
    body += [
        f"  <alias><family>{g}</family><prefer><family>{f}</family></prefer></alias>"
        for g, f in generic.items()
    ]
    body.append(
        '  <match target="pattern"><edit name="family" mode="append_last">'
        "<string>DejaVu Sans</string></edit></match>"
    )
    home = _font_home("\n".join(body))
    lines = ["<?xml version='1.0'?>", "<fontconfig>", *body]
    lines += [f"  <cachedir>{escape(str(home / 'cache'))}</cachedir>", "</fontconfig>"]
    conf = home / "fonts.conf"
    # Written whole under a temporary name and renamed: workers starting at once
    # never read half a file.
    part = home / f"fonts.conf.{os.getpid()}"
    part.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(part, conf)
    os.environ["FONTCONFIG_FILE"] = str(conf)


def _font_home(config: str) -> Path:
    """Where the private ``fonts.conf`` and fontconfig's cache live.

    One folder per configuration under the user's cache directory, shared by every
    worker: fontconfig scans the fonts once per machine, not once per worker start,
    and a killed worker (the render budget's SIGKILL) leaves nothing behind in
    ``/tmp``. A read-only cache directory falls back to a private temporary one,
    removed at exit.
    """
    import hashlib

    from platformdirs import user_cache_dir

    key = hashlib.sha256(config.encode()).hexdigest()[:16]
    home = Path(user_cache_dir("visus")) / f"fontconfig-{key}"
    try:
        home.mkdir(parents=True, exist_ok=True)
        probe = home / f".probe.{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError:
        home = Path(tempfile.mkdtemp(prefix="visus-fontconfig-"))
        atexit.register(shutil.rmtree, home, True)
    return home


@functools.cache
def svg_engine() -> ModuleType:
    """:func:`engine` with librsvg's SVG loader allowed, text drawn with visus's fonts.

    For the render worker (:mod:`visus.media._worker`), where SVG documents arrive
    cleaned by :mod:`visus.media.svg` (no outside reference left; a document loaded
    from memory has no base file, so librsvg could not read a file anyway) and the
    render runs under the time and memory budget. Call it before anything in the
    process starts fontconfig.
    """
    _isolate_fonts()
    vips = engine()
    vips.operation_block_set("VipsForeignLoadSvg", False)
    return vips


def jpeg_shrink(raw: tuple[int, int], size: tuple[int, int]) -> int:
    """The largest DCT scale (1, 2, 4, 8) that keeps both sides at least ``size``."""
    for s in (8, 4, 2):
        if raw[0] // s >= size[0] and raw[1] // s >= size[1]:
            return s
    return 1


def shrink(
    data: bytes,
    fmt: str,
    raw: tuple[int, int],
    size: tuple[int, int],
    *,
    swapped: bool = False,
) -> Image.Image:
    """``data`` (a PNG or JPEG of ``raw`` stored size) decoded, oriented and resampled
    to ``size`` (the oriented target) with Lanczos; "L", "LA", "RGB" or "RGBA".
    ``swapped``: the EXIF orientation turns the image a quarter (stored axes differ).

    Raises ``pyvips.Error`` (the caller's :func:`~visus.media._guard.translated`
    turns it into :class:`~visus.errors.UndecodableError`) on broken or truncated data.
    """
    vips = engine()
    if fmt == "PNG":
        im = vips.Image.pngload_buffer(data, access="sequential", fail_on="truncated")
    else:
        # Orientation is applied after the resample: compare in stored axes.
        stored = (size[1], size[0]) if swapped else size
        im = vips.Image.jpegload_buffer(
            data,
            access="sequential",
            fail_on="truncated",
            shrink=jpeg_shrink(raw, stored),
        )
    # thumbnail_image resamples with Lanczos 3 (alpha premultiplied) and applies the
    # EXIF orientation; size is the oriented one.
    out = im.thumbnail_image(size[0], height=size[1], size="force")
    if out.format != "uchar":
        out = out.cast("uchar")
    mode = _MODES[out.bands]
    return Image.frombytes(mode, (out.width, out.height), out.write_to_memory())


def png(im: Image.Image) -> bytes:
    """``im`` ("RGB" or "RGBA") as a PNG by libvips: the same pixels Pillow would write
    (PNG is lossless), at zlib level 6 like Pillow's default, without metadata, in
    about a quarter of Pillow's time (measured on a 1429 x 804 screenshot: 19 ms, 72 ms).

    Example:
        >>> from PIL import Image
        >>> data = png(Image.new("RGBA", (3, 2), (1, 2, 3, 4)))
        >>> import io; Image.open(io.BytesIO(data)).getpixel((0, 0))
        (1, 2, 3, 4)
    """
    bands = {"RGB": 3, "RGBA": 4}[im.mode]
    vips = engine()
    out = vips.Image.new_from_memory(im.tobytes(), im.width, im.height, bands, "uchar")
    data: bytes = out.pngsave_buffer(compression=6, keep="none")
    return data
