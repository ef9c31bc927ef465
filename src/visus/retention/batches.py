"""How many images leave, and which, when a window or a provider's limit is passed.

Pure arithmetic over a request's images (oldest first), shared by every surface that
bounds images: visus's agent (through :func:`visus.retention.model_view`), the
integrations and the proxy. Images always leave in batches, the oldest first, so between
two evictions every earlier byte of a request stays the same and a prompt cache keeps
hitting; the newest image never leaves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from visus.errors import InvalidInputError

__all__ = [
    "Ceiling",
    "Hold",
    "ImageFate",
    "Shown",
    "evicted_images",
    "evicted_over",
    "evicted_to_fit",
    "plan_images",
]


def evicted_images(count: int, live_images: int, chunk: int = 1) -> int:
    """How many of the oldest of ``count`` images leave so at most ``live_images`` stay live.

    They leave in batches of ``chunk`` (at most ``live_images``): the number evicted is
    always a multiple of the batch and grows only when the newest images no longer
    fit, so between two evictions every earlier image lowers to the same bytes and a
    provider's prompt cache keeps hitting. Between evictions
    ``live_images - chunk + 1`` to ``live_images`` images stay live; the newest always
    does. Pure arithmetic, shared by every surface that bounds images by count.

    Example:
        >>> [evicted_images(n, live_images=4, chunk=2) for n in range(1, 10)]
        [0, 0, 0, 0, 2, 2, 4, 4, 6]
        >>> evicted_images(3, live_images=1, chunk=5)  # the batch never exceeds the window
        2
    """
    for name, value in (("live_images", live_images), ("chunk", chunk)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInputError(f"retention {name} must be an integer >= 1, got {value!r}")
    over = count - live_images
    if over <= 0:
        return 0
    batch = min(chunk, live_images)
    return -(-over // batch) * batch


def evicted_to_fit(costs: Sequence[int], cap: int, *, share: float) -> int:
    """How many of the oldest images leave so the rest cost at most ``cap``, in one batch.

    ``costs`` are the images' costs against a provider's limit, oldest first (1 each
    for an image count, bytes for a request's byte budget). Nothing leaves while they
    fit; past the limit the oldest leave in batches of ``share`` of what fits (at
    least one), so the number evicted is a step that moves only when the newest no
    longer fit: between two moves every earlier image lowers to the same bytes and a
    prompt cache keeps hitting, where trimming to the limit would rewrite the prefix
    at every step. The newest image always stays. Pure arithmetic, shared by every
    surface that trims at a provider's limit (the proxy, the agent's append-only
    retention).

    Example:
        >>> [evicted_to_fit([1] * n, 8, share=0.5) for n in range(7, 14)]
        [0, 0, 4, 4, 4, 4, 8]
        >>> evicted_to_fit([5, 5, 5, 5], 12, share=0.25)  # two fit: batches of one
        2
        >>> evicted_to_fit([50, 1], 10, share=0.5)  # the newest stays whatever it costs
        1
    """
    if not 0 < share <= 1:
        raise InvalidInputError(f"retention share must be in (0, 1], got {share!r}")
    total = sum(costs)
    need = 0  # the fewest of the oldest that must leave
    while total > cap and need < len(costs) - 1:
        total -= costs[need]
        need += 1
    if need == 0:
        return 0
    batch = max(1, math.ceil((len(costs) - need) * share))
    return min(len(costs) - 1, -(-need // batch) * batch)


@dataclass(frozen=True, slots=True)
class ImageFate:
    """What :func:`plan_images` makes of one image: kept ``live``, ``evicted`` (sent as
    its descriptor), or a ``repeat`` of the live image at index ``same_as`` (same bytes).
    """

    kind: Literal["live", "evicted", "repeat"]
    same_as: int | None = None


_LIVE = ImageFate("live")
_EVICTED = ImageFate("evicted")


@dataclass(frozen=True, slots=True)
class Ceiling:
    """What the live tool images of one request may come to: how many, their bytes (as
    the wire counts them) and their tokens. ``None``: no bound on that measure.

    Example:
        >>> Ceiling(images=100).tighter(Ceiling(images=20, image_tokens=9000))
        Ceiling(images=20, image_bytes=None, image_tokens=9000)
    """

    images: int | None = None
    image_bytes: int | None = None
    image_tokens: int | None = None

    def tighter(self, other: Ceiling) -> Ceiling:
        """The smaller bound of the two on each measure."""

        def low(a: int | None, b: int | None) -> int | None:
            return b if a is None else a if b is None else min(a, b)

        return Ceiling(
            low(self.images, other.images),
            low(self.image_bytes, other.image_bytes),
            low(self.image_tokens, other.image_tokens),
        )


@dataclass(frozen=True, slots=True)
class Shown:
    """One tool image of a request as a plan weighs it: its digest, bytes and tokens,
    and ``reasoning``: the tokens the model reasoned, bound to the prefix, in the
    replies between the tool image before it and this one (what an eviction from this
    request on would have the provider drop)."""

    digest: str
    size: int = 0
    tokens: int = 0
    reasoning: int = 0


@dataclass(frozen=True, slots=True)
class Hold:
    """When an append-only history first lets its oldest images leave, past its
    break-even (``tokens`` of live tool images). Leaving drops the reasoning bound since
    the start, which the model may have to do again (priced at ``redo`` times an input
    token: its output price); staying has every request read those images again from
    the cache (``read`` times an input token). A short run is cheapest never dropping
    it, a long one evicting early, and which this run is shows only as it goes: so past
    the break-even the images stay until the reads their staying has cost cover the
    reasoning leaving would drop (rent or buy: at most twice the cheaper of the two),
    then leave. From then on the run is a long one, and each later eviction drops only
    what the next would (over a run each block is dropped once whatever the schedule):
    they come at the break-even. With no reasoning pending, or ``redo`` at 0
    (:class:`~visus.retention.RetentionPolicy`'s default: ``weigh_reasoning`` off, the
    cheaper choice measured over runs of 100 and 300 steps), the first leaves at once
    too.

    Example:
        >>> Hold(10_000, read=0.05, redo=5.0).worth(paid=250.0, reasoning=48)
        True
        >>> Hold(10_000, read=0.05, redo=5.0).worth(paid=250.0, reasoning=1000)
        False
    """

    tokens: int
    read: float = 0.0
    redo: float = 0.0

    def worth(self, *, paid: float, reasoning: int) -> bool:
        """Whether reads ``paid`` so far past the break-even (in input tokens) cover
        dropping ``reasoning`` tokens."""
        return paid >= reasoning * self.redo


def evicted_over(
    images: Sequence[Shown], ceiling: Ceiling, *, share: float, hold: Hold | None = None
) -> int:
    """How many of the oldest ``images`` leave so the rest stay under ``ceiling``: when
    an arriving image takes any measure past its cap, the oldest leave in one batch
    until every measure is back under ``1 - share`` of its cap (the newest always
    stays). One pass from the oldest, so the answer for a request is the answer for the
    request before it plus what the new images did: the count never goes down as a
    history grows, and earlier images never come back (a prompt cache and reasoning
    bound to the prefix stay valid between evictions). An image whose bytes a live one
    already has costs nothing: it is sent as a one-line note while that one is live.
    ``hold`` (an append-only history): past its break-even the oldest leave the same
    way, down to ``1 - share`` of it; the first time, only once the reads their staying
    cost cover the reasoning leaving would drop (:class:`Hold`). The ceiling's caps
    stay hard.

    Example:
        >>> shots = [Shown(d, 100, 1500) for d in "abcdefgh"]
        >>> evicted_over(shots, Ceiling(image_tokens=9000), share=0.5)
        4
        >>> evicted_over(shots, Ceiling(images=100, image_bytes=10_000), share=0.5)
        0
        >>> [evicted_over(shots[:n], Ceiling(images=4), share=0.5) for n in range(1, 9)]
        [0, 0, 0, 0, 3, 3, 3, 6]
        >>> hold = Hold(4500, read=0.05, redo=5.0)
        >>> [evicted_over(shots[:n], Ceiling(), share=0.9, hold=hold) for n in range(1, 9)]
        [0, 0, 0, 3, 3, 3, 6, 6]
        >>> deep = [Shown(d, 100, 1500, reasoning=100) for d in "abcdefghijklmnopq"]
        >>> [evicted_over(deep[:n], Ceiling(), share=0.9, hold=hold) for n in (4, 13, 14, 17)]
        [0, 0, 13, 16]
        >>> evicted_over(deep[:7], Ceiling(images=6), share=0.9, hold=hold)  # caps stay hard
        6
    """
    live = _Live(ceiling, None if hold is None else hold.tokens)
    pending = 0  # reasoning bound to the prefix so far
    paid = 0.0  # reads the images past the break-even have cost so far
    for i, image in enumerate(images):
        live.add(image)
        pending += image.reasoning
        if not live.over(1.0, soft=False):
            if hold is None or live.tokens <= hold.tokens:
                continue
            paid += (live.tokens - hold.tokens * (1.0 - share)) * hold.read
            if not live.first and not hold.worth(paid=paid, reasoning=pending):
                continue
        live.leave_until(images, i, 1.0 - share)
    return live.first


class _Live:
    """The live tool images of :func:`evicted_over`'s pass: their totals per measure
    (images, bytes, tokens) against the ceiling's caps and, ``soft``, a break-even in
    tokens; ``first``: how many of the oldest have left."""

    def __init__(self, ceiling: Ceiling, soft: int | None) -> None:
        self.caps = (ceiling.images, ceiling.image_bytes, ceiling.image_tokens)
        self.soft = soft
        self.totals = [0, 0, 0]
        self.count: dict[str, int] = {}  # digest -> live images with it
        self.costs: list[tuple[int, int, int]] = []
        self.first = 0

    @property
    def tokens(self) -> int:
        return self.totals[2]

    def add(self, image: Shown) -> None:
        cost = (1, image.size, image.tokens)
        self.costs.append(cost)
        if image.digest not in self.count:
            self._charge(cost, 1)
        self.count[image.digest] = self.count.get(image.digest, 0) + 1

    def over(self, scale: float, *, soft: bool = True) -> bool:
        """Whether a measure is past ``scale`` of its cap (``soft``: the break-even too)."""
        if soft and self.soft is not None and self.tokens > self.soft * scale:
            return True
        caps = self.caps
        return any(c is not None and t > c * scale for t, c in zip(self.totals, caps, strict=True))

    def leave_until(self, images: Sequence[Shown], newest: int, scale: float) -> None:
        """The oldest leave until every measure is under ``scale`` of its cap; the
        ``newest`` stays."""
        while self.first < newest and self.over(scale):
            gone = images[self.first].digest
            self.count[gone] -= 1
            self._charge(self.costs[self.first], -1)
            if self.count[gone]:  # a later copy now carries those bytes
                self._charge(self.costs[self.first], 1)
            else:
                del self.count[gone]
            self.first += 1

    def _charge(self, cost: tuple[int, int, int], sign: int) -> None:
        for k in range(3):
            self.totals[k] += sign * cost[k]


def plan_images(
    digests: Sequence[str], *, live_images: int | None, chunk: int = 1, at_least: int = 0
) -> tuple[ImageFate, ...]:
    """The fate of each image of a request, oldest first, under a count window.

    ``digests`` are the images the turn window keeps, in request order. At most
    ``live_images`` distinct ones stay live; when one more arrives the oldest leave,
    ``chunk`` at a time, so earlier fates change only at an eviction (a prompt cache
    keeps hitting in between). A later image with the bytes of a live one is a repeat.
    The newest image is never evicted. ``at_least`` of the oldest leave whatever the
    window (a provider's limit: :func:`evicted_over`). Pure: any surface (the agent, the
    proxy, an integration) gets the same answer for the same images.

    Example:
        >>> [f.kind for f in plan_images(list("abcde"), live_images=3, chunk=2)]
        ['evicted', 'evicted', 'live', 'live', 'live']
        >>> fates = plan_images(list("abcab"), live_images=3, chunk=2)
        >>> [(f.kind, f.same_as) for f in fates[3:]]
        [('repeat', 0), ('repeat', 1)]
    """
    first = 0
    if live_images is not None:
        target = live_images + 1 - max(1, min(chunk, live_images))
        counts: dict[str, int] = {}
        for n, digest in enumerate(digests):
            counts[digest] = counts.get(digest, 0) + 1
            if len(counts) <= live_images:
                continue
            # Passed the window: evict from the oldest until a batch has left.
            while len(counts) > target and first < n:
                old = digests[first]
                counts[old] -= 1
                if not counts[old]:
                    del counts[old]
                first += 1
    first = max(first, min(at_least, len(digests) - 1))
    fates: list[ImageFate] = [_EVICTED] * first
    carrier: dict[str, int] = {}
    for i in range(first, len(digests)):
        held = carrier.setdefault(digests[i], i)
        fates.append(_LIVE if held == i else ImageFate("repeat", held))
    return tuple(fates)
