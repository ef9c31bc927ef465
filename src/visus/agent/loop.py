"""The agent loop: one user turn through record, retention, lowering and a provider.

user message -> record -> model_view (retention) -> provider (lowers and sends)
-> parse -> run tool calls -> record results -> repeat, until the model answers
without tool calls or the step limit is reached.

Example:
    >>> # agent = Agent(client=client, model=get_model("reference"), stores=stores,
    >>> #               reach=Reach.cwd())
    >>> # result = await agent.run_turn("s1", "call view {\\"path\\": \\"grid.png\\"}")
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from visus import limits
from visus.agent.mcp_client import McpMounts
from visus.agent.tools import OutboundImage, ResultCache, ToolContext, ToolRegistry
from visus.errors import ImageRejectedError, InvalidInputError, MediaError
from visus.media import fit
from visus.media.types import Profile
from visus.models import ModelSpec
from visus.perception import Reach
from visus.providers.base import OnDelta, ProviderClient, aclose
from visus.record.blobs import BlobStore
from visus.record.messages import (
    AssistantMessage,
    AttachmentOrigin,
    DocumentPart,
    ImagePart,
    Message,
    ModelRequest,
    Part,
    StopReason,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
)
from visus.record.sessions import SessionLog
from visus.retention import RetentionPolicy, model_view
from visus.wire import RefitCache

if TYPE_CHECKING:
    from visus.config import VisusConfig

__all__ = [
    "Agent",
    "DeltaCallback",
    "PastedImage",
    "StatusCallback",
    "ToolCallback",
    "TurnResult",
]

log = logging.getLogger(__name__)

#: The one delta-callback type (the providers' :data:`~visus.providers.base.OnDelta`).
DeltaCallback = OnDelta
#: Called as each tool call starts (before it runs), e.g. to show it in a terminal.
ToolCallback = Callable[[ToolCall], Awaitable[None] | None]
#: Called with what the turn is doing now ("fitting 2 image(s) for gpt-4.1",
#: "waiting for gpt-4.1"), for a progress line; tool calls go to a ToolCallback.
StatusCallback = Callable[[str], None]

DEFAULT_SYSTEM = (
    "You are a helpful assistant with eyes. Use `read` to read a file as text and `view` "
    "to see a file as pixels (images, SVG, PDF pages, rendered text). Images you viewed in "
    "earlier turns may be elided from context; call view again to see them."
)

# When a provider refuses an image, the retry re-fits every live image to this.
_CONSERVATIVE = Profile(
    max_edge=1024,
    max_pixels=1024 * 1024,
    max_bytes=1 * limits.MB,
    media_types=frozenset({"image/png", "image/jpeg"}),
)


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


@dataclass
class Agent:
    """Runs turns of one model with a tool registry over a session store."""

    client: ProviderClient
    model: ModelSpec
    sessions: SessionLog
    blobs: BlobStore
    reach: Reach
    tools: ToolRegistry = field(default_factory=ToolRegistry.builtin)
    policy: RetentionPolicy = field(default_factory=RetentionPolicy)
    system: str | None = DEFAULT_SYSTEM
    max_steps: int = limits.AGENT_MAX_STEPS
    #: Derived (re-fitted) images by source digest and profile, so a step re-uses them.
    refit_cache: RefitCache = field(default_factory=RefitCache)
    #: The ``provider:model`` ref the agent was built from (kept in session meta).
    model_ref: str = ""
    #: MCP servers whose tools join ``tools`` (as ``NAME__TOOL``) on the first turn.
    mcp: McpMounts | None = None
    #: The configuration it was built with; its tools read this, never visus.toml again.
    config: VisusConfig | None = None
    #: Answers its tools paid for (vision_analyze), kept across turns.
    result_cache: ResultCache | None = None
    _reads: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)
    # session id -> (log file signature after our last write, the messages it holds)
    _cache: dict[str, tuple[Hashable, list[Message]]] = field(default_factory=dict, repr=False)

    async def aclose(self) -> None:
        """Release the provider client's connections and close the mounted MCP servers'
        sessions (call before the event loop ends)."""
        if self.mcp is not None:
            await self.mcp.aclose()
        await aclose(self.client)

    async def run_turn(
        self,
        session_id: str,
        text: str,
        images: Sequence[PastedImage] = (),
        *,
        on_delta: DeltaCallback | None = None,
        on_tool: ToolCallback | None = None,
        on_status: StatusCallback | None = None,
    ) -> TurnResult:
        """Run one user turn to its final answer; everything is recorded as it happens.

        ``on_status`` hears each slow phase as it starts (fitting the pasted images,
        waiting for the model), so a caller can show progress.

        Cancelling the task that runs it stops the turn at its next await; every tool
        call the model asked for then gets a "cancelled" result in the record, so the
        session stays valid for every wire (each call answered) and a next turn works.
        """
        # In the turn's own event loop: the MCP client sessions belong to it.
        started = await self.mcp.start(self.tools.add) if self.mcp is not None else []
        history = self._history(session_id)
        turn = max((m.turn for m in history), default=0) + 1

        # Fitting pasted images decodes and re-encodes them: off the event loop, as
        # tether's egress fitting is, so one big paste never stalls other turns.
        status = on_status or (lambda _: None)
        if images:
            big = max(len(i.data) for i in images)
            status(f"fitting {len(images)} image(s) for {self.model.name} ({big:,} bytes)")
        parts = await asyncio.to_thread(self._user_parts, text, images) if images else None
        user = UserMessage(parts=parts or self._user_parts(text, ()), turn=turn)
        self._append(session_id, history, user)

        ctx = ToolContext(
            reach=self.reach,
            model=self.model,
            blobs=self.blobs,
            session_id=session_id,
            turn=turn,
            # Reads stay fresh across turns of this agent; a new process starts with
            # none, so an edit after a restart needs a new read (the safe side).
            read_digests=self._reads.setdefault(session_id, {}),
            record=history,  # the list grows as the turn goes: digest refs see it all
            config=self.config,
            result_cache=self.result_cache,
        )
        usage = Usage()
        answer = ""
        notes: list[str] = list(started)
        stop: StopReason | None = None

        def result(steps: int, stopped: str) -> TurnResult:
            return TurnResult(
                answer,
                usage,
                steps,
                session_id,
                turn,
                tuple(ctx.outbox),
                stopped,
                tuple(history),
                tuple(notes),
                stop,
            )

        for step in range(1, self.max_steps + 1):
            status(f"waiting for {self.model.name}")
            try:
                reply = await self._complete(history, on_delta, notes, _cache_key(session_id))
            except asyncio.CancelledError:
                # The user's message stays answered, so the next turn alternates cleanly.
                stopped = AssistantMessage(parts=(TextPart(_CANCELLED),), turn=turn)
                self._append(session_id, history, stopped)
                raise
            reply = replace(reply, turn=turn)
            if reply.usage is not None:
                usage = usage + reply.usage
            self._append(session_id, history, reply)
            answer, stop = reply.text, reply.stop_reason
            if not reply.tool_calls:
                # An answer cut off at the output limit is not a finished answer.
                return result(step, "max_tokens" if reply.truncated else "answer")
            for index, call in enumerate(reply.tool_calls):
                spent = ctx.tool_usage
                before = len(spent)
                try:
                    if on_tool is not None:
                        maybe = on_tool(call)
                        if maybe is not None:
                            await maybe
                    outcome = await self.tools.call(call.name, call.arguments, ctx)
                except asyncio.CancelledError:
                    for left in reply.tool_calls[index:]:
                        self._append(session_id, history, _cancelled(left, turn))
                    raise
                tool_cost = sum(spent[before:], Usage()) if len(spent) > before else None
                if tool_cost is not None:
                    usage = usage + tool_cost
                record = ToolResult(
                    call_id=call.id,
                    tool_name=call.name,
                    parts=outcome.parts,
                    is_error=outcome.is_error,
                    turn=turn,
                    usage=tool_cost,
                )
                self._append(session_id, history, record)
        answer = answer or (
            f"(stopped after {self.max_steps} steps without a final answer; ask again to continue)"
        )
        return result(self.max_steps, "step_limit")

    # --- steps ------------------------------------------------------------------------

    async def _complete(
        self,
        history: Sequence[Message],
        on_delta: DeltaCallback | None,
        notes: list[str],
        cache_key: str | None = None,
    ) -> AssistantMessage:
        view = model_view(history, self.policy, model=self.model)
        send = functools.partial(self._send, on_delta=on_delta, cache_key=cache_key)
        try:
            return await send(view)
        except ImageRejectedError as first:
            # One image must never make a session unusable: re-fit every live image
            # conservatively and retry; if that is refused too, elide them all. The
            # record keeps the originals: this changes only what this request carries.
            notes.append(f"provider refused an image ({first}); re-fitted and retried")
            refitted = tuple(self._map_images(view, self._refit_part))
            try:
                return await send(refitted)
            except ImageRejectedError as second:
                notes.append(f"provider refused the re-fitted image ({second}); elided")
                return await send(tuple(self._map_images(view, _elide_part)))

    async def _send(
        self,
        view: Sequence[Message],
        *,
        on_delta: DeltaCallback | None,
        cache_key: str | None = None,
    ) -> AssistantMessage:
        request = ModelRequest(
            messages=tuple(view),
            system=self.system,
            tools=self.tools.specs(),
            cache_key=cache_key,
        )
        return await self.client.complete(
            request,
            model=self.model,
            blobs=self.blobs,
            on_delta=on_delta,
            refit_cache=self.refit_cache,
        )

    def _history(self, session_id: str) -> list[Message]:
        """The session's messages: from memory while the log is as this agent left
        it, else (first use, or another writer appended) loaded from disk."""
        if not self.sessions.exists(session_id):
            meta = {"model": self.model_ref or self.model.name}
            self.sessions.create(session_id, meta=meta)
        cached = self._cache.get(session_id)
        if cached is not None and cached[0] == self.sessions.revision(session_id):
            return cached[1]
        # The load reads and hashes every blob once (the history is then kept in
        # memory): a bit-flipped image degrades to a note now, not mid-request.
        loaded = self.sessions.load(session_id, blobs=self.blobs)
        history = list(loaded.messages)
        for problem in loaded.problems:
            log.warning("session %s: %s", session_id, problem)
        self._cache[session_id] = (self.sessions.revision(session_id), history)
        return history

    def _append(self, session_id: str, history: list[Message], message: Message) -> None:
        self.sessions.append(session_id, message)
        history.append(message)
        self._cache[session_id] = (self.sessions.revision(session_id), history)

    # --- images -----------------------------------------------------------------------

    def _user_parts(self, text: str, images: Sequence[PastedImage]) -> tuple[Part, ...]:
        parts: list[Part] = []
        for i, img in enumerate(images, 1):
            try:
                fitted = fit(img.data, self.model.profile())
            except MediaError as e:
                name = f" ({img.filename})" if img.filename else ""
                raise InvalidInputError(f"image {i}{name} cannot be used: {e}") from e
            digest = self.blobs.put(fitted.data, fitted.media_type)
            parts.append(
                ImagePart(
                    digest=digest,
                    media_type=fitted.media_type,
                    size=fitted.size,
                    width=fitted.width,
                    height=fitted.height,
                    origin=AttachmentOrigin(filename=img.filename),
                )
            )
        if text or not parts:
            parts.insert(0, TextPart(text))
        return tuple(parts)

    def _refit_part(self, part: ImagePart | DocumentPart) -> Part:
        if isinstance(part, DocumentPart):
            return part  # nothing to re-fit in a PDF; the second retry elides it
        try:
            fitted = fit(self.blobs.get(part.digest), _CONSERVATIVE)
        except Exception:  # a blob we cannot re-fit is elided rather than failing the turn
            return _elide_part(part)
        digest = self.blobs.put(fitted.data, fitted.media_type)
        return replace(
            part,
            digest=digest,
            media_type=fitted.media_type,
            size=fitted.size,
            width=fitted.width,
            height=fitted.height,
        )

    @staticmethod
    def _map_images(
        view: Sequence[Message], fn: Callable[[ImagePart | DocumentPart], Part]
    ) -> list[Message]:
        out: list[Message] = []
        for m in view:
            if isinstance(m, AssistantMessage):
                out.append(m)
                continue
            parts = tuple(fn(p) if isinstance(p, ImagePart | DocumentPart) else p for p in m.parts)
            out.append(replace(m, parts=parts))
        return out


def _elide_part(part: ImagePart | DocumentPart) -> Part:
    origin = part.origin
    what = "image" if isinstance(part, ImagePart) else "document"
    if origin.kind == "perception":
        return TextPart(
            f"[{what} omitted: the provider refused the {what} from {origin.source}; "
            f'call {origin.tool}("{origin.source}") to try again]'
        )
    return TextPart(f"[{what} omitted: the provider refused this pasted {what}]")


_CANCELLED = "(stopped by the user)"


def _cache_key(session_id: str) -> str:
    """A session's prompt-cache key: stable across processes, and not its name (sent to
    the provider)."""
    return "visus-" + hashlib.sha256(session_id.encode()).hexdigest()[:24]


def _cancelled(call: ToolCall, turn: int) -> ToolResult:
    return ToolResult(
        call_id=call.id,
        tool_name=call.name,
        parts=(TextPart(_CANCELLED),),
        is_error=True,
        turn=turn,
    )
