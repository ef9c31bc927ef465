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
import logging
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from visus import limits
from visus.agent.mcp_client import McpMounts
from visus.agent.tools import ResultCache, ToolContext, ToolRegistry
from visus.agent.turns import (
    CANCELLED,
    NOT_RERUN,
    DeltaCallback,
    PastedImage,
    ResumeRefusedError,
    Say,
    StatusCallback,
    ToolCallback,
    Turn,
    TurnResult,
    cache_key,
    elide_part,
    last_step,
    refusal,
    resend_outbox,
    sayer,
    turn_start,
    unanswered,
)
from visus.errors import ImageRejectedError, InvalidInputError, MediaError
from visus.media import fit, offload
from visus.media.types import Profile
from visus.models import ModelSpec, image_tokens
from visus.models.allowed import AllowedModels
from visus.perception import Reach
from visus.providers.base import ProviderClient, aclose
from visus.record.blobs import BlobStore
from visus.record.messages import (
    AssistantMessage,
    AttachmentOrigin,
    DocumentPart,
    ImagePart,
    Message,
    ModelRequest,
    Part,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
)
from visus.record.sessions import SessionLog
from visus.retention import RetentionPolicy, model_view
from visus.telemetry import seams
from visus.wire import RefitCache, image_ceiling, progress_notes

if TYPE_CHECKING:
    from visus.config import VisusConfig

__all__ = [
    "Agent",
    "DeltaCallback",
    "PastedImage",
    "ResumeRefusedError",
    "StatusCallback",
    "ToolCallback",
    "TurnResult",
]

log = logging.getLogger(__name__)

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
    #: The models its tools may be asked for (a served agent: the operator's list).
    models: AllowedModels | None = None
    #: How hard the model thinks on each step (one of its catalog ``efforts``: sent as
    #: Anthropic's ``output_config.effort``, OpenAI's ``reasoning.effort``); None: the
    #: model's default.
    effort: str | None = None
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
        request_id: str | None = None,
        resume: bool = False,
    ) -> TurnResult:
        """Run one user turn to its final answer; everything is recorded as it happens.

        ``on_status`` hears each slow phase as it starts (fitting the pasted images,
        waiting for the model), so a caller can show progress.

        Cancelling the task that runs it stops the turn at its next await; every tool
        call the model asked for then gets a "cancelled" result in the record, so the
        session stays valid for every wire (each call answered) and a next turn works.

        ``request_id`` names the request the turn answers; its user message records it.
        With ``resume``, a turn for that request that a process began and never finished
        (it died) goes on from its last recorded step: a recorded answer is returned as
        it is, a tool call without a recorded result runs again when its tool only reads
        (:attr:`~visus.agent.tools.Tool.read_only`), else :class:`ResumeRefusedError`
        names it; then the model is asked again. Without a recorded start, it runs anew.
        """
        with seams.turn(self.model, session_id, request_id=request_id) as traced:
            result = await self._run_turn(
                session_id, text, images, on_delta, on_tool, on_status, request_id, resume
            )
            seams.turn_outcome(traced, result.stopped, result.steps, result.usage)
            return result

    async def _run_turn(
        self,
        session_id: str,
        text: str,
        images: Sequence[PastedImage],
        on_delta: DeltaCallback | None,
        on_tool: ToolCallback | None,
        on_status: StatusCallback | None,
        request_id: str | None,
        resume: bool,
    ) -> TurnResult:
        # In the turn's own event loop: the MCP client sessions belong to it.
        started = await self.mcp.start(self.tools.add) if self.mcp is not None else []
        history = await self._history(session_id)
        begun = turn_start(history, request_id) if resume and request_id else None
        status = sayer(on_status)
        if begun is None:
            number = max((m.turn for m in history), default=0) + 1
            await self._open(session_id, history, number, text, images, request_id, status)
        else:
            number = history[begun].turn
        turn = Turn(session_id, number, history, self._context(session_id, number, history))
        turn.notes += started
        steps = 0
        if begun is not None:
            steps, done = await self._resume(turn, history[begun + 1 :], on_tool)
            if done is not None:
                return done
        for step in range(steps + 1, self.max_steps + 1):
            reply = await self._step(turn, on_delta, status)
            if not reply.tool_calls:
                # An answer cut off at the output limit is not a finished answer.
                return turn.result(step, "max_tokens" if reply.truncated else "answer")
            await self._calls(turn, reply.tool_calls, on_tool)
        turn.answer = turn.answer or (
            f"(stopped after {self.max_steps} steps without a final answer; ask again to continue)"
        )
        return turn.result(self.max_steps, "step_limit")

    async def _open(
        self,
        session_id: str,
        history: list[Message],
        number: int,
        text: str,
        images: Sequence[PastedImage],
        request_id: str | None,
        status: Say,
    ) -> None:
        """Record the turn's user message (its pasted images fitted and stored)."""
        # Fitting pasted images decodes and re-encodes them: off the event loop, as
        # tether's egress fitting is, so one big paste never stalls other turns.
        if images:
            big = max(len(i.data) for i in images)
            count = f"{len(images)} image" + ("" if len(images) == 1 else "s")
            await status(f"fitting {count} for {self.model.name} ({big:,} bytes)")
        # On media's own threads: a pasted image may wait for a render worker or for the
        # memory budget, and the server's default executor must stay free meanwhile.
        parts = await offload(self._user_parts, text, images) if images else None
        parts = parts or self._user_parts(text, ())
        user = UserMessage(parts=parts, turn=number, request_id=request_id)
        await self._append(session_id, history, user)

    def _context(self, session_id: str, number: int, history: list[Message]) -> ToolContext:
        return ToolContext(
            reach=self.reach,
            model=self.model,
            blobs=self.blobs,
            session_id=session_id,
            turn=number,
            # Reads stay fresh across turns of this agent; a new process starts with
            # none, so an edit after a restart needs a new read (the safe side).
            read_digests=self._reads.setdefault(session_id, {}),
            record=history,  # the list grows as the turn goes: digest refs see it all
            config=self.config,
            result_cache=self.result_cache,
            models=self.models,
        )

    async def _step(
        self, turn: Turn, on_delta: DeltaCallback | None, status: Say
    ) -> AssistantMessage:
        """Ask the model once and record its reply."""
        try:
            await status(f"waiting for {self.model.name}")
            reply = await self._complete(
                turn.history, on_delta, turn.notes, cache_key(turn.session_id)
            )
        except asyncio.CancelledError:
            # The user's message stays answered, so the next turn alternates cleanly.
            stopped = AssistantMessage(parts=(TextPart(CANCELLED),), turn=turn.number)
            await self._append(turn.session_id, turn.history, stopped)
            raise
        reply = replace(reply, turn=turn.number)
        if reply.usage is not None:
            turn.usage = turn.usage + reply.usage
        await self._append(turn.session_id, turn.history, reply)
        turn.answer, turn.stop = reply.text, reply.stop_reason
        if reply.tool_calls:
            # The model's own words on where it is (newer models write them between
            # tool calls, not as answer text): for the spinner and the phase line.
            for note in progress_notes(reply.provider_state):
                await status(note)
        return reply

    async def _calls(
        self, turn: Turn, calls: Sequence[ToolCall], on_tool: ToolCallback | None
    ) -> None:
        """Run the model's tool calls in order, recording each result as it comes."""
        ctx = turn.ctx
        tokens = functools.partial(image_tokens, self.model)
        for index, call in enumerate(calls):
            spent = ctx.tool_usage
            before = len(spent)
            try:
                if on_tool is not None:
                    maybe = on_tool(call)
                    if maybe is not None:
                        await maybe
                with seams.tool_call(call.name, call.id, call.arguments) as traced:
                    outcome = await self.tools.call(call.name, call.arguments, ctx)
                    traced.tool_outcome(outcome.parts, is_error=outcome.is_error, tokens=tokens)
            except asyncio.CancelledError:
                for left in calls[index:]:
                    note = unanswered(left, turn.number)
                    await self._append(turn.session_id, turn.history, note)
                raise
            tool_cost = sum(spent[before:], Usage()) if len(spent) > before else None
            if tool_cost is not None:
                turn.usage = turn.usage + tool_cost
            record = ToolResult(
                call_id=call.id,
                tool_name=call.name,
                parts=outcome.parts,
                is_error=outcome.is_error,
                turn=turn.number,
                usage=tool_cost,
            )
            await self._append(turn.session_id, turn.history, record)

    async def _resume(
        self, turn: Turn, recorded: Sequence[Message], on_tool: ToolCallback | None
    ) -> tuple[int, TurnResult | None]:
        """Take up a turn from its recorded steps: (steps taken, its result when the
        answer was recorded already). Calls left without a result run again if their
        tool only reads; the first that does not ends the turn (ResumeRefusedError)."""
        steps = 0
        for m in recorded:
            steps += isinstance(m, AssistantMessage)
            if not isinstance(m, UserMessage) and m.usage is not None:
                turn.usage = turn.usage + m.usage
            if isinstance(m, AssistantMessage):
                turn.answer, turn.stop = m.text, m.stop_reason
        await asyncio.to_thread(resend_outbox, turn, recorded, self.blobs)
        last = last_step(recorded)
        if last is None:
            return steps, None
        if not last.tool_calls:
            return steps, turn.result(steps, "max_tokens" if last.truncated else "answer")
        answered = {m.call_id for m in recorded if isinstance(m, ToolResult)}
        pending = [c for c in last.tool_calls if c.id not in answered]
        refused = next((c for c in pending if not self._read_only(c.name)), None)
        if refused is not None:
            for call in pending:
                note = unanswered(call, turn.number, NOT_RERUN)
                await self._append(turn.session_id, turn.history, note)
            raise ResumeRefusedError(refusal(refused))
        await self._calls(turn, pending, on_tool)
        return steps, None

    def _read_only(self, name: str) -> bool:
        tool = self.tools.get(name)
        return tool is not None and tool.read_only

    # --- steps ------------------------------------------------------------------------

    async def _complete(
        self,
        history: Sequence[Message],
        on_delta: DeltaCallback | None,
        notes: list[str],
        cache_key: str | None = None,
    ) -> AssistantMessage:
        ceiling = image_ceiling(self.model, self.client.wire)
        view = model_view(history, self.policy, model=self.model, ceiling=ceiling)
        seams.record_retention(history, view)
        send = functools.partial(self._send, on_delta=on_delta, cache_key=cache_key)
        try:
            return await send(view)
        except ImageRejectedError as first:
            seams.refused()
            # One image must never make a session unusable: re-fit every live image
            # conservatively and retry; if that is refused too, elide them all. The
            # record keeps the originals: this changes only what this request carries.
            notes.append(f"provider refused an image ({first}); re-fitted and retried")
            refitted = tuple(await asyncio.to_thread(self._map_images, view, self._refit_part))
            try:
                return await send(refitted)
            except ImageRejectedError as second:
                seams.refused()
                notes.append(f"provider refused the re-fitted image ({second}); elided")
                return await send(tuple(self._map_images(view, elide_part)))

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
            effort=self.effort,
        )
        with seams.model_call(self.model) as traced:
            traced.request(request.messages, request.system)
            reply = await self.client.complete(
                request,
                model=self.model,
                blobs=self.blobs,
                on_delta=on_delta,
                refit_cache=self.refit_cache,
            )
            traced.reply(reply)
            return reply

    async def _history(self, session_id: str) -> list[Message]:
        """The session's messages: from memory while the log is as this agent left
        it, else (first use, or another writer appended) loaded from its store. The
        store is read in a thread (on PostgreSQL it is queries): never on the loop."""
        return await asyncio.to_thread(self._history_sync, session_id)

    def _history_sync(self, session_id: str) -> list[Message]:
        cached = self._cache.get(session_id)
        if cached is not None and cached[0] == self.sessions.revision(session_id):
            return cached[1]  # (a log deleted meanwhile has another revision)
        if not self.sessions.exists(session_id):
            meta = {"model": self.model_ref or self.model.name}
            self.sessions.create(session_id, meta=meta)
        # The load reads and hashes every blob once (the history is then kept in
        # memory): a bit-flipped image degrades to a note now, not mid-request.
        loaded = self.sessions.load(session_id, blobs=self.blobs)
        history = list(loaded.messages)
        for problem in loaded.problems:
            log.warning("session %s: %s", session_id, problem)
        self._cache[session_id] = (self.sessions.revision(session_id), history)
        return history

    async def _append(self, session_id: str, history: list[Message], message: Message) -> None:
        """Record ``message`` (in a thread: the store may be a database) and keep it."""
        await asyncio.to_thread(self._append_sync, session_id, message)
        history.append(message)

    def _append_sync(self, session_id: str, message: Message) -> None:
        revision = self.sessions.append(session_id, message)
        cached = self._cache.get(session_id)
        if cached is not None:
            if revision is None:
                revision = self.sessions.revision(session_id)
            self._cache[session_id] = (revision, cached[1])

    # --- images -----------------------------------------------------------------------

    def _user_parts(self, text: str, images: Sequence[PastedImage]) -> tuple[Part, ...]:
        parts: list[Part] = []
        for i, img in enumerate(images, 1):
            try:
                fitted = fit(img.data, self.model.profile())
            except MediaError as e:
                name = f" ({img.filename})" if img.filename else ""
                raise InvalidInputError(f"image {i}{name} cannot be used: {e}") from e
            seams.fitted((fitted.width, fitted.height), (fitted.source_width, fitted.source_height))
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
            return elide_part(part)
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
