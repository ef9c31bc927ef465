"""One model request's view of a framework history: the steps each adapter shares.

An adapter reads its framework's messages (which message opens a turn, which tool
images each holds, in its framework's types); this module decides the rest, once:

* :class:`Window`: the request being prepared. It numbers the turns
  (:func:`turns_of`), asks retention's one plan for the fate of each tool image the
  turn window keeps (:meth:`~visus.integrations.core.VisionCore.plan`), fits a live
  image to the model and counts its tokens (:meth:`Window.fitted`), says what text
  another becomes (:meth:`Window.note`, :func:`not_sent`), which replies go without
  their reasoning (:meth:`Window.stale`, :func:`stale_replies`) and the request's
  counts (:class:`RequestImages`);
* :func:`split_images`: one tool result's images by their fate, and
  :meth:`Split.content`: that result's content as sent, with :func:`hoisted_label`
  for a wire that takes images only in a user message (Chat Completions);
  :meth:`Window.rewritten` gathers what each run of tool results hoists into one user
  message after it;
* :func:`held_in`: the images a conversation holds, which a ``view("sha256:...")`` of
  its own may name;
* :func:`wire_of`: the wire a framework speaks to a provider on (its limits bound the
  plan), and :func:`breakpoints`: where the prompt cache's breakpoints go in a
  framework's history when its caching is on.

Example:
    >>> import tempfile
    >>> from visus.agent.options import VisionOptions
    >>> from visus.models import get_model
    >>> core = VisionCore(VisionOptions.of([tempfile.mkdtemp()], data=tempfile.mkdtemp()))
    >>> history = ["U", "a", "U", "shot"]  # two user turns; the second holds one image
    >>> images = lambda m: [("sha256:ab", None)] if m == "shot" else []
    >>> window = Window.of(core, get_model("gpt-4.1"), None, history, str.isupper, images)
    >>> window.turns, window.fates(2, 1), window.request().live
    ([1, 1, 2, 2], ['live'], 0)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from visus.integrations.core import (
    NO_VIEW,
    HeldImage,
    ImageTally,
    RequestImages,
    ToolImage,
    ViewCall,
    VisionCore,
)
from visus.models import ModelSpec
from visus.perception.values import content_digest
from visus.record.messages import AssistantMessage, Message, ProviderState, ToolResult
from visus.retention import ImageFate, Shown
from visus.retention.reasoning import drop_stale_reasoning
from visus.wire import Wire, window_marks

__all__ = [
    "RequestImages",
    "Split",
    "Window",
    "breakpoints",
    "held_in",
    "hoisted_label",
    "not_sent",
    "split_images",
    "stale_replies",
    "turns_of",
    "wire_of",
]

T = TypeVar("T")

#: Bytes and media type of an image a framework history holds inline (None: a web URL,
#: a provider file id or a malformed data URL).
Found = tuple[bytes, str] | None


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


def held_in(
    messages: Sequence[T],
    starts: Callable[[T], bool],
    images: Callable[[T], Iterable[tuple[bytes | None, ViewCall]]],
    digest: Callable[[bytes], str] = content_digest,
) -> list[HeldImage]:
    """The images ``messages`` hold, each with its turn (``starts``: the messages that
    open one) and the ``view`` call that made it: ``images`` gives each message's
    (bytes, call); an image with no bytes (a web URL) is none a digest names.
    ``digest``: the bytes' sha256 (an integration's memo of it).

    Example:
        >>> shots = lambda m: [(m, NO_VIEW)] if isinstance(m, bytes) else []
        >>> [h.turn for h in held_in(["U", b"a", "U", b"b"], lambda m: m == "U", shots)]
        [1, 2]
    """
    return [
        HeldImage(digest(data), turn, view)
        for m, turn in zip(messages, turns_of(messages, starts), strict=True)
        for data, view in images(m)
        if data is not None
    ]


@dataclass(slots=True)
class Split(Generic[T]):
    """One tool result's images as a request carries them: ``swap`` maps ``id`` of each
    image's own part to what is sent instead, ``live`` pairs each live image with the
    part it is sent as, ``notes`` are the texts the others became, in order."""

    swap: dict[int, Any] = field(default_factory=dict)
    live: list[tuple[T, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def content(
        self,
        texts: Sequence[str],
        parts: Sequence[Any],
        call_id: object,
        *,
        hoist: bool,
        text: Callable[[str], Any],
        hoisted: Callable[[T, Any], Any],
    ) -> tuple[str | list[Any], list[Any]]:
        """The tool result's content as sent (``texts``: its text, ``parts``: all its
        parts), and what it hoists into the next user message. One plain string when no
        image is live (every model reads it as the tool's text); else, unhoisted, its
        parts with each image swapped; hoisted, its text with a pointer, each live image
        (``hoisted(image, sent)``) going after a label (``text(label)``).

        Example:
            >>> split = Split(live=[("a", "A")], notes=["[b]"])
            >>> sent, moved = split.content(["seen"], [], "c1", hoist=True, text=str,
            ...                             hoisted=lambda image, part: part)
            >>> sent.splitlines()[1], moved
            ('[b]', ['Image from tool call c1:', 'A'])
        """
        if not self.live:
            return "\n".join([*texts, *self.notes]), []
        if not hoist:
            return [self.swap.get(id(p), p) for p in parts], []
        said, label = hoisted_label(call_id)
        moved: list[Any] = []
        for image, sent in self.live:
            moved += [text(label), hoisted(image, sent)]
        return "\n".join([*texts, *self.notes, said]), moved


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
        tally.count(fate)
        if fate == "live":
            sent = live(image)
            out.swap[id(part(image))] = sent
            out.live.append((image, sent))
            continue
        said = note(image, fate == "repeat")
        out.swap[id(part(image))] = text(said)
        out.notes.append(said)
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
    found: Found,
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


def breakpoints(
    messages: Sequence[T], blocks: Callable[[T], int], *live: Callable[[T], bool]
) -> tuple[int, ...]:
    """The messages whose last block carries a prompt-cache breakpoint, oldest first, as
    visus's own Anthropic wire places them (:func:`visus.wire.window_marks`): ending the
    history before the first message with a live image (by the first of the ``live``
    tests a message passes), and on the ladder before it. An eviction rewrites a
    request from there on only, so it reads the prefix up to there from the cache.
    ``blocks``: how many content blocks a message is on the wire.

    Example:
        >>> breakpoints(["text"] * 30 + ["shot"], lambda m: 1, lambda m: m == "shot")
        (13, 29)
    """
    first = next((i for test in live for i, m in enumerate(messages) if test(m)), None)
    return window_marks([blocks(m) for m in messages], first)


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
    *,
    invalidated: bool = False,
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
    # Left out: an earlier eviction had them dropped; with ``invalidated`` also those
    # this request's eviction invalidates (else they go as they came, for the provider
    # to drop and count).
    return {p for p in reasoned if _left_out(view[p], invalidated)}


def _left_out(message: Message, invalidated: bool) -> bool:
    state = message.provider_state if isinstance(message, AssistantMessage) else None
    return state is not None and (state.left_out or (invalidated and state.invalidated))


@dataclass(slots=True)
class Window:
    """One request being prepared for ``model`` on ``wire``: each message's turn, the
    first turn whose images keep pixels, where each tool image of the turn window is
    (``image_at``, oldest first) and how the plan weighs it (``shown``), and the
    request's counts so far (``tally``, which holds the plan's fates still to come).
    Made by :meth:`of`; the adapter then asks each tool result's fates in order."""

    core: VisionCore
    model: ModelSpec
    wire: Wire | None
    turns: list[int]
    first_live: int
    image_at: list[int]
    shown: list[Shown]
    tally: ImageTally

    @classmethod
    def of(
        cls,
        core: VisionCore,
        model: ModelSpec,
        wire: Wire | None,
        messages: Sequence[T],
        starts: Callable[[T], bool],
        images: Callable[[T], Sequence[tuple[str, bytes | None]]],
        reasoned: Callable[[T], int] = lambda _: 0,
    ) -> Window:
        """The window of ``messages`` (``starts``: the messages that open a turn;
        ``images``: each message's tool images, as what tells them apart, a digest or a
        web URL, and their bytes when it holds them; ``reasoned``: the reasoning tokens
        a message holds bound to the prefix, which an eviction would drop)."""
        turns = turns_of(messages, starts)
        first_live = core.live_from(max(turns, default=1), model)
        image_at: list[int] = []
        shown: list[Shown] = []
        since = 0  # reasoning since the last tool image
        for n, (m, turn) in enumerate(zip(messages, turns, strict=True)):
            since += reasoned(m) if model.preserved_thinking else 0
            for key, data in images(m) if turn >= first_live else ():
                image_at.append(n)
                shown.append(replace(core.shown(key, data, model), reasoning=since))
                since = 0
        tally = ImageTally(fates=iter(core.plan(shown, model, wire)))
        return cls(core, model, wire, turns, first_live, image_at, shown, tally)

    @property
    def current(self) -> int:
        """The newest turn."""
        return max(self.turns, default=1)

    def live(self, turn: int) -> bool:
        """Whether images of ``turn`` are in the turn window."""
        return turn >= self.first_live

    def fates(self, turn: int, count: int) -> list[str]:
        """The fates of the next ``count`` tool images, of ``turn``."""
        return [self.tally.fate(self.live(turn)) for _ in range(count)]

    def fitted(self, found: Found) -> ToolImage | None:
        """A live image as the model is sent it (None: it goes as it is, a web URL),
        its tokens counted. A view's was fitted for the model that asked; the model of
        this request may take less."""
        if found is None:
            return None
        image = self.core.tool_image(*found, self.model)
        self.tally.tokens += self.core.tokens(self.model, image.data)
        return image

    def note(
        self, found: Found, url: str | None, turn: int, view: ViewCall, *, repeat: bool
    ) -> str:
        """The text an image that is not live is sent as (:func:`not_sent`)."""
        return not_sent(self.core, found, url, turn, view, repeat=repeat)

    def rewritten(
        self,
        messages: Sequence[T],
        rewrite: Callable[[T, int], tuple[T, list[Any]] | None],
        *,
        result: Callable[[T], bool],
        user: Callable[[list[Any]], T],
    ) -> list[T]:
        """``messages`` as sent: each ``rewrite`` answers (a tool result as sent and
        what it hoists; None: as it is) in its place, and what each run of tool results
        (``result``) hoists in one user message after the run (``user``)."""
        out: list[T] = []
        pending: list[Any] = []
        for m, turn in zip(messages, self.turns, strict=True):
            if pending and not result(m):
                out.append(user(pending))
                pending = []
            done = rewrite(m, turn)
            out.append(m if done is None else done[0])
            pending += [] if done is None else done[1]
        if pending:
            out.append(user(pending))
        return out

    def stale(
        self,
        size: int,
        replies: Sequence[int],
        reasoned: Collection[int],
        *,
        invalidated: bool = False,
    ) -> set[int]:
        """The replies among ``size`` messages (positions as in the messages the window
        was made of) to send without their reasoning (:func:`stale_replies`)."""
        plan = functools.partial(self.core.plan, model=self.model, wire=self.wire)
        shown, at = self.shown, self.image_at
        return stale_replies(size, reasoned, replies, at, shown, plan, invalidated=invalidated)

    def request(self, *, hoisted: bool = False) -> RequestImages:
        """This request's counts (``hoisted``: its live images went to a user message)."""
        return RequestImages.of(self.tally, self.model.name, self.current, hoisted=hoisted)
