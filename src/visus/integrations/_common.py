"""What the three framework adapters repeat, said once.

:mod:`visus.integrations.core` is the framework-neutral pipeline (tools, fitting,
retention); this module holds the steps each adapter then spells in its own
framework's types, so a framework module holds only that framework's glue:

* :class:`RequestImages` (one request's image counts) and :func:`turns_of` (a turn
  starts at each user message, however a framework says so);
* :func:`split_images`: one tool result's images as a request carries them, live ones
  as the adapter sends them, the others as their descriptor or repeat note
  (:func:`not_sent`), and :func:`hoisted_label` for a wire that takes images only in
  a user message;
* :func:`stale_replies`: the replies whose reasoning an eviction already cost;

* :func:`bound_thinking`: the ``thinking`` object that lets a model which binds its
  reasoning to the history (Anthropic "Preserved thinking": Opus 5.5, Sonnet 5.5,
  Haiku 5.5, Fable 5.x) take visus's evictions. Replacing an old image by its
  descriptor edits the history before later thinking blocks; a framework that replays
  them (pydantic-ai, LangChain) would meet a 400 at the first eviction. With
  ``block_binding.prefix_mismatch_behavior: "drop_block"`` (and its beta, which each
  framework adds or :data:`BINDING_BETA` names) the API drops the stale blocks instead,
  lists them in ``input_transformations`` and the model redoes that reasoning, as
  visus's own wire asks on every request to such a model
  (:func:`visus.wire.thinking_config`);
* :func:`checked_effort`: the ``effort`` a caller gave the integration, refused with
  the levels the model takes when the catalog says it takes others (as
  ``build_agent(effort=)`` refuses it).

Example:
    >>> from visus.models import get_model
    >>> bound_thinking(get_model("claude-opus-5-5"), None)
    {'type': 'adaptive', 'block_binding': {'prefix_mismatch_behavior': 'drop_block'}}
    >>> bound_thinking(get_model("claude-sonnet-4-6"), None) is None
    True
    >>> checked_effort(get_model("claude-opus-5-5"), "low")
    'low'
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from visus.errors import ConfigError
from visus.integrations.core import NO_VIEW, ImageTally, ViewCall, VisionCore
from visus.models import ModelSpec
from visus.record.messages import AssistantMessage, Message, ProviderState, ToolResult
from visus.retention import ImageFate, Shown
from visus.retention.reasoning import drop_stale_reasoning
from visus.wire import Wire
from visus.wire._thinking import BINDING_BETA

__all__ = [
    "BINDING_BETA",
    "DROP_BLOCK",
    "RequestImages",
    "Split",
    "bound_thinking",
    "checked_effort",
    "hoisted_label",
    "not_sent",
    "split_images",
    "stale_replies",
    "turns_of",
    "wire_of",
]

T = TypeVar("T")


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


def turns_of(messages: Iterable[T], starts: Callable[[T], bool]) -> list[int]:
    """Each message's turn: one starts at each message ``starts`` says opens one (a
    user's); what comes before the first is turn 1.

    Example:
        >>> turns_of("aUbbUc", str.isupper)
        [1, 1, 1, 1, 2, 2]
    """
    turns: list[int] = []
    turn = 0
    for m in messages:
        if starts(m):
            turn += 1
        turns.append(max(turn, 1))
    return turns


@dataclass(slots=True)
class Split(Generic[T]):
    """One tool result's images as a request carries them: ``swap`` maps ``id`` of each
    image's own part to what is sent instead, ``live`` pairs each live image with the
    part it is sent as, ``notes`` are the texts the others became, in order."""

    swap: dict[int, Any] = field(default_factory=dict)
    live: list[tuple[T, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def split_images(
    images: Sequence[T],
    fates: Sequence[str],
    tally: ImageTally,
    *,
    part: Callable[[T], object],
    live: Callable[[T], Any],
    note: Callable[[T, bool], str],
    text: Callable[[str], Any],
) -> Split[T]:
    """Each image of one tool result by its fate (``live``, ``repeat`` or evicted):
    ``live(image)`` the part a live one is sent as, ``note(image, repeat)`` the text
    another becomes and ``text(note)`` that text as a part; ``part(image)`` is the
    image's own part in the result. The counts go to ``tally``.

    Example:
        >>> tally = ImageTally()
        >>> split = split_images(["a", "b"], ["evicted", "live"], tally, part=id,
        ...                      live=str.upper, note=lambda i, r: f"[{i}]", text=str)
        >>> split.live, split.notes, (tally.live, tally.elided)
        ([('b', 'B')], ['[a]'], (1, 1))
    """
    out: Split[T] = Split()
    for image, fate in zip(images, fates, strict=True):
        if fate == "live":
            sent = live(image)
            out.swap[id(part(image))] = sent
            out.live.append((image, sent))
            continue
        repeat = fate == "repeat"
        said = note(image, repeat)
        out.swap[id(part(image))] = text(said)
        out.notes.append(said)
        tally.repeated += repeat
        tally.elided += not repeat
    tally.live += len(out.live)
    return out


def hoisted_label(call_id: object) -> tuple[str, str]:
    """What a tool result whose images went to the next user message says instead, and
    the label before each of them there.

    Example:
        >>> hoisted_label("c1")[1]
        'Image from tool call c1:'
    """
    return (
        f"(the image is in the next user message, labelled {call_id})",
        f"Image from tool call {call_id}:",
    )


def not_sent(
    core: VisionCore,
    found: tuple[bytes, str] | None,
    url: str | None,
    turn: int,
    view: ViewCall = NO_VIEW,
    *,
    repeat: bool = False,
) -> str:
    """The text a tool image of ``turn`` is sent as when it is not live: its descriptor,
    or with ``repeat`` the note that a live image has the same bytes. ``found``: its
    bytes and media type (stored, so the digest the text names shows them again); else
    ``url``, a web image's, which ``view`` takes; neither (a provider file id, a data
    URL that is not base64): a note that names nothing to view."""
    describe = core.repeat_descriptor if repeat else core.descriptor
    if found is None:
        if url is None or url.startswith("data:"):
            return f"[image elided: returned by a tool in turn {turn}]"
        return describe("", turn, ViewCall(url))
    return describe(core.remember(*found), turn, view)


# The wire each provider's models are spoken to on, where there is one.
_WIRES: Mapping[str, Wire] = {
    "anthropic": "anthropic",
    "bedrock": "bedrock",
    "gemini": "gemini",
    "ollama": "ollama",
}


def wire_of(provider: str, *, chat: bool | None = None) -> Wire | None:
    """The wire a framework speaks to ``provider``'s model on (its byte and image
    limits bound retention's plan): OpenAI's is Chat Completions or Responses as
    ``chat`` says, unknown when it does not; None for a provider visus has no wire for.

    Example:
        >>> wire_of("anthropic"), wire_of("openai", chat=True), wire_of("openai")
        ('anthropic', 'openai-chat', None)
    """
    if provider in ("openai", "openai-compatible"):
        return None if chat is None else "openai-chat" if chat else "openai-responses"
    return _WIRES.get(provider)


#: What a stale thinking block does on request (Anthropic "Preserved thinking": "Set
#: the mismatch behavior"): dropped and listed, not a 400.
DROP_BLOCK: Mapping[str, str] = {"prefix_mismatch_behavior": "drop_block"}


def bound_thinking(spec: ModelSpec, thinking: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``thinking`` (the caller's, else adaptive) with ``block_binding`` set to drop stale
    blocks, for a model that binds its reasoning to the prefix; None when there is
    nothing to add: the model does not bind, the caller chose a binding of their own
    (an explicit ``"error"`` is theirs to keep), or the thinking is not adaptive (the
    only kind ``block_binding`` goes with).

    Example:
        >>> from visus.models import get_model
        >>> opus = get_model("claude-opus-5-5")
        >>> bound_thinking(opus, {"type": "adaptive", "display": "summarized"})["display"]
        'summarized'
        >>> bound_thinking(opus, {"block_binding": {}}) is None
        True
    """
    if not spec.preserved_thinking or spec.provider not in ("anthropic", "bedrock"):
        return None
    given = dict(thinking or {"type": "adaptive"})
    if "block_binding" in given or given.get("type", "adaptive") != "adaptive":
        return None
    return {"type": "adaptive", **given, "block_binding": dict(DROP_BLOCK)}


def checked_effort(spec: ModelSpec, effort: str | None) -> str | None:
    """``effort`` to send ``spec``'s model: refused (:class:`~visus.errors.ConfigError`,
    naming the levels) when the catalog lists the levels the model takes and this is
    not one; a model the catalog lists none for gets it as given (its provider judges).

    Example:
        >>> from visus.models import get_model
        >>> checked_effort(get_model("claude-opus-5-5"), "ultra")
        Traceback (most recent call last):
        ...
        visus.errors.ConfigError: claude-opus-5-5 takes no effort 'ultra' (its levels: ...)
    """
    if effort is None or not spec.efforts or effort in spec.efforts:
        return effort
    levels = ", ".join(spec.efforts)
    raise ConfigError(f"{spec.name} takes no effort {effort!r} (its levels: {levels})")


# Stand-ins for the framework's messages, for drop_stale_reasoning (which reads only
# where the replies are and which of them carry reasoning).
_REASONED = AssistantMessage(provider_state=ProviderState("integration", "[]"))
_REPLY = AssistantMessage()
_OTHER = ToolResult("", "", ())


def stale_replies(
    size: int,
    reasoned: Collection[int],
    replies: Sequence[int],
    image_at: Sequence[int],
    shown: Sequence[Shown],
    plan: Callable[[Sequence[Shown]], tuple[ImageFate, ...]],
) -> set[int]:
    """Which of a framework history's replies (positions among ``size`` messages) to
    send without their reasoning: those whose blocks an eviction already had the
    provider drop (:mod:`visus.retention.reasoning`: sent again at every later step they
    would be dropped, counted and redone every time). ``reasoned``: the replies that
    carry reasoning; ``replies``: every reply; ``image_at``: the position of each tool
    image of ``shown`` (oldest first); ``plan``: the plan of a request holding only the
    first of them. The same arithmetic as visus's agent, on the framework's history.

    Example:
        >>> def plan(s):  # a request with three images or more evicts the oldest
        ...     return tuple(ImageFate("evicted" if len(s) >= 3 and i == 0 else "live")
        ...                  for i in range(len(s)))
        >>> stale_replies(7, {1, 3, 5}, [1, 3, 5], [0, 2, 4, 6], [Shown(d) for d in "abcd"], plan)
        {1, 3}
    """
    view: list[Message] = [_OTHER] * size
    for p in replies:
        view[p] = _REASONED if p in reasoned else _REPLY
    drop_stale_reasoning(view, image_at, shown, plan)
    return {p for p in reasoned if view[p] is not _REASONED}
