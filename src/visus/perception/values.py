"""What the view and read tools return: frozen values the model reads.

``view`` returns :class:`Perception` or :class:`Refusal`; ``read`` returns
:class:`ReadResult` or :class:`Refusal`. A refusal is an ordinary tool result: its
message is written for the model (what happened, what to do instead).

Example:
    >>> r = Refusal("not_found", "notes.png does not exist.")
    >>> r.kind, r.reason
    ('refusal', 'not_found')
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

from visus.media.types import Fitted, Region, SourceKind

__all__ = [
    "REFUSAL_REASONS",
    "Perception",
    "ReadResult",
    "Refusal",
    "RefusalReason",
    "content_digest",
]

RefusalReason: TypeAlias = Literal[
    "invalid_input", "not_found", "outside_reach", "unsupported_type", "too_large", "undecodable"
]

#: Every refusal reason, in the order DESIGN.md lists them.
REFUSAL_REASONS: tuple[RefusalReason, ...] = (
    "invalid_input",
    "not_found",
    "outside_reach",
    "unsupported_type",
    "too_large",
    "undecodable",
)


def content_digest(data: bytes) -> str:
    """Lowercase hex sha256 of ``data`` (the form record's ``ImagePart.digest`` uses).

    Example:
        >>> content_digest(b"")[:12]
        'e3b0c44298fc'
    """
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a tool did not return what was asked, in words for the model.

    ``source`` is the ref as given (empty for in-memory bytes without a name).
    """

    reason: RefusalReason
    message: str
    source: str = ""
    kind: Literal["refusal"] = "refusal"

    def to_json(self) -> dict[str, Any]:
        """The CLI's and servers' JSON shape: ``{"ok": false, "reason", "message"}``."""
        return {"ok": False, "reason": self.reason, "message": self.message}


@dataclass(frozen=True, slots=True)
class Perception:
    """A fitted image for one model, with what is known of its source.

    The image and its source facts are ``media``'s :class:`Fitted`, kept whole so
    the two never drift; the properties read through to it under the names callers
    use. ``width``/``height`` are the pixels sent, ``source_width``/``source_height``
    the source's own (for text and pdf: the rendered page before fitting).
    ``digest`` is the lowercase hex sha256 of ``data``; :attr:`tagged_digest` is the
    ``sha256:<hex>`` form. ``tokens`` estimates what the image costs ``model``.
    ``path`` is the resolved file (``None`` for in-memory bytes).

    Example:
        >>> f = Fitted(b"img", "image/png", 4, 3, 8, 6, "raster", frame_count=1)
        >>> p = Perception.from_fitted(f, source="red.png", model="claude-x", tokens=12)
        >>> p.width, p.source_width, p.size, p.frame_count, p.fitted is f
        (4, 8, 3, 1, True)
        >>> p.describe()
        'red.png: 8x6, sent 4x3; zoom: region=[x0,y0,x1,y1]'
    """

    fitted: Fitted
    source: str
    model: str
    tokens: int
    path: Path | None = None
    kind: Literal["perception"] = "perception"
    #: Hex sha256 of the image; computed once here (callers read it several times).
    digest: str = field(init=False, default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "digest", content_digest(self.fitted.data))

    @classmethod
    def from_fitted(
        cls, fitted: Fitted, *, source: str, model: str, tokens: int, path: Path | None = None
    ) -> Perception:
        """Wrap what ``media`` produced."""
        return cls(fitted=fitted, source=source, model=model, tokens=tokens, path=path)

    @property
    def data(self) -> bytes:
        return self.fitted.data

    @property
    def media_type(self) -> str:
        return self.fitted.media_type

    @property
    def width(self) -> int:
        return self.fitted.width

    @property
    def height(self) -> int:
        return self.fitted.height

    @property
    def source_width(self) -> int:
        return self.fitted.source_width

    @property
    def source_height(self) -> int:
        return self.fitted.source_height

    @property
    def source_kind(self) -> SourceKind:
        return self.fitted.source_kind

    @property
    def page(self) -> int | None:
        return self.fitted.page

    @property
    def page_count(self) -> int | None:
        return self.fitted.page_count

    @property
    def frame_count(self) -> int | None:
        return self.fitted.frame_count

    @property
    def line_start(self) -> int | None:
        return self.fitted.line_start

    @property
    def line_end(self) -> int | None:
        return self.fitted.line_end

    @property
    def line_total(self) -> int | None:
        return self.fitted.line_total

    @property
    def region(self) -> Region | None:
        """The part of the source shown (``None``: all of it)."""
        return self.fitted.region

    @property
    def size(self) -> int:
        """Bytes of the encoded image."""
        return len(self.data)

    @property
    def tagged_digest(self) -> str:
        """``sha256:<hex>``."""
        return f"sha256:{self.digest}"

    def describe(self, name: str | None = None) -> str:
        """One short line for the model next to the image: the source (``name``, else
        :attr:`source`) and its size (the coordinates a region takes), the region shown,
        the size sent, and how to zoom where that shows more. Short because a long run
        carries one per step, read again at every later step (what it costs is
        :attr:`tokens`, in ``visus view --json``).

        Examples (the second a zoomed view)::

            shot.png: 3840x2160, sent 1568x882; zoom: region=[x0,y0,x1,y1]
            shot.png region=[0,0,960,540] of 3840x2160, sent 960x540 (1:1)
        """
        name = name or self.source or "image"
        size = f"{self.source_width}x{self.source_height}"
        # Pixels go without saying; other units and kinds are what zooming works in.
        if self.source_kind == "pdf":
            size += " pt"
        elif self.source_kind != "raster":
            size += f" {self.source_kind}"
        region = self.region
        where = f"{name}: {size}"
        if region is not None:
            box = ",".join(str(v) for v in region.as_list())
            where = f"{name} region=[{box}] of {size}"
        line = f"{where}{self._where_in()}, sent {self.width}x{self.height}"
        if region is not None and (region.width, region.height) == (self.width, self.height):
            line += " (1:1)"
        if self._zoomable():
            smaller = "a smaller " if region is not None else ""
            line += f"; zoom: {smaller}region=[x0,y0,x1,y1]"
        return line

    def _where_in(self) -> str:
        """The page, lines or frame shown, when the source has more than one."""
        if self.page is not None and self.page_count is not None:
            return f", page {self.page} of {self.page_count}"
        if self.line_start is not None and self.line_total is not None:
            return f", lines {self.line_start}-{self.line_end} of {self.line_total}"
        if self.frame_count is not None and self.frame_count > 1:
            return f", first of {self.frame_count} frames"
        return ""

    def _zoomable(self) -> bool:
        """Whether a region would show more than this view: drawings (pdf, svg) render
        any region larger; pixels (raster, text) only where they were shrunk to be sent."""
        if self.source_kind in ("pdf", "svg"):
            return True
        shown = self.region
        w, h = (shown.width, shown.height) if shown else (self.source_width, self.source_height)
        return self.width < w or self.height < h

    def to_json(self) -> dict[str, Any]:
        """Metadata as JSON (no image bytes): the ``visus view --json`` shape."""
        out: dict[str, Any] = {
            "ok": True,
            "media_type": self.media_type,
            "width": self.width,
            "height": self.height,
            "source_width": self.source_width,
            "source_height": self.source_height,
            "bytes": self.size,
            "digest": self.tagged_digest,
            "source_kind": self.source_kind,
            "tokens": self.tokens,
            "model": self.model,
            "source": self.source,
        }
        optional = {
            "page": self.page,
            "page_count": self.page_count,
            "frame_count": self.frame_count,
            "line_start": self.line_start,
            "line_end": self.line_end,
            "line_total": self.line_total,
            "region": self.region.as_list() if self.region is not None else None,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        return out


@dataclass(frozen=True, slots=True)
class ReadResult:
    """A window of a text file, numbered like ``cat -n``.

    ``line_start``/``line_end`` are 1-based and inclusive (both 0 when the window
    is empty); ``line_total`` counts the whole file's lines. ``content_digest`` is
    the hex sha256 of the whole file as read, so an edit tool can check that the
    file has not changed since.
    """

    text: str
    line_start: int
    line_end: int
    line_total: int
    path: Path
    content_digest: str
    source: str = ""
    clipped_lines: int = 0
    kind: Literal["read"] = "read"

    @property
    def more(self) -> bool:
        """Whether lines follow the window."""
        return self.line_end < self.line_total

    def for_model(self) -> str:
        """The text plus a footer saying where the window sits and how to page on."""
        name = self.source or str(self.path)
        if self.line_total == 0:
            return f"[{name} is empty]"
        footer = f"[lines {self.line_start}-{self.line_end} of {self.line_total}"
        if self.more:
            footer += f"; call read({name!r}, offset={self.line_end}) for more"
        if self.clipped_lines:
            footer += f"; {self.clipped_lines} long lines clipped"
        return f"{self.text}\n{footer}]"
