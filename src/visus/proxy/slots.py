"""What the protocol modules share: an image found in a body, and how it is fitted.

A protocol module walks a body, repairs and elides what it must, and hands back
:class:`Slot` values: one per image still sent, each knowing its base64 payload and
how to write a fitted one back in place. :func:`fit_all` then fits them all against
one profile (which depends on how many there are: Anthropic's many-image rule).

Example:
    >>> s = Slot("messages.0.content.0", "image/png", "", lambda f: None)
    >>> s.path
    'messages.0.content.0'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from visus.proxy.edit import Edit, Fitted
from visus.wire import WireRules, profile_for

__all__ = ["Slot", "fit_all"]


@dataclass(frozen=True, slots=True)
class Slot:
    """One base64 image in the outgoing body; ``write`` puts a fitted one in its place."""

    path: str
    media_type: str
    b64: str
    write: Callable[[Fitted], None]


def fit_all(edit: Edit, rules: WireRules, slots: list[Slot], *, count: int | None = None) -> None:
    """Fit every slot to ``edit``'s model for a request of ``count`` images (default: the slots)."""
    edit.profile = profile_for(edit.spec, rules, len(slots) if count is None else count)
    edit.images += len(slots)
    for slot in slots:
        fitted = edit.fit_base64(slot.b64, slot.media_type, slot.path)
        if fitted is not None:
            slot.write(fitted)
