"""What the protocol modules share: the images found in a body, and what becomes of them.

The flow is one way: a protocol module walks a body, repairs what it must, and hands
:func:`plan` one :class:`Found` per image in the order the model reads them (what the
image is and where, as data); :func:`plan` decides, the same way on every wire, and
returns one :class:`Fate` per image, which the protocol module writes back into its
body itself (nothing here calls back into it):

1. images of turns before the live window (``--live-turns``) leave;
2. at most ``--live-images`` stay live, the oldest leaving in batches of ``chunk``
   (by default the whole window but the newest: :func:`visus.retention.evicted_images`),
   so between two batches every earlier byte of the request is the same and a prompt
   cache keeps hitting;
3. never more than the provider takes in one request (the catalog's ``max_images`` for
   the model, capped by the wire's: Anthropic 100, 600 past a 200k context): past it the
   oldest leave in one batch of ``limit_share`` of the cap
   (:func:`visus.retention.evicted_to_fit`), not one image per step; with no window of
   the operator's, a model that binds its reasoning to the prefix is append-only
   (:func:`visus.retention.policy_for`), planned in one pass by
   :func:`visus.retention.evicted_over` as visus's agent plans it: past its family's
   break-even in image tokens the oldest leave in one batch, the first time only once
   the cache reads they cost cover the reasoning the client replays after them
   (:attr:`Found.reasoning`, :class:`visus.retention.Hold`);
4. the rest are fitted against one profile (which depends on how many there are:
   Anthropic's many-image rule), each image's result cached;
5. if their bytes are over the wire's request budget (Anthropic: 30 MB of base64, so
   the 32 MB request fits), bytes go before pixels: every image is re-encoded smaller
   at the same size (:meth:`~visus.proxy.edit.Edit.compact`); only if that is still
   over do the oldest leave, in a batch the same way; the newest always stays;
6. an image that differs from the one before it only in small areas goes as a note and
   those areas' crops (:mod:`visus.proxy.cuts`).

Example:
    >>> s = Found("messages.0.content.0", 1, None, "", "image/png")
    >>> s.path, Fate(text="[image elided]").text
    ('messages.0.content.0', '[image elided]')
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from visus.proxy.cuts import changed_only
from visus.proxy.edit import Edit, Fitted
from visus.retention import Shown, evicted_images, evicted_over, evicted_to_fit
from visus.wire import profile_for

__all__ = ["Fate", "Found", "evicted_by", "is_observation", "plan", "stale_reasoning"]

# How smolagents words a tool's output when it sends it as a *user* message ("Call id:
# ..." before a ToolCallingAgent's, "Observation:" otherwise): a step of the same turn.
_OBSERVATION_PREFIXES = ("Observation:", "Call id:")


@dataclass(frozen=True, slots=True)
class Found:
    """One image in the outgoing body, as data.

    ``b64`` is None for an image given by URL (counted, never fitted).
    """

    path: str
    turn: int
    call: tuple[str, Any] | None
    b64: str | None
    media_type: str
    #: The top-level item (message, input item) it sits in; -1 where that is not
    #: where the client put it (chat hoisting): reasoning after it is bound to it.
    at: int = -1
    #: Whether its protocol can send a note and crops in its place (:mod:`.cuts`).
    can_place: bool = False
    #: The reasoning tokens the client replays, bound to the prefix, between the image
    #: before it and this one (estimated from the sealed payloads by
    #: :func:`visus.retention.sealed_reasoning`; 0 on a wire that replays none): what
    #: an eviction from here on would have the provider drop.
    reasoning: int = 0


@dataclass(frozen=True, slots=True)
class Fate:
    """What becomes of one image: sent as ``fitted``, replaced by the descriptor
    ``text``, or sent as the ``note`` and its ``crops`` (only what changed); all
    empty: left as the client sent it."""

    fitted: Fitted | None = None
    text: str | None = None
    note: str | None = None
    crops: tuple[Fitted, ...] = ()


def is_observation(content: Any) -> bool:
    """Whether a user message's content is an agent's tool observation, not the user's words.

    smolagents sends each step's tool output (and its screenshots) as a user message
    opening with ``Observation:``; counted as a new turn, ``--live-turns 1`` elided a
    screenshot one step after it was taken.

    Example:
        >>> is_observation([{"type": "image"}, {"type": "text", "text": "Observation: ok"}])
        True
        >>> is_observation("look at the login page")
        False
    """
    if isinstance(content, str):
        return content.startswith(_OBSERVATION_PREFIXES)
    if not isinstance(content, list):
        return False
    for part in content:
        text = part.get("text") if isinstance(part, dict) else None
        if isinstance(text, str):
            return text.startswith(_OBSERVATION_PREFIXES)
    return False


def _elided(edit: Edit, image: Found) -> Fate:
    edit.touched(image.at, evicted=True)
    return Fate(text=edit.elide(image.b64, image.turn, image.call))


def _tokens(edit: Edit, image: Found) -> int:
    """What an image costs the model (0 when it cannot be read: it is not fitted)."""
    size = edit.size_of(image.b64) if image.b64 is not None else None
    return edit.tokens(*size) if size is not None else 0


def _weighed(edit: Edit, found: Sequence[Found]) -> list[Shown]:
    """The images as :func:`visus.retention.evicted_over` weighs them: each its own
    (the proxy sends a repeat's bytes again, billed again), its tokens and the reasoning
    before it."""
    return [Shown(str(n), 0, _tokens(edit, i), i.reasoning) for n, i in enumerate(found)]


def _cost(edit: Edit, image: Found, fitted: Fitted | None) -> int:
    """What one sent image costs against the wire's request budget."""
    b64 = fitted.b64 if fitted is not None else image.b64
    if b64 is None:
        return 0
    return len(b64) if edit.rules.base64_byte_limit else len(b64) * 3 // 4


def _compacted(edit: Edit, image: Found, fitted: Fitted | None) -> Fitted | None:
    """What goes for an image once the request is over its byte budget: re-encoded
    smaller where that saves bytes, else what was to go."""
    b64 = fitted.b64 if fitted is not None else image.b64
    if b64 is None:
        return fitted
    return edit.compact(b64) or fitted


def evicted_by(
    edit: Edit, found: Sequence[Found], current: int, weighed: Sequence[Shown] | None = None
) -> int:
    """How many of the oldest of ``found`` (a request's images, oldest first, whose
    latest turn is ``current``) leave before fitting: those of stale turns, then the
    ``live_images`` window and the provider's image cap, each in its batch; append-only
    (``edit.hold``), the break-even and the ceiling in one pass
    (:func:`visus.retention.evicted_over`; ``weighed``: the images as
    :func:`_weighed` gives them, when the caller has them). Pure arithmetic over the
    images, so the images of an earlier, shorter request give what that request
    elided (:func:`stale_reasoning`), and the count never goes down as a history grows.
    """
    if edit.hold is not None:  # no window of the operator's: no stale turns either
        shown = weighed if weighed is not None else _weighed(edit, found)
        return evicted_over(shown, edit.ceiling, share=edit.limit_share, hold=edit.hold)
    stale = 0
    while stale < len(found) and edit.is_stale(found[stale].turn, current):
        stale += 1
    n = len(found) - stale
    gone = evicted_images(n, edit.live_images, edit.chunk) if edit.live_images else 0
    cap = edit.ceiling.images
    if cap is not None:
        gone += evicted_to_fit([1] * (n - gone), cap, share=edit.limit_share)
    return stale + gone


def stale_reasoning(
    edit: Edit, found: Sequence[Found], said: Sequence[tuple[int, int]]
) -> set[int]:
    """The assistant messages whose reasoning an earlier request already had dropped:
    left out from the request after that eviction on (as visus's agent does:
    :mod:`visus.retention.reasoning`). ``said``: each assistant message's index and the
    turn it answered, in order.

    A reply at ``p`` answered the request that held the images before it; its reasoning
    is stale when an image before it that was live in that request has left since (in
    the previous request: the one the eviction was sent in, which sent every block and
    had the provider drop and count those). Byte budgets are not replayed: a block they
    made stale goes back, and the provider drops it (counted).
    """
    if len(said) < 2 or not found:
        return set()
    at = [image.at for image in found]
    weighed = _weighed(edit, found) if edit.hold is not None else None  # weighed once

    def held_and_evicted(p: int, turn: int) -> tuple[int, int]:
        count = bisect.bisect_left(at, p)  # the images of the request answered at p
        shown = weighed[:count] if weighed is not None else None
        return count, evicted_by(edit, found[:count], turn, shown) if count else 0

    before = held_and_evicted(*said[-1])[1]  # what the previous request evicted
    stale: set[int] = set()
    for p, turn in said[:-1]:
        held, evicted = held_and_evicted(p, turn)
        if min(before, held) > evicted:
            stale.add(p)
    return stale


def plan(edit: Edit, found: list[Found], *, current: int) -> list[Fate]:
    """What becomes of every image of a request whose latest turn is ``current``
    (one :class:`Fate` per image of ``found``, in its order)."""
    fates: dict[int, Fate] = {}  # by position in found
    gone = evicted_by(edit, found, current)
    for n in range(gone):
        fates[n] = _elided(edit, found[n])
    live, offset = found[gone:], gone
    edit.profile = profile_for(edit.spec, edit.rules, len(live))
    sent: list[tuple[Found, Fitted | None]] = [
        (
            image,
            None if image.b64 is None else edit.fit_base64(image.b64, image.media_type, image.path),
        )
        for image in live
    ]
    budget = edit.rules.max_request_image_bytes
    if budget is not None:
        costs = [_cost(edit, image, fitted) for image, fitted in sent]
        if sum(costs) > budget:
            sent = [(image, _compacted(edit, image, fitted)) for image, fitted in sent]
            costs = [_cost(edit, image, fitted) for image, fitted in sent]
        gone = evicted_to_fit(costs, budget, share=edit.limit_share)
        for n in range(gone):
            fates[offset + n] = _elided(edit, sent[n][0])
        sent, offset = sent[gone:], offset + gone
    cut = changed_only(edit, sent)
    edit.images += len(sent)
    edit.cut_images += len(cut)
    for i, (image, fitted) in enumerate(sent):
        if i in cut:
            note, crops = cut[i]
            fates[offset + i] = Fate(note=note, crops=tuple(crops))
            edit.touched(image.at, evicted=True)
        elif fitted is not None:
            fates[offset + i] = Fate(fitted=fitted)
            edit.touched(image.at, evicted=False)
    return [fates.get(n, Fate()) for n in range(len(found))]
