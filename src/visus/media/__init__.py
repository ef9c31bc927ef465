"""Decode, render and fit any source into an image a model takes.

``media`` is the only package that imports Pillow, pyvips (libvips), pypdfium2 and Pygments.
Every function here raises only :class:`~visus.errors.MediaError` subclasses
(``TooLargeError``, ``UndecodableError``, ``UnsupportedTypeError``) and
:class:`~visus.errors.InvalidInputError`, for any bytes.

Example:
    >>> from visus.media import Profile, load
    >>> claude = Profile(max_edge=1568, max_pixels=1_150_000, max_bytes=5 * 1024 * 1024)
    >>> f = load(b"<svg xmlns='http://www.w3.org/2000/svg' width='4000' height='2000'/>",
    ...          profile=claude)
    >>> (f.source_kind, f.width, f.height, f.source_width)
    ('svg', 1516, 758, 4000)
"""

from __future__ import annotations

from visus.media._fonts import font_path
from visus.media._png import without_unusable_chunks
from visus.media._worker import render_lanes
from visus.media.fitting import classify, target_size
from visus.media.load import fit, load, probe, unchanged
from visus.media.offload import offload
from visus.media.types import DEFAULT_MEDIA_TYPES, Fitted, Probe, Profile, Region, SourceKind

__all__ = [
    "DEFAULT_MEDIA_TYPES",
    "Fitted",
    "Probe",
    "Profile",
    "Region",
    "SourceKind",
    "classify",
    "fit",
    "font_path",
    "load",
    "offload",
    "probe",
    "render_lanes",
    "target_size",
    "unchanged",
    "without_unusable_chunks",
]
