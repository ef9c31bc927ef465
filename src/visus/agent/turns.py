"""One turn of :class:`~visus.agent.loop.Agent` as data: what a turn takes and gives
(:class:`PastedImage`, :class:`TurnResult`), its running state (:class:`Turn`), and the
pure helpers the loop uses to take an unfinished turn over from its record and to
answer calls that never ran."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from visus.agent.tools import OutboundImage, ToolContext
from visus.errors import VisusError
from visus.providers.base import OnDelta
from visus.record.blobs import BlobStore
from visus.record.messages import (
    AssistantMessage,
    DocumentPart,
    ImagePart,
    Message,
    Part,
    StopReason,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
)

__all__ = [
    "CANCELLED",
    "NOT_RERUN",
    "DeltaCallback",
    "PastedImage",
    "ResumeRefusedError",
    "Say",
    "StatusCallback",
    "ToolCallback",
    "Turn",
    "TurnResult",
    "cache_key",
    "elide_part",
    "last_step",
    "refusal",
    "resend_outbox",
    "sayer",
    "turn_start",
    "unanswered",
]


#: The one delta-callback type (the providers' :data:`~visus.providers.base.OnDelta`).
DeltaCallback = OnDelta
#: Called as each tool call starts (before it runs), e.g. to show it in a terminal.
ToolCallback = Callable[[ToolCall], Awaitable[None] | None]
#: Called with what the turn is doing now ("fitting 2 images for gpt-4.1",
#: "waiting for gpt-4.1"), for a progress line; tool calls go to a ToolCallback. It may
#: be a coroutine function (a server appends a frame), which is awaited.
StatusCallback = Callable[[str], Awaitable[None] | None]
Say = Callable[[str], Awaitable[None]]


def sayer(on_status: StatusCallback | None) -> Say:
    """``on_status`` as one awaitable call, whichever kind it is (or none)."""

    async def say(label: str) -> None:
        said = on_status(label) if on_status is not None else None
        if said is not None:
            await said

    return say


@dataclass(frozen=True, slots=True)
class PastedImage:
    """An image a user put into their message (bytes as received)."""

    data: bytes
    media_type: str | None = None
    filename: str | None = None


@dataclass(frozen=True, slots=True)
class TurnResult:
    answer: str
    usage: Usage
    steps: int
    session: str
    turn: int
    images: tuple[OutboundImage, ...] = ()
    #: "answer" | "max_tokens" (the answer was cut off at the output limit) | "step_limit"
    stopped: str = "answer"
    messages: tuple[Message, ...] = field(default=(), repr=False)
    #: What the loop did to recover, e.g. images re-fitted after a provider refused them.
    notes: tuple[str, ...] = ()
    #: Why the model's last step stopped, as its wire said (None: the wire did not say).
    stop_reason: StopReason | None = None

    @property
    def truncated(self) -> bool:
        """True when the final answer was cut off at the model's output limit."""
        return self.stopped == "max_tokens"


class ResumeRefusedError(VisusError):
    """A turn taken up from its record cannot go on: a tool call that changes things
    (not :attr:`~visus.agent.tools.Tool.read_only`) has no recorded result, so it may
    or may not have run. The message names the call."""


@dataclass(slots=True)
class Turn:
    """One turn as it runs: where it records, and what it has spent and said so far."""

    session_id: str
    number: int
    history: list[Message]
    ctx: ToolContext
    usage: Usage = field(default_factory=Usage)
    answer: str = ""
    notes: list[str] = field(default_factory=list)
    stop: StopReason | None = None

    def result(self, steps: int, stopped: str) -> TurnResult:
        return TurnResult(
            self.answer,
            self.usage,
            steps,
            self.session_id,
            self.number,
            tuple(self.ctx.outbox),
            stopped,
            tuple(self.history),
            tuple(self.notes),
            self.stop,
        )


def turn_start(history: Sequence[Message], request_id: str) -> int | None:
    """Where the turn answering ``request_id`` starts in ``history`` (its user message),
    if it was recorded; only the session's last turn can be unfinished."""
    for i in range(len(history) - 1, -1, -1):
        m = history[i]
        if isinstance(m, UserMessage):
            return i if m.request_id == request_id else None
    return None


def last_step(recorded: Sequence[Message]) -> AssistantMessage | None:
    """The turn's last model reply, unless every step after it is recorded too."""
    for m in reversed(recorded):
        if isinstance(m, AssistantMessage):
            return m
    return None


def resend_outbox(turn: Turn, recorded: Sequence[Message], blobs: BlobStore) -> None:
    """The images the turn's recorded ``send_image`` calls sent, back in its outbox (the
    process that ran them died with its outbox): the record keeps the very bytes."""
    for m in recorded:
        if not isinstance(m, ToolResult) or m.tool_name != "send_image" or m.is_error:
            continue
        for part in m.parts:
            if isinstance(part, ImagePart) and part.origin.kind == "perception":
                data = blobs.get(part.digest)
                image = OutboundImage(part.media_type, data, source=part.origin.source)
                turn.ctx.outbox.append(image)


def refusal(call: ToolCall) -> str:
    args = json.dumps(dict(call.arguments), ensure_ascii=False, sort_keys=True)
    if len(args) > 200:
        args = args[:199] + "…"
    return (
        f"the turn was taken over from a server that stopped during the tool call "
        f"{call.name} {args} (call {call.id}); its result was never recorded and "
        f"{call.name} changes things, so it is not run a second time: check whether it "
        "took effect, then send your message again"
    )


NOT_RERUN = (
    "(not run again: the server running this call stopped before its result was "
    "recorded; it may or may not have taken effect)"
)


def elide_part(part: ImagePart | DocumentPart) -> Part:
    origin = part.origin
    what = "image" if isinstance(part, ImagePart) else "document"
    if origin.kind == "perception":
        return TextPart(
            f"[{what} omitted: the provider refused the {what} from {origin.source}; "
            f'call {origin.tool}("{origin.source}") to try again]'
        )
    return TextPart(f"[{what} omitted: the provider refused this pasted {what}]")


CANCELLED = "(stopped by the user)"


def cache_key(session_id: str) -> str:
    """A session's prompt-cache key: stable across processes, and not its name (sent to
    the provider)."""
    return "visus-" + hashlib.sha256(session_id.encode()).hexdigest()[:24]


def unanswered(call: ToolCall, turn: int, why: str = CANCELLED) -> ToolResult:
    """The error result a call gets that was never run (or not to the end)."""
    return ToolResult(
        call_id=call.id,
        tool_name=call.name,
        parts=(TextPart(why),),
        is_error=True,
        turn=turn,
    )
