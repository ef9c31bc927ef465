"""Only what changed: an image sent as its changed areas while its base is in the request.

An :class:`~visus.record.messages.ImagePart` whose ``changed_from`` is set equals an
earlier image of the record (``base``) except in a few crops (found exactly, pixel by
pixel, when the image was stored: :func:`visus.media.changes.changed_regions`). When
that base is sent earlier in the same request as its own pixels, the image goes as a
one-line note and its crops, which cost a fraction of the tokens; otherwise (the base
left the live window, was elided or re-fitted, the wire cannot carry crops, the crops
would cost the model as much as the image) it goes whole. A crop sent stands for the
whole image: a later image changed from it may be cut against it too.

The decision depends on the request alone: the same request lowers to the same bytes.

Example:
    >>> note = crop_note(1356, 847, "ab" * 32, ((10, 20, 110, 60),))
    >>> for half in note.split(" except "):
    ...     print(half)
    [1356x847: the same as view("sha256:abababababababab")
    region [10,20,110,60], whose pixels follow]
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from typing import TypeAlias

from visus import limits
from visus.models.spec import ModelSpec
from visus.models.tokens import image_tokens, pick_detail
from visus.record.messages import ChangedFrom, Crop, ImagePart, TextPart
from visus.wire._prepared import WireImage, WirePart

__all__ = ["Position", "crop_note", "crops"]

#: Where a part sits in a request: (message, part).
Position: TypeAlias = tuple[int, int]


def crop_note(
    width: int, height: int, base: str, regions: Sequence[Sequence[int]], *, ref: str = ""
) -> str:
    """The note that precedes an image's crops: which image the rest of it equals, and
    where each crop goes (in the image's pixels). ``ref`` names the base another way than
    ``view("sha256:...")`` (the proxy's clients may have no view tool)."""
    short = f"sha256:{base[: limits.DESCRIPTOR_DIGEST_CHARS]}"
    boxes = ", ".join("[" + ",".join(str(v) for v in r) + "]" for r in regions)
    which = (
        f"region {boxes}, whose pixels follow"
        if len(regions) == 1
        else (f"regions {boxes}, whose pixels follow in that order")
    )
    named = ref or f'view("{short}")'
    return f"[{width}x{height}: the same as {named} except {which}]"


def crops(
    images: Sequence[tuple[Position, ImagePart]],
    sent: Mapping[Position, WirePart],
    *,
    spec: ModelSpec,
    media_types: frozenset[str],
    room: int,
    read: Callable[[str], bytes | None],
) -> dict[Position, tuple[WirePart, ...]]:
    """The images of ``images`` (request order) to send as their crops, each as the parts
    that replace it: the note, then the crops.

    ``sent`` is what each image resolved to; only an image sent as its own bytes counts as
    seen. ``room`` is how many more images the request may carry (a crop past the first
    adds one), ``read`` a blob's bytes by digest (None: unreadable, the image goes whole).
    """
    seen: set[str] = set()
    out: dict[Position, tuple[WirePart, ...]] = {}
    for at, part in images:
        wire = sent.get(at)
        if not isinstance(wire, WireImage) or wire.digest != part.digest:
            continue  # not sent, or re-fitted: other pixels than the crops were cut from
        changed = part.changed_from
        if changed is not None and changed.base in seen and len(changed.crops) - 1 <= room:
            pieces = _pieces(part, changed, spec, media_types, read)
            if pieces is not None:
                out[at] = pieces
                room -= len(changed.crops) - 1
        seen.add(part.digest)
    return out


def _pays(spec: ModelSpec, part: ImagePart, cut: Sequence[Crop]) -> bool:
    """Whether the crops cost the model fewer tokens than the image (a model that bills
    each image the same, as Gemini 3 does, gains nothing from them)."""
    whole = image_tokens(spec, part.width, part.height)
    return sum(image_tokens(spec, c.width, c.height) for c in cut) < whole


def _fits(part: ImagePart, crop: Crop) -> bool:
    x0, y0, x1, y1 = crop.region
    return 0 <= x0 < x1 <= part.width and 0 <= y0 < y1 <= part.height


def _pieces(
    part: ImagePart,
    changed: ChangedFrom,
    spec: ModelSpec,
    media_types: frozenset[str],
    read: Callable[[str], bytes | None],
) -> tuple[WirePart, ...] | None:
    cut = changed.crops
    if not all(_fits(part, c) and c.media_type in media_types for c in cut):
        return None
    if not _pays(spec, part, cut):
        return None
    images: list[WirePart] = []
    for c in cut:
        data = read(c.digest)
        if data is None:
            return None
        images.append(
            WireImage(
                data=base64.b64encode(data).decode("ascii"),
                size=len(data),
                media_type=c.media_type,
                width=c.width,
                height=c.height,
                digest=c.digest,
                origin=part.origin,
                detail=pick_detail(spec, c.width, c.height),
            )
        )
    note = crop_note(part.width, part.height, changed.base, [c.region for c in cut])
    return (TextPart(note, note=True), *images)
