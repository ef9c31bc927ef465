"""Where one image differs from another of the same size, exactly, and those areas cut out.

A screen agent's next screenshot often differs from the last only where the user typed
or a clock ticked. :func:`changed_regions` compares two encoded images pixel by pixel,
with no threshold (``python -m benchmarks nearsame``: a changed digit moves fewer pixels
than a caret blink, so any tolerance hides changes a model must see), groups the changed
pixels into at most :data:`visus.limits.CHANGES_MAX_REGIONS` rectangles with a margin of
context, and returns each rectangle of the new image as a lossless PNG. Pasting the crops
onto the old image at their regions gives the new image, every pixel of it.

Both images are decoded here, in this process, under a reservation of the process's
memory budget and within :data:`visus.limits.CHANGES_MAX_PIXELS`: they are images
visus already fitted for a model (a few megapixels), never a source.

Example:
    >>> import io
    >>> from PIL import Image, ImageDraw
    >>> def png(text: str) -> bytes:
    ...     im = Image.new("RGB", (400, 300), "white")
    ...     ImageDraw.Draw(im).text((200, 150), text, fill="black")
    ...     buf = io.BytesIO(); im.save(buf, "PNG"); return buf.getvalue()
    >>> found = changed_regions(png("12:41"), png("12:42"))
    >>> [r.as_list() for r in found.regions]
    [[184, 144, 264, 168]]
    >>> changed_regions(png("a"), png("a")) is None  # nothing changed: nothing to cut
    True
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from PIL import Image, ImageChops

from visus import limits
from visus.budget import MEMORY
from visus.errors import TooLargeError, UnsupportedTypeError
from visus.media import raster
from visus.media._guard import translated
from visus.media.types import Region

__all__ = ["Changes", "changed_regions"]

#: Changed pixels are first found per square cell of this many pixels a side.
_CELL = 8


@dataclass(frozen=True, slots=True)
class Changes:
    """How a new image differs from a base of the same ``width`` x ``height``.

    ``regions`` (in both images' pixels, right and bottom exclusive) hold every pixel that
    differs, with a margin; ``crops`` are those regions of the new image as PNG, in order.
    ``share`` is the regions' area over the whole image's.
    """

    width: int
    height: int
    regions: tuple[Region, ...]
    crops: tuple[bytes, ...]

    @property
    def share(self) -> float:
        return sum(r.width * r.height for r in self.regions) / (self.width * self.height)


def changed_regions(
    base: bytes,
    new: bytes,
    *,
    max_share: float = limits.CHANGES_MAX_SHARE,
    max_regions: int = limits.CHANGES_MAX_REGIONS,
    margin: tuple[int, int] = (limits.CHANGES_MARGIN_X_PX, limits.CHANGES_MARGIN_Y_PX),
) -> Changes | None:
    """The areas where ``new`` differs from ``base``, cut out of ``new``; ``None`` when
    there is nothing to gain: the images differ in size, are the same pixels, or the
    areas would cover more than ``max_share`` of the image.

    Raises :class:`~visus.errors.MediaError` for bytes that are no image, or images
    past :data:`~visus.limits.CHANGES_MAX_PIXELS`.
    """
    with translated("image"):
        a, b = _open(base), _open(new)
        if a.size != b.size:
            return None
        w, h = a.size
        # Both decoded frames, their difference and its masks are held at once.
        with MEMORY.reserve(w * h * 4 * 4, what=f"comparing two {w} x {h} images"):
            mode = "RGBA" if "A" in a.getbands() or "A" in b.getbands() else "RGB"
            a, b = a.convert(mode), b.convert(mode)
            cells = _changed_cells(a, b)
            if not cells:
                return None
            total = -(-w // _CELL) * -(-h // _CELL)
            if len(cells) > max_share * total:  # a page load: no need to group anything
                return None
            boxes = _boxes(cells, w, h, margin, max_regions)
            if sum(_area(box) for box in boxes) > max_share * w * h:
                return None
            crops = tuple(_png(b.crop(box)) for box in boxes)
            return Changes(w, h, tuple(Region(*box) for box in boxes), crops)


def _open(data: bytes) -> Image.Image:
    im = raster.identify(data)
    if im is None:
        raise UnsupportedTypeError("not a raster image Pillow can decode")
    header = raster.read_header(im)
    if header.width * header.height > limits.CHANGES_MAX_PIXELS:
        raise TooLargeError(
            f"an image of {header.width} x {header.height} is past the "
            f"{limits.CHANGES_MAX_PIXELS:,} pixels two images are compared at "
            "(limits.CHANGES_MAX_PIXELS)"
        )
    im.load()
    return raster.normalise(im)


def _changed_cells(a: Image.Image, b: Image.Image) -> list[tuple[int, int]]:
    """The (column, row) of every cell holding at least one pixel that differs at all."""
    delta = ImageChops.difference(a, b)
    bands = delta.split()
    mask = bands[0]
    for band in bands[1:]:
        mask = ImageChops.lighter(mask, band)
    if mask.getbbox() is None:
        return []
    # Any difference is 255; a cell's box average of one such pixel among 64 is 4, never 0.
    mask = mask.point(lambda v: 255 if v else 0).reduce(_CELL)
    columns = mask.width
    return [(i % columns, i // columns) for i, v in enumerate(mask.tobytes()) if v]


def _boxes(
    cells: list[tuple[int, int]], width: int, height: int, margin: tuple[int, int], most: int
) -> list[tuple[int, int, int, int]]:
    """Pixel boxes (with ``margin``) around groups of nearby cells: at most ``most``,
    none overlapping, top to bottom."""
    boxes = [_pad(group, width, height, margin) for group in _groups(cells)]
    boxes = _merge_overlapping(boxes)
    while len(boxes) > most:
        # Join the two whose union adds the least area.
        best: tuple[int, int, int] | None = None
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                added = _area(_union(boxes[i], boxes[j])) - _area(boxes[i]) - _area(boxes[j])
                if best is None or added < best[0]:
                    best = (added, i, j)
        assert best is not None
        _, i, j = best
        joined = _union(boxes[i], boxes[j])
        boxes = [b for k, b in enumerate(boxes) if k not in (i, j)] + [joined]
        boxes = _merge_overlapping(boxes)
    return sorted(boxes, key=lambda b: (b[1], b[0]))


def _groups(cells: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Cells that touch (8-neighbours) or lie one cell apart, grouped."""
    left = set(cells)
    groups: list[list[tuple[int, int]]] = []
    while left:
        seed = left.pop()
        group, todo = [seed], [seed]
        while todo:
            x, y = todo.pop()
            for dx in (-2, -1, 0, 1, 2):
                for dy in (-2, -1, 0, 1, 2):
                    near = (x + dx, y + dy)
                    if near in left:
                        left.remove(near)
                        group.append(near)
                        todo.append(near)
        groups.append(group)
    return groups


def _pad(
    group: list[tuple[int, int]], width: int, height: int, margin: tuple[int, int]
) -> tuple[int, int, int, int]:
    xs, ys = [c[0] for c in group], [c[1] for c in group]
    mx, my = margin
    return (
        max(0, min(xs) * _CELL - mx),
        max(0, min(ys) * _CELL - my),
        min(width, (max(xs) + 1) * _CELL + mx),
        min(height, (max(ys) + 1) * _CELL + my),
    )


def _area(box: tuple[int, int, int, int]) -> int:
    return (box[2] - box[0]) * (box[3] - box[1])


def _union(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


def _overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _merge_overlapping(
    boxes: list[tuple[int, int, int, int]],
) -> list[tuple[int, int, int, int]]:
    """Boxes that overlap joined into one, until none do (crops never show a pixel twice)."""
    boxes = list(boxes)
    merged = True
    while merged:
        merged = False
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                if _overlap(boxes[i], boxes[j]):
                    boxes[i] = _union(boxes[i], boxes[j])
                    del boxes[j]
                    merged = True
                    break
            if merged:
                break
    return boxes


def _png(im: Image.Image) -> bytes:
    # Lossless, so the crop is exactly the new image's pixels; the same bytes every time.
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()
