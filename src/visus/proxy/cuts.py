"""Only what changed, in the proxy: a screenshot that differs from the one before it only
in small areas goes as a note and those areas' crops.

The proxy sees a client's whole history at every step. Of the images a request sends
(after retention, fitting and the byte budget: :func:`visus.proxy.slots.plan`), each one
is compared, as it would be sent, with the latest earlier one of the same size that is
sent too (:meth:`~visus.proxy.edit.Edit.cut`: exactly, no threshold, once per pair); when
they differ only in a few small areas, it is sent as a one-line note naming that image
and the crops, where its protocol can place them (``Found.can_place``), the crops cost the
model fewer tokens and the provider's image cap leaves room. A crop sent stands for its
image: the next screenshot is cut against it. Decided from the request alone, so a
re-sent history goes out as the same bytes.

Example:
    >>> from visus.wire.anthropic import RULES
    >>> edit = Edit.for_model("claude-sonnet-4-6", RULES)
    >>> changed_only(edit, [])
    {}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from visus import limits
from visus.proxy.edit import Edit, Fitted
from visus.wire._crops import crop_note
from visus.wire._prepare import max_images


class Shot(Protocol):
    """What this module reads of an image found in a body (``slots.Found``: slots
    imports this module, so it is not imported here)."""

    @property
    def b64(self) -> str | None: ...

    @property
    def can_place(self) -> bool: ...


__all__ = ["Shot", "changed_only"]


def _room(edit: Edit, count: int) -> int:
    """How many more images the request may carry (crops past the first add one each)."""
    room = max_images(edit.spec, edit.rules) - count
    if edit.rules.many_images_rule and count <= limits.ANTHROPIC_MANY_IMAGES:
        # The images were fitted for a request of `count`: crops must not pass the rule.
        room = min(room, limits.ANTHROPIC_MANY_IMAGES - count)
    return room


def changed_only(
    edit: Edit, sent: Sequence[tuple[Shot, Fitted | None]]
) -> dict[int, tuple[str, list[Fitted]]]:
    """The images of ``sent`` (request order) to send as their changed areas, by index:
    the note and the crops that replace each."""
    if not edit.rules.crops:
        return {}
    room = _room(edit, len(sent))
    latest: dict[tuple[int, int], tuple[str, str]] = {}  # size -> (base64 as sent, digest)
    out: dict[int, tuple[str, list[Fitted]]] = {}
    for i, (image, fitted) in enumerate(sent):
        b64 = fitted.b64 if fitted is not None else image.b64
        known = edit.known(image.b64) if image.b64 is not None else None
        if b64 is None or known is None:
            continue
        size = (fitted.width, fitted.height) if fitted is not None else (known.width, known.height)
        base = latest.get(size)
        latest[size] = (b64, known.digest)
        if base is None or base[0] == b64 or not image.can_place:
            continue
        cut = edit.cut(base[0], b64)
        if cut is None or len(cut.crops) - 1 > room:
            continue
        dims = [(r[2] - r[0], r[3] - r[1]) for r in cut.regions]
        if sum(edit.tokens(w, h) for w, h in dims) >= edit.tokens(*size):
            continue  # a model that bills each image alike gains nothing from crops
        ref = f"the image sha256:{base[1][:12]} before it"
        note = crop_note(size[0], size[1], base[1], cut.regions, ref=ref)
        crops = [Fitted(c, "image/png", w, h) for c, (w, h) in zip(cut.crops, dims, strict=True)]
        out[i] = (note, crops)
        room -= len(cut.crops) - 1
    return out
