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

__all__ = ["DEFAULT_MEDIA_TYPES", "Fitted", "Probe", "Profile", "SourceKind"]

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
class Fitted:
    """An encoded image inside a profile, with what is known of its source.

    ``page``/``page_count`` are set for PDFs, ``frame_count`` for rasters (1 when
    still), ``line_start``/``line_end``/``line_total`` (1-based, inclusive) for text.
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
