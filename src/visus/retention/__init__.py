"""Retention: the record -> the model's view of it. Pure; a view decision, never a delete.

Pixels stay live for the current turn and ``live_turns - 1`` earlier ones, and inside
that window for at most the ``live_images`` newest tool images (an agent taking a
screenshot at each of a hundred steps stays bounded). An older image that can be
re-viewed (an :class:`~visus.record.messages.ImagePart` with a
:class:`~visus.record.messages.PerceptionOrigin`) becomes a short text descriptor
naming its source and the digest that brings back exactly those pixels (a path may
have been overwritten since)::

    [image elided: call view("sha256:9f86d081884c7d65") to see it again]

Every image is re-viewable by its digest (``view("sha256:<hex>")`` within the
session's own record), so images a user attached
(:class:`~visus.record.messages.AttachmentOrigin`) leave too, on their own longer
window ``attachments_live_turns`` (default 3; ``None`` keeps them forever)::

    [image elided: photo.jpg pasted in turn 2; call view("sha256:9f86d081884c7d65") to see it again]

A tool image whose bytes equal a live image's (an unchanged screen) is not sent twice:
it becomes a short note pointing at the earlier one (:func:`repeat_descriptor`).

Native documents (:class:`~visus.record.messages.DocumentPart`, PDFs) follow the
same turn rules as images, as ``[document elided: ...]``; they do not count against
``live_images`` or ``image_token_budget`` (both measure images only). The view keeps
every message and every part in place (an elided image is replaced by exactly one
text part), so callers can line up a view with its record position by position.
Every descriptor depends only on its part and turn: the same bytes each time it is sent.

The knobs besides the windows:

``chunk`` (k)
    The turn boundary moves in steps of k turns instead of every turn, so between
    two moves every earlier message lowers to the same bytes and a provider's
    prompt cache keeps hitting. Precisely, with ``current`` the highest turn in
    the messages, images of turns before

    ``first_live = max(1, ((current - live_turns) // k) * k + 1)``

    are elided. With k = 1 that is ``current - live_turns + 1`` (exactly
    ``live_turns`` turns live); with k > 1 between ``live_turns`` and
    ``live_turns + k - 1`` turns stay live, and ``first_live`` changes only
    when ``current - live_turns`` crosses a multiple of k.

``live_images`` (n) and ``image_chunk`` (c)
    Of the tool images the turn window keeps, at most n distinct ones stay live.
    When one more arrives, the oldest c leave together (:func:`plan_images`), so
    the live count runs from n - c + 1 up to n and the request's earlier bytes
    change only once every c images: between evictions a prompt cache keeps
    hitting. The newest image always stays. ``None`` bounds by turns alone.

``image_token_budget``
    If the images still live after the windows cost more tokens than this (by
    :func:`visus.models.image_tokens` for ``model``), the oldest re-viewable
    ones are elided first until the rest fit. Attachments are never elided by
    it (they leave by their own window), and neither are the images of the
    newest message that holds any (what the model just asked to see). The
    budget trades cache stability for size: when it bites, the prefix changes.

``model_view`` is idempotent: ``model_view(model_view(x)) == model_view(x)``.

Example:
    >>> from visus.record.messages import ImagePart, PerceptionOrigin, ToolResult
    >>> shot = ImagePart("ab" * 32, "image/png", 10, 64, 64, PerceptionOrigin("a.png"))
    >>> record = (ToolResult("c1", "view", (shot,), turn=1),
    ...           ToolResult("c2", "view", (shot,), turn=2))
    >>> [m.parts[0].kind for m in model_view(record)]
    ['text', 'image']
    >>> model_view(record)[0].text
    '[image elided: call view("sha256:abababababababab") to see it again]'
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace

from visus import limits
from visus.errors import InvalidInputError
from visus.models import image_tokens
from visus.models.spec import ModelSpec
from visus.record.messages import (
    AssistantMessage,
    DocumentPart,
    ImagePart,
    Message,
    Part,
    PerceptionOrigin,
    TextPart,
    ToolResult,
    UserMessage,
)
from visus.retention.batches import (
    Ceiling,
    Hold,
    ImageFate,
    Shown,
    evicted_images,
    evicted_over,
    evicted_to_fit,
    plan_images,
)
from visus.retention.descriptors import elided_descriptor, repeat_descriptor
from visus.retention.policy import (
    APPEND_ONLY_FAMILIES,
    AppendOnly,
    RetentionPolicy,
    plan_tool_images,
    policy_for,
)
from visus.retention.reasoning import bound_reasoning, drop_stale_reasoning, sealed_reasoning

__all__ = [
    "APPEND_ONLY_FAMILIES",
    "DEFAULT_POLICY",
    "AppendOnly",
    "Ceiling",
    "Hold",
    "ImageFate",
    "ImageStatus",
    "RetentionPolicy",
    "Shown",
    "bound_reasoning",
    "current_turn",
    "elided_descriptor",
    "evicted_images",
    "evicted_over",
    "evicted_to_fit",
    "first_live_turn",
    "image_statuses",
    "model_view",
    "plan_images",
    "plan_tool_images",
    "policy_for",
    "repeat_descriptor",
    "sealed_reasoning",
]


#: The default policy: only the current turn keeps its pixels.
DEFAULT_POLICY = RetentionPolicy()


def current_turn(messages: Sequence[Message]) -> int:
    """The highest turn in ``messages`` (0 when there are none)."""
    return max((m.turn for m in messages), default=0)


def first_live_turn(messages: Sequence[Message], policy: RetentionPolicy = DEFAULT_POLICY) -> int:
    """The earliest turn of ``messages`` whose images ``policy`` keeps live."""
    return policy.first_live_turn(current_turn(messages))


def _with_parts(message: Message, parts: tuple[Part, ...]) -> Message:
    if isinstance(message, UserMessage | ToolResult):
        return replace(message, parts=parts)
    # Assistant messages hold text parts only, so nothing in them is ever elided.
    raise AssertionError("only user and tool messages hold images")


def _elide(message: Message, elide: set[int], repeat: frozenset[int] = frozenset()) -> Message:
    parts = tuple(
        TextPart(elided_descriptor(p, message.turn), note=True)
        if i in elide and isinstance(p, ImagePart | DocumentPart)
        else TextPart(repeat_descriptor(p, message.turn), note=True)
        if i in repeat and isinstance(p, ImagePart)
        else p
        for i, p in enumerate(message.parts)
    )
    return _with_parts(message, parts)


# Identity memo for _rewrite: (id(message), what changes) -> (message, its new form).
# Holding the message keeps its id from being reused while cached, and an agent builds
# each view from the same message objects as the last, so each old image is elided
# once rather than once per request. Cleared wholesale when full (no per-hit bookkeeping).
_ELIDED: dict[tuple[int, frozenset[int], frozenset[int]], tuple[Message, Message]] = {}


def _rewrite(message: Message, elide: frozenset[int], repeat: frozenset[int]) -> Message:
    """``message`` with the parts at ``elide`` as descriptors and at ``repeat`` as repeats."""
    if not elide and not repeat:
        return message
    key = (id(message), elide, repeat)
    hit = _ELIDED.get(key)
    if hit is not None and hit[0] is message:
        return hit[1]
    rewritten = _elide(message, set(elide), repeat)
    if len(_ELIDED) >= limits.RETENTION_MEMO_MESSAGES:
        _ELIDED.clear()
    _ELIDED[key] = (message, rewritten)
    return rewritten


def _elide_old(message: Message, *, views: bool, attachments: bool) -> Message:
    """``message`` with its perceptions (if ``views``) and its attached images (if
    ``attachments``) replaced by their descriptors."""
    old = frozenset(
        j
        for j, p in enumerate(message.parts)
        if isinstance(p, ImagePart | DocumentPart)
        and (views if isinstance(p.origin, PerceptionOrigin) else attachments)
    )
    return _rewrite(message, old, frozenset())


def _apply_count(
    view: list[Message], policy: RetentionPolicy, model: ModelSpec | None, ceiling: Ceiling | None
) -> None:
    """Tool images past the window or the ceiling leave in batches; repeats of a live
    image go."""
    at: list[tuple[int, int]] = []  # (message, part) of each live tool image
    shown: list[Shown] = []
    reasoned = 0  # output of the replies with reasoning blocks since the last image
    for i, message in enumerate(view):
        if isinstance(message, AssistantMessage):
            reasoned += bound_reasoning(message)
        for j, part in enumerate(message.parts):
            if isinstance(part, ImagePart) and isinstance(part.origin, PerceptionOrigin):
                at.append((i, j))
                tokens = image_tokens(model, part.width, part.height) if model else 0
                shown.append(Shown(part.digest, part.size, tokens, reasoned))
                reasoned = 0
    plan = functools.partial(plan_tool_images, policy=policy, model=model, ceiling=ceiling)
    fates = plan(shown)
    if policy.append_only and model is not None and model.preserved_thinking:
        drop_stale_reasoning(view, [i for i, _ in at], shown, plan)
    elide: dict[int, set[int]] = {}
    repeat: dict[int, set[int]] = {}
    for (i, j), fate in zip(at, fates, strict=True):
        if fate.kind != "live":
            (elide if fate.kind == "evicted" else repeat).setdefault(i, set()).add(j)
    for i in elide.keys() | repeat.keys():
        view[i] = _rewrite(view[i], frozenset(elide.get(i, ())), frozenset(repeat.get(i, ())))


def model_view(
    messages: Sequence[Message],
    policy: RetentionPolicy = DEFAULT_POLICY,
    *,
    model: ModelSpec | None = None,
    ceiling: Ceiling | None = None,
) -> tuple[Message, ...]:
    """What the model sees of ``messages`` under ``policy``; the record is untouched.

    ``policy`` is first resolved for ``model`` (an append-only history for a model that
    binds its reasoning to the prefix, :meth:`RetentionPolicy.for_model`). In order:
    the turn windows (``live_turns``, ``attachments_live_turns``; not append-only), the
    tool images still live (:func:`plan_tool_images`: the count window, then the
    ceiling, the model's and the provider's ``ceiling``, each met by one batch; a repeat
    of a live image becomes :func:`repeat_descriptor`), then ``image_token_budget``.
    Pure and idempotent: the same messages give the same view. ``model`` counts image
    tokens (``image_token_budget`` needs one: without, it raises
    :class:`~visus.errors.InvalidInputError`). Messages that keep every part are returned
    as the same objects.

    Example:
        >>> model_view([]) == ()
        True
    """
    policy = policy.for_model(model)
    view = list(messages)
    current = current_turn(view)
    first_live = policy.first_live_turn(current)
    first_attachment = policy.first_live_attachment_turn(current)

    for i, message in enumerate(view):
        views, attachments = message.turn < first_live, message.turn < first_attachment
        if (views or attachments) and message.kind != "assistant":
            view[i] = _elide_old(message, views=views, attachments=attachments)
    _apply_count(view, policy, model, ceiling)

    budget = policy.image_token_budget
    if budget is not None:
        if model is None:
            raise InvalidInputError("an image_token_budget needs a model to count tokens for")
        _apply_budget(view, budget, model)
    return tuple(view)


def _apply_budget(view: list[Message], budget: int, model: ModelSpec) -> None:
    live: list[tuple[int, int, ImagePart, int]] = []  # (message, part, image, tokens)
    for i, message in enumerate(view):
        for j, part in enumerate(message.parts):
            if isinstance(part, ImagePart):
                live.append((i, j, part, image_tokens(model, part.width, part.height)))
    total = sum(t for *_, t in live)
    if total <= budget:
        return
    newest = max((i for i, *_ in live), default=-1)
    to_elide: dict[int, set[int]] = {}
    for i, j, part, tokens in live:  # oldest first
        if total <= budget:
            break
        if i == newest or not isinstance(part.origin, PerceptionOrigin):
            continue
        to_elide.setdefault(i, set()).add(j)
        total -= tokens
    for i, parts in to_elide.items():
        view[i] = _elide(view[i], parts)


@dataclass(frozen=True, slots=True)
class ImageStatus:
    """One image of a record and what a policy makes of it.

    ``message``/``part`` are its position (0-based) in the record, ``live`` says
    whether the model view keeps its pixels and ``tokens`` estimates what it costs
    ``model`` when live.
    """

    message: int
    part: int
    turn: int
    image: ImagePart
    live: bool
    tokens: int


def image_statuses(
    messages: Sequence[Message],
    policy: RetentionPolicy = DEFAULT_POLICY,
    *,
    model: ModelSpec,
) -> tuple[ImageStatus, ...]:
    """Every image of ``messages`` in order, live or elided under ``policy``, with tokens.

    Example:
        >>> from visus.models import get_model
        >>> from visus.record.messages import ImagePart, PerceptionOrigin, ToolResult
        >>> shot = ImagePart("ab" * 32, "image/png", 10, 1000, 1000, PerceptionOrigin("a.png"))
        >>> record = [ToolResult("c1", "view", (shot,), turn=t) for t in (1, 2)]
        >>> spec = get_model("claude-sonnet-4-6")
        >>> [(s.turn, s.live, s.tokens) for s in image_statuses(record, model=spec)]
        [(1, False, 1296), (2, True, 1296)]
    """
    view = model_view(messages, policy, model=model)
    out: list[ImageStatus] = []
    # model_view keeps every message and part in place, so positions line up.
    for i, (before, after) in enumerate(zip(messages, view, strict=True)):
        for j, part in enumerate(before.parts):
            if isinstance(part, ImagePart):
                out.append(
                    ImageStatus(
                        message=i,
                        part=j,
                        turn=before.turn,
                        image=part,
                        live=isinstance(after.parts[j], ImagePart),
                        tokens=image_tokens(model, part.width, part.height),
                    )
                )
    return tuple(out)
