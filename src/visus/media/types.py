"""Values that leave ``media``: a fitting :class:`Profile` and a :class:`Fitted` image.

Example:
    >>> p = Profile(max_edge=1568, max_pixels=1568 * 1568, max_bytes=5 * 1024 * 1024)
    >>> "image/png" in p.media_types
    True
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from visus.errors import InvalidInputError

__all__ = ["DEFAULT_MEDIA_TYPES", "Fitted", "Probe", "Profile", "Region", "SourceKind"]

SourceKind: TypeAlias = Literal["raster", "svg", "text", "pdf"]

DEFAULT_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"})


@dataclass(frozen=True, slots=True)
class Profile:
    """What a target accepts: the fitted image stays inside every bound.

    ``media_types`` lists the encodings the target takes; ``media`` picks among
    them by content (PNG for line art and transparency, JPEG or WebP for photos).
    """

    max_edge: int
    max_pixels: int
    max_bytes: int
    media_types: frozenset[str] = field(default=DEFAULT_MEDIA_TYPES)


@dataclass(frozen=True, slots=True)
class Region:
    """A rectangle of a source in the source's own coordinates: pixels (a PDF page: points,
    as its size is reported), ``x0``/``y0`` the top-left corner, ``x1``/``y1`` the
    bottom-right one, exclusive, so ``[0, 0, width, height]`` is the whole source.

    Example:
        >>> r = Region(100, 50, 900, 450)
        >>> (r.width, r.height, r.as_list())
        (800, 400, [100, 50, 900, 450])
        >>> Region(0, 0, 4000, 10).check(3840, 2160)
        Traceback (most recent call last):
        ...
        visus.errors.InvalidInputError: region [0, 0, 4000, 10] is outside the image, which is \
3840x2160: use 0 <= x0 < x1 <= 3840 and 0 <= y0 < y1 <= 2160
    """

    x0: int
    y0: int
    x1: int
    y1: int

    @property
    def width(self) -> int:
        return self.x1 - self.x0

    @property
    def height(self) -> int:
        return self.y1 - self.y0

    def as_list(self) -> list[int]:
        return [self.x0, self.y0, self.x1, self.y1]

    def check(self, width: int, height: int, what: str = "image") -> None:
        """Raise :class:`InvalidInputError`, naming the source's size, unless the region
        is a non-empty rectangle inside a ``width`` x ``height`` source."""
        size = f"{what}, which is {width}x{height}"
        if self.x1 <= self.x0 or self.y1 <= self.y0:
            raise InvalidInputError(
                f"region {self.as_list()} is empty or inverted (x1 must be greater than x0 "
                f"and y1 greater than y0); the {size}"
            )
        if self.x0 < 0 or self.y0 < 0 or self.x1 > width or self.y1 > height:
            raise InvalidInputError(
                f"region {self.as_list()} is outside the {size}: use 0 <= x0 < x1 <= "
                f"{width} and 0 <= y0 < y1 <= {height}"
            )


@dataclass(frozen=True, slots=True)
class Fitted:
    """An encoded image inside a profile, with what is known of its source.

    ``page``/``page_count`` are set for PDFs, ``frame_count`` for rasters (1 when
    still), ``line_start``/``line_end``/``line_total`` (1-based, inclusive) for text.
    ``region`` is the part of the source shown (``None``: all of it); ``source_width``
    and ``source_height`` stay the whole source's.
    """

    data: bytes
    media_type: str
    width: int
    height: int
    source_width: int
    source_height: int
    source_kind: SourceKind
    page: int | None = None
    page_count: int | None = None
    frame_count: int | None = None
    line_start: int | None = None
    line_end: int | None = None
    line_total: int | None = None
    region: Region | None = None

    @property
    def digest(self) -> str:
        """Lowercase hex sha256 of ``data``."""
        return hashlib.sha256(self.data).hexdigest()

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True, slots=True)
class Probe:
    """What a source is, read from its header without decoding or rendering it.

    ``width``/``height`` are the oriented raster size, the SVG's intrinsic size or
    the first PDF page in points; ``None`` for text. ``media_type`` is the source's
    own (``image/tiff``, ``application/pdf``, ``image/svg+xml``, ``text/plain``).
    """

    kind: SourceKind
    media_type: str
    width: int | None = None
    height: int | None = None
    page_count: int | None = None
    frame_count: int | None = None
    line_total: int | None = None
