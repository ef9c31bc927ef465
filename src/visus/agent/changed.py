"""Only what changed: a new image compared with the newest of its size in the record.

When a tool's image (a ``view``, an MCP tool's screenshot) differs from the newest
earlier image of the same size only in a few small areas, those areas are cut out
exactly (:func:`visus.media.changes.changed_regions`, no threshold), stored as blobs of
their own and named in the image part's ``changed_from``. The part stays the whole
image: its digest, its descriptor and ``view("sha256:...")`` are the same as without.
Whether a request carries the crops or the whole image is lowering's choice, per
request (:mod:`visus.wire._crops`): the crops only while the base is sent before it.

Example:
    >>> from visus.record.blobs import MemoryBlobStore
    >>> from visus.record.messages import ImagePart, PerceptionOrigin
    >>> part = ImagePart("ab" * 32, "image/png", 10, 64, 64, PerceptionOrigin("s.png"))
    >>> with_changes(part, b"...", (), MemoryBlobStore()) is part  # nothing to compare with
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from visus.errors import VisusError
from visus.media.changes import changed_regions
from visus.record.blobs import BlobStore
from visus.record.messages import ChangedFrom, Crop, ImagePart, Message

__all__ = ["with_changes"]


def _newest_of_size(record: Sequence[Message], width: int, height: int) -> ImagePart | None:
    for message in reversed(record):
        if message.kind == "assistant":
            continue
        for part in reversed(message.parts):
            if isinstance(part, ImagePart) and (part.width, part.height) == (width, height):
                return part
    return None


def with_changes(
    image: ImagePart, data: bytes, record: Sequence[Message], blobs: BlobStore
) -> ImagePart:
    """``image`` (whose bytes are ``data``) with ``changed_from`` set when it differs from
    the newest image of its size in ``record`` only in small areas; else ``image``.

    Never fails: an unreadable base or an image media cannot compare is sent whole.
    """
    base = _newest_of_size(record, image.width, image.height)
    if base is None or base.digest == image.digest:
        return image  # nothing to compare with, or the same bytes (a repeat, already a note)
    try:
        found = changed_regions(blobs.get(base.digest), data)
        if found is None:
            return image
        crops = tuple(
            Crop(
                blobs.put(crop, "image/png"),
                "image/png",
                len(crop),
                (r.x0, r.y0, r.x1, r.y1),
            )
            for r, crop in zip(found.regions, found.crops, strict=True)
        )
    except VisusError:
        return image
    return replace(image, changed_from=ChangedFrom(base.digest, crops))
