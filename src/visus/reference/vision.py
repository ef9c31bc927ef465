"""What the reference model perceives in one image: words, where they are, their ink,
and the dominant colour of each of nine regions (so an image without text is described
too).

OCR is rapidocr 3 on onnxruntime; its wheel ships its ONNX models (PP-OCRv6 small
detection and recognition), so nothing is ever downloaded. Each OCR line is split on
spaces into words; a word's box is the line's box cut horizontally in proportion to
character counts (spaces included), which is exact for monospaced text and close for
proportional fonts.

The ink colour of a word is measured inside its box: the background is the most
common colour there (coarsely quantised, so anti-aliasing noise does not split
it); ink pixels are those farther than a threshold from the background; of those,
the half farthest from the background (stroke cores, not the blended edges) give
the median colour. That is the text's colour, not the colour behind it. It is
named from :data:`visus.reference.palette.PALETTE` by nearest CIELAB distance.

Example:
    >>> from visus.reference.grid import make_grid
    >>> png, expected = make_grid(1, 1, seed=3)
    >>> seen = perceive(png)
    >>> seen.words[0].text == expected[0][0]
    True
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from PIL import Image, ImageOps

from visus import limits
from visus.errors import UndecodableError
from visus.reference.palette import nearest_colour, to_hex

__all__ = ["REGION_NAMES", "SeenImage", "SeenRegion", "SeenWord", "decode_size", "perceive"]

_INK_THRESHOLD = 60.0  # RGB distance from the background that counts as ink
_MIN_SCORE = 0.5  # OCR confidence below which a line is noise
_MIN_OCR_SIDE = 32  # pixels: thinner images are padded before OCR
_MAX_OCR_ASPECT = 4  # and so are images more elongated than this
_OCR_MAX_SIDE = 2000  # RapidOCR's own max_side_len: larger images are shrunk to it


@dataclass(frozen=True, slots=True)
class SeenWord:
    """One word: centre ``x``, ``y`` in 0..1 of the image; ``box`` in pixels (x0, y0, x1, y1)."""

    text: str
    x: float
    y: float
    box: tuple[int, int, int, int]
    color: str
    hex: str


@dataclass(frozen=True, slots=True)
class SeenRegion:
    """The dominant colour of one of nine regions (a 3x3 grid: ``top-left`` .. ``bottom-right``)."""

    name: str
    color: str
    hex: str


@dataclass(frozen=True, slots=True)
class SeenImage:
    width: int
    height: int
    words: tuple[SeenWord, ...]
    #: Dominant colours per region, for any image, text or not.
    regions: tuple[SeenRegion, ...] = ()


REGION_NAMES = (
    "top-left", "top", "top-right",
    "left", "centre", "right",
    "bottom-left", "bottom", "bottom-right",
)  # fmt: skip
_REGION_SAMPLES = 64  # pixels a side sampled per region: enough for a dominant colour


def _regions(arr: NDArray[np.uint8]) -> tuple[SeenRegion, ...]:
    """Nine regions' dominant colours: the most common colour after coarse quantising
    (so noise and anti-aliasing do not split it), named from the palette."""
    height, width = arr.shape[0], arr.shape[1]
    out: list[SeenRegion] = []
    for i, name in enumerate(REGION_NAMES):
        row, col = divmod(i, 3)
        y0, y1 = row * height // 3, max((row + 1) * height // 3, row * height // 3 + 1)
        x0, x1 = col * width // 3, max((col + 1) * width // 3, col * width // 3 + 1)
        patch = arr[y0:y1, x0:x1]
        step_y = max(1, patch.shape[0] // _REGION_SAMPLES)
        step_x = max(1, patch.shape[1] // _REGION_SAMPLES)
        pixels = patch[::step_y, ::step_x].reshape(-1, 3).astype(np.int32)
        keys = (pixels[:, 0] >> 4) << 8 | (pixels[:, 1] >> 4) << 4 | (pixels[:, 2] >> 4)
        values, counts = np.unique(keys, return_counts=True)
        top = pixels[keys == values[int(np.argmax(counts))]]
        colour = tuple(float(v) for v in np.median(top, axis=0))
        out.append(SeenRegion(name, nearest_colour(colour), to_hex(colour)))
    return tuple(out)


_engine: Any = None
_engine_lock = threading.Lock()
# onnxruntime sessions are thread-safe, but RapidOCR mutates per-call settings on
# itself; one call at a time keeps results deterministic (CI has two cores anyway).
_call_lock = threading.Lock()


def ocr_ready() -> bool:
    """Whether this process has loaded the OCR engine (its first use takes seconds)."""
    return _engine is not None


def load_ocr() -> None:
    """Load the OCR engine now, its models too, so a caller can say so instead of
    sitting silent (RapidOCR reads its models on first use, seconds later).

    Raises ``ImportError`` with the install hint when the ``reference`` extra is missing.
    """
    engine = _ocr_engine()
    with _call_lock:
        for name in ("_load_det_model", "_load_rec_model"):
            load = getattr(engine, name, None)
            if callable(load):
                load()


def _ocr_engine() -> Any:
    global _engine
    if _engine is None:
        with _engine_lock:
            if _engine is None:
                try:
                    from rapidocr import RapidOCR
                except ImportError as e:  # pragma: no cover - depends on the install
                    raise ImportError(
                        "the reference model needs OCR: "
                        "pip install -e '.[reference]' in the visus checkout"
                    ) from e
                # Its own logger says "info" on every call; a server log wants errors only.
                _engine = RapidOCR(params={"Global.log_level": "error", **_thread_params()})
    return _engine


#: onnxruntime threads per OCR call (``VISUS_REFERENCE_OCR_THREADS``); unset: its own
#: default, one per core.
OCR_THREADS_ENV = "VISUS_REFERENCE_OCR_THREADS"


def _thread_params(env: Mapping[str, str] = os.environ) -> dict[str, int]:
    """RapidOCR's onnxruntime thread settings from :data:`OCR_THREADS_ENV`.

    Where the cores are shared with others doing the same (the suite's workers, a
    machine of replicas), one thread reads the same words for about a third less CPU
    (five grids, on the loaded 2-core test machine: 7.3 s, against 11.4 s on two).

    Example:
        >>> _thread_params({})
        {}
        >>> sorted(_thread_params({"VISUS_REFERENCE_OCR_THREADS": "1"}).values())
        [1, 1]
    """
    raw = env.get(OCR_THREADS_ENV, "").strip()
    if not raw.isdigit() or int(raw) < 1:
        return {}
    key = "EngineConfig.onnxruntime"
    return {f"{key}.intra_op_num_threads": int(raw), f"{key}.inter_op_num_threads": int(raw)}


_DETECT_DEFAULT: tuple[object, object] | None = None


def _detect_at(engine: Any, side: int) -> None:
    """Find text lines in a large image at :data:`~visus.limits.REFERENCE_OCR_DETECT_SIDE`.

    RapidOCR's detector otherwise works at the image's own size (up to its 2000 px), the
    costliest step after reading the words, and no better at finding lines of ordinary
    text; the words are still read from the full working image. A smaller image keeps
    the detector's own setting, which enlarges small ones (thin strips, tiny crops).
    Called under ``_call_lock``: the detector reads these two settings at each call.
    """
    global _DETECT_DEFAULT
    det = _detector(engine)
    if det is None or not hasattr(det, "limit_type"):
        return  # another RapidOCR layout: its defaults, slower but the same words
    if _DETECT_DEFAULT is None:
        _DETECT_DEFAULT = (det.limit_type, det.limit_side_len)
    large = side > limits.REFERENCE_OCR_DETECT_SIDE * 5 // 4
    det.limit_type, det.limit_side_len = (
        ("max", limits.REFERENCE_OCR_DETECT_SIDE) if large else _DETECT_DEFAULT
    )


def _detector(engine: Any) -> Any:
    """RapidOCR's text detector, loaded now (it loads its model on first use)."""
    load = getattr(engine, "_load_det_model", None)
    return load() if callable(load) else getattr(engine, "text_det", None)


def _open_rgb(data: bytes) -> Image.Image:
    try:
        with Image.open(io.BytesIO(data)) as opened:
            opened.seek(0)
            im = ImageOps.exif_transpose(opened)
            if im.mode in {"RGBA", "LA", "P", "PA"}:
                rgba = im.convert("RGBA")
                white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
                return Image.alpha_composite(white, rgba).convert("RGB")
            return im.convert("RGB")
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise UndecodableError(f"not a decodable image: {e}") from e


def decode_size(data: bytes) -> tuple[int, int, str]:
    """Width, height and lowercase format name (``png``, ``jpeg``...) of an image.

    The first frame is decoded in full, so truncated or corrupt data is caught here.
    Raises :class:`~visus.errors.UndecodableError` for bytes that are not an image.
    """
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            return im.width, im.height, (im.format or "").lower()
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise UndecodableError(f"not a decodable image: {e}") from e


def _ink(pixels: NDArray[np.uint8]) -> tuple[float, float, float]:
    flat = pixels.reshape(-1, 3).astype(np.float64)
    quant = (flat // 16).astype(np.int64)
    keys = quant[:, 0] * 256 + quant[:, 1] * 16 + quant[:, 2]
    values, counts = np.unique(keys, return_counts=True)
    bg_key = values[int(np.argmax(counts))]
    background = flat[keys == bg_key].mean(axis=0)
    dist = np.sqrt(((flat - background) ** 2).sum(axis=1))
    ink = flat[dist > _INK_THRESHOLD]
    if len(ink) == 0:
        r, g, b = background
        return float(r), float(g), float(b)
    ink_dist = dist[dist > _INK_THRESHOLD]
    core = ink[ink_dist >= np.median(ink_dist)]
    r, g, b = np.median(core, axis=0)
    return float(r), float(g), float(b)


def _split_line(
    text: str, quad: list[list[float]], width: int, height: int
) -> list[tuple[str, tuple[int, int, int, int]]]:
    xs = [p[0] for p in quad]
    ys = [p[1] for p in quad]
    x0, x1 = max(0.0, min(xs)), min(float(width), max(xs))
    y0, y1 = max(0.0, min(ys)), min(float(height), max(ys))
    n = len(text)
    out: list[tuple[str, tuple[int, int, int, int]]] = []
    pos = 0
    for word in text.split(" "):
        if word:
            a = x0 + (x1 - x0) * pos / n
            b = x0 + (x1 - x0) * (pos + len(word)) / n
            out.append((word, (round(a), round(y0), round(b), round(y1))))
        pos += len(word) + 1
    return out


def _ocr_input(rgb: Image.Image) -> tuple[NDArray[np.uint8], float]:
    """The array RapidOCR gets (BGR) and the scale from image to array coordinates.

    Large images are shrunk to RapidOCR's own working size first. Thin strips are
    padded (right and bottom, with white, so coordinates stay) to a moderate
    aspect ratio: the detector scales the *short* side up to its working size, so
    a 10 x 3000 strip would otherwise become a 736 x 220000 tensor (or, very
    wide, shrink to zero pixels and crash).
    """
    scale = min(1.0, _OCR_MAX_SIDE / max(rgb.width, rgb.height))
    if scale < 1.0:
        size = (max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale)))
        rgb = rgb.resize(size, Image.Resampling.LANCZOS)
    arr = np.asarray(rgb, dtype=np.uint8)
    height, width = arr.shape[0], arr.shape[1]
    short = max(_MIN_OCR_SIDE, max(height, width) // _MAX_OCR_ASPECT)
    pad_h, pad_w = max(0, short - height), max(0, short - width)
    if pad_h or pad_w:
        arr = np.pad(arr, ((0, pad_h), (0, pad_w), (0, 0)), constant_values=255)
    return np.ascontiguousarray(arr[:, :, ::-1]), scale


def perceive(data: bytes) -> SeenImage:
    """OCR ``data`` (any format Pillow decodes) into words with centres and ink colours.

    Words come in reading order (top to bottom, then left to right within a line).
    """
    rgb = _open_rgb(data)
    arr = np.asarray(rgb, dtype=np.uint8)
    height, width = arr.shape[0], arr.shape[1]
    regions = _regions(arr)
    if bool((arr == arr[0, 0]).all()):
        # One flat colour: no text.
        return SeenImage(width=width, height=height, words=(), regions=regions)
    ocr_arr, scale = _ocr_input(rgb)
    with _call_lock:
        engine = _ocr_engine()
        _detect_at(engine, max(ocr_arr.shape[0], ocr_arr.shape[1]))
        result = engine(ocr_arr, use_cls=False)
    found = zip(
        result.boxes if result.boxes is not None else (),
        result.txts or (),
        result.scores or (),
        strict=False,
    )
    lines: list[tuple[list[list[float]], str]] = []
    for quad, text, score in found:
        if float(score) >= _MIN_SCORE and str(text).strip():
            points = [[float(v) / scale for v in p] for p in quad]
            lines.append((points, str(text).strip()))
    lines.sort(key=lambda ln: (round(min(p[1] for p in ln[0]) / 10), min(p[0] for p in ln[0])))
    words: list[SeenWord] = []
    for quad, text in lines:
        for word, box in _split_line(text, quad, width, height):
            x0, y0, x1, y1 = box
            # At least one pixel, even for a box squeezed against the right or bottom edge.
            px, py = min(x0, width - 1), min(y0, height - 1)
            patch = arr[py : max(y1, py + 1), px : max(x1, px + 1)]
            colour = _ink(patch)
            words.append(
                SeenWord(
                    text=word,
                    x=round((x0 + x1) / 2 / width, 4),
                    y=round((y0 + y1) / 2 / height, 4),
                    box=box,
                    color=nearest_colour(colour),
                    hex=to_hex(colour),
                )
            )
    return SeenImage(width=width, height=height, words=tuple(words), regions=regions)
