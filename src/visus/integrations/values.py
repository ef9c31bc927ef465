"""The values an integration's pipeline passes around: what a tool call saw, which
images a framework's history holds, one request's image tally and counts, and the two
ways a tool's output is an image (a lone ``data:`` URL, raw raster bytes).

:mod:`visus.integrations.core` re-exports each of them; the adapters import them
from there.

Example:
    >>> ViewCall.of({"path": "shot.png"}).origin("ab" * 32).source
    'shot.png'
"""

from __future__ import annotations

import base64
import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from visus import media
from visus.errors import VisusError
from visus.record.messages import ImagePart, Message, PerceptionOrigin, ToolResult
from visus.retention import ImageFate

__all__ = [
    "NO_VIEW",
    "HeldImage",
    "ImageTally",
    "RequestImages",
    "Seen",
    "ToolImage",
    "ViewCall",
    "held_record",
    "image_in_text",
    "raster_type",
]

_DATA_URL = re.compile(r"data:(image/[\w.+-]+);base64,([A-Za-z0-9+/]+={0,2})")


def image_in_text(text: str) -> tuple[bytes, str] | None:
    """(bytes, media type) when a tool's text is nothing but one image ``data:`` URL.

    A hand-written tool's ``f"data:image/png;base64,{b64}"`` is an image the model
    should see, not 100 000 characters of base64. A URL inside other text stays
    text: that text may be a document the model edits (HTML with inline images).

    Example:
        >>> image_in_text("data:image/png;base64,iVBORw0KGgo=")
        (b'\\x89PNG\\r\\n\\x1a\\n', 'image/png')
        >>> image_in_text('<img src="data:image/png;base64,iVBORw0KGgo=">') is None
        True
    """
    found = _DATA_URL.fullmatch(text.strip())
    if found is None:
        return None
    try:
        return base64.b64decode(found.group(2), validate=True), found.group(1)
    except ValueError:
        return None


def raster_type(data: bytes) -> str | None:
    """The media type of bytes a tool returned when they are a raster image, else None.

    Example:
        >>> raster_type(b"just some bytes") is None
        True
    """
    try:
        head = media.probe(data)
    except VisusError:
        return None
    return head.media_type if head.kind == "raster" else None


@dataclass(frozen=True, slots=True)
class ViewCall:
    """The arguments of the ``view`` call that made an image, as a framework recorded
    them: what its descriptor names (``screen.png region 0,0,800,450``), and what a
    later view of the same file is compared with. Empty when no ``view`` made it.

    Example:
        >>> ViewCall.of({"path": "4k.png", "region": [0, 0, 800, 450]})
        ViewCall(source='4k.png', page=None, region=(0, 0, 800, 450))
        >>> ViewCall.of({"path": 3, "page": True, "region": [0, 0, 1]})
        ViewCall(source=None, page=None, region=None)
    """

    source: str | None = None
    page: int | None = None
    region: tuple[int, int, int, int] | None = None

    @classmethod
    def of(cls, args: Mapping[str, Any]) -> ViewCall:
        """The call's arguments as ``view`` took them; a value of the wrong shape (which
        ``view`` refused) is left out."""
        path, page, region = args.get("path"), args.get("page"), args.get("region")
        box = None
        if isinstance(region, list | tuple) and len(region) == 4 and all(map(_is_int, region)):
            box = (int(region[0]), int(region[1]), int(region[2]), int(region[3]))
        return cls(path if isinstance(path, str) else None, page if _is_int(page) else None, box)

    def origin(self, digest: str) -> PerceptionOrigin:
        """The origin of the image this call made (``digest``'s, when no path names it)."""
        source = self.source if self.source is not None else f"sha256:{digest}"
        return PerceptionOrigin(source, page=self.page, region=self.region)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: An image no ``view`` call made (another tool's, a pasted one).
NO_VIEW = ViewCall()


@dataclass(frozen=True, slots=True)
class HeldImage:
    """An image a framework's history holds, as one of its tool calls may name it.

    ``digest`` is the sha256 of the bytes the history holds (computed from them, never
    taken from a name the history gives itself), so a digest reaches only pixels
    the conversation really has. ``turn`` is its turn; ``view`` the ``view`` call
    that produced it, when one did.
    """

    digest: str
    turn: int = 1
    view: ViewCall = NO_VIEW


def held_record(held: Iterable[HeldImage]) -> tuple[Message, ...]:
    """The record a tool call of one conversation reads: its images, in order.

    A view's image keeps the call that made it (so re-viewing the same path can say
    the file changed since); any other is named by its digest.

    Example:
        >>> record = held_record([HeldImage("ab" * 32, 1, ViewCall("screen.png"))])
        >>> record[0].parts[0].origin.source, record[0].turn
        ('screen.png', 1)
    """
    out: list[Message] = []
    for h in held:
        part = ImagePart(h.digest, "image/png", 0, 0, 0, h.view.origin(h.digest))
        out.append(ToolResult("", "view" if h.view.source else "", (part,), turn=h.turn))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Seen:
    """What one tool call produced: the text the model reads, and the image if any.

    ``image`` is the record part (digest, size, origin: the call that re-views it);
    ``data`` its fitted bytes; ``is_error`` marks a refusal or a bad argument.
    """

    text: str
    image: ImagePart | None = None
    data: bytes = b""
    is_error: bool = False

    @property
    def tagged_digest(self) -> str:
        """``sha256:<hex>`` of the image, or ``""`` when there is none."""
        return f"sha256:{self.image.digest}" if self.image else ""


@dataclass(frozen=True, slots=True)
class ToolImage:
    """An image a framework tool returned, as the model gets it.

    ``digest`` names the bytes the tool returned (stored in the blob store, so
    ``view("sha256:...")`` shows them again once elided); ``data``/``media_type`` are
    the bytes to send: fitted to the model, or the tool's own when they already fit
    or cannot be read (the provider's error then names them, which beats guessing).
    """

    digest: str
    data: bytes
    media_type: str
    width: int = 0
    height: int = 0

    @property
    def tagged_digest(self) -> str:
        return f"sha256:{self.digest}"


@dataclass(slots=True)
class ImageTally:
    """One request's tool images as an integration prepares it: how many stay live,
    are elided or repeat a live one, the live ones' tokens, and the count window's
    fates (:meth:`VisionCore.plan`) for the images of the turn window still to come.

    Example:
        >>> tally = ImageTally(fates=iter([ImageFate("live"), ImageFate("repeat")]))
        >>> tally.fate(True), tally.fate(False), tally.fate(True)
        ('live', 'evicted', 'repeat')
    """

    live: int = 0
    elided: int = 0
    tokens: int = 0
    repeated: int = 0
    fates: Iterator[ImageFate] = dataclasses.field(default_factory=lambda: iter(()))

    def fate(self, in_window: bool) -> str:
        """The next image's fate: the plan's for one the turn window keeps, else evicted."""
        return next(self.fates).kind if in_window else "evicted"

    def count(self, fate: str) -> None:
        """Count one image of ``fate`` (``live``, ``repeat``, else evicted).

        Example:
            >>> tally = ImageTally()
            >>> for fate in ("live", "repeat", "evicted"):
            ...     tally.count(fate)
            >>> tally.live, tally.repeated, tally.elided
            (1, 1, 1)
        """
        self.live += fate == "live"
        self.repeated += fate == "repeat"
        self.elided += fate not in ("live", "repeat")


@dataclass(frozen=True, slots=True)
class RequestImages:
    """The images of one model request: how many kept their pixels, became text,
    repeat a live one (an unchanged screen, sent as a note) or were hoisted into a user
    message (Chat Completions); ``live_tokens`` estimates the live ones' cost by visus's
    formula for ``model``.

    Example:
        >>> RequestImages.of(ImageTally(live=2, elided=3, tokens=900), "m", 4, hoisted=True)
        RequestImages(model='m', turn=4, live=2, elided=3, live_tokens=900, repeated=0, hoisted=2)
    """

    model: str
    turn: int
    live: int
    elided: int
    live_tokens: int
    repeated: int = 0
    hoisted: int = 0

    @classmethod
    def of(
        cls, tally: ImageTally, model: str, turn: int, *, hoisted: bool = False
    ) -> RequestImages:
        """The counts of a request prepared with ``tally`` (``hoisted``: its live images
        went to a user message)."""
        moved = tally.live if hoisted else 0
        return cls(model, turn, tally.live, tally.elided, tally.tokens, tally.repeated, moved)
