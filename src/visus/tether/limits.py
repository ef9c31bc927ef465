"""Tether's hard bounds, checked the same way by every producer and consumer.

The numbers live in :mod:`visus.limits`; this module turns them into checks
whose errors name the field and the limit, so a host can tell its user exactly
what to change.

Example:
    >>> from visus.tether.runner import ImageIn
    >>> check_images([ImageIn("image/png", b"x" * 10)])
    >>> try:
    ...     check_images([ImageIn("image/png", b"")] * 5)
    ... except TetherLimitError as e:
    ...     e.limit
    'TETHER_MAX_IMAGES_PER_MESSAGE'
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from visus import limits
from visus.errors import InvalidInputError, LimitError
from visus.tether.runner import ImageIn

__all__ = [
    "FrameError",
    "TetherLimitError",
    "check_image",
    "check_image_count",
    "check_images",
    "check_media_type",
    "check_total",
    "check_wire",
    "load_json",
    "mb",
]


def mb(n: int) -> str:
    """Bytes as megabytes for messages: ``mb(15 * 2**20) == '15.0 MB'``."""
    return f"{n / limits.MB:.1f} MB"


class TetherLimitError(LimitError):
    """A tether bound was broken. ``limit`` names the constant, ``field`` the place."""

    def __init__(self, message: str, *, limit: str, field: str) -> None:
        super().__init__(message)
        self.limit = limit
        self.field = field


class FrameError(InvalidInputError):
    """A malformed frame. ``field`` is the dotted path of the offending value."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


def check_media_type(media_type: object, field: str) -> str:
    if not isinstance(media_type, str):
        raise FrameError(f"{field}: must be a string", field=field)
    if media_type not in limits.TETHER_MEDIA_TYPES:
        allowed = ", ".join(sorted(limits.TETHER_MEDIA_TYPES))
        raise FrameError(f"{field}: {media_type!r} is not one of {allowed}", field=field)
    return media_type


def _enforce(value: int, cap: int, name: str, field: str, what: str) -> None:
    """Raise :class:`TetherLimitError` for ``field`` when ``value`` exceeds ``cap``.

    ``name`` is the constant in :mod:`visus.limits`; the message ends with it.
    """
    if value > cap:
        raise TetherLimitError(f"{field}: {what} ({name})", limit=name, field=field)


def check_image_count(count: int, field: str = "payload.images") -> None:
    cap = limits.TETHER_MAX_IMAGES_PER_MESSAGE
    what = f"{count} images exceed the limit of {cap} per message"
    _enforce(count, cap, "TETHER_MAX_IMAGES_PER_MESSAGE", field, what)


def check_image(size: int, field: str) -> None:
    """One image's decoded size against TETHER_MAX_IMAGE_BYTES."""
    cap = limits.TETHER_MAX_IMAGE_BYTES
    what = f"image is {mb(size)} decoded, over the {mb(cap)} per-image limit"
    _enforce(size, cap, "TETHER_MAX_IMAGE_BYTES", field, what)


def check_total(total: int, field: str = "payload.images") -> None:
    """All images of one frame, decoded, against TETHER_MAX_FRAME_IMAGE_BYTES."""
    cap = limits.TETHER_MAX_FRAME_IMAGE_BYTES
    what = f"images total {mb(total)} decoded, over the {mb(cap)} per-frame limit"
    _enforce(total, cap, "TETHER_MAX_FRAME_IMAGE_BYTES", field, what)


def check_wire(size: int, field: str = "body") -> None:
    """One frame as sent against TETHER_MAX_WIRE_BYTES."""
    cap = limits.TETHER_MAX_WIRE_BYTES
    what = f"frame is {mb(size)} on the wire, over the {mb(cap)} limit"
    _enforce(size, cap, "TETHER_MAX_WIRE_BYTES", field, what)


def check_images(images: Sequence[ImageIn], field: str = "payload.images") -> None:
    """Producer-side check of decoded images: count, media types, sizes, total.

    Raises :class:`TetherLimitError` or :class:`FrameError` naming the first
    offending field; returns ``None`` when the images may be sent.
    """
    check_image_count(len(images), field)
    _check_sizes(((f"{field}[{i}]", im) for i, im in enumerate(images)), field)


def _check_sizes(items: Iterable[tuple[str, ImageIn]], field: str) -> None:
    total = 0
    for name, image in items:
        check_media_type(image.media_type, f"{name}.media_type")
        check_image(len(image.data), name)
        total += len(image.data)
    check_total(total, field)


def load_json(body: bytes | str, field: str = "body") -> Any:
    """Parse a JSON body no deeper than ``JSON_MAX_DEPTH``, or raise :class:`FrameError`.

    The C parser itself gives up (``RecursionError``) around a thousand levels;
    anything past the bound is refused here, before code that recurses over the
    value (validation, re-encoding) sees it.

    Example:
        >>> load_json(b'{"a": [1, {"b": 2}]}')
        {'a': [1, {'b': 2}]}
        >>> try:
        ...     load_json(b"[" * 100_000)
        ... except FrameError as e:
        ...     print(e.field, "JSON_MAX_DEPTH" in str(e))
        body True
    """
    cap = limits.JSON_MAX_DEPTH
    deep = f"{field}: JSON nested deeper than {cap} levels (JSON_MAX_DEPTH)"
    try:
        value = json.loads(body)
    except RecursionError:
        raise FrameError(deep, field=field) from None
    except ValueError as e:  # also UnicodeDecodeError
        raise FrameError(f"{field}: not JSON ({e})", field=field) from e
    # Iterative walk (a stack of (container, depth)), stopping at the first level past
    # the bound: never recursion, and never more work than the parse already did.
    stack: list[tuple[dict[str, Any] | list[Any], int]] = []
    if isinstance(value, dict | list):
        stack.append((value, 1))
    while stack:
        item, depth = stack.pop()
        if depth > cap:
            raise FrameError(deep, field=field)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return value
