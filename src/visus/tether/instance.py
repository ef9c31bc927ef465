"""One instance: a config, a runner, a ring, and the turns in flight.

An :class:`Instance` appends what its clients send to its ring, runs each
``user.message``'s turn with its runner (a session's turns in order) and appends the
answer's frames; egress images are fitted into the tether limits on the way out.
:mod:`visus.tether.instances` keeps the instances of one server (the
:class:`~visus.tether.instances.Registry`); :mod:`visus.tether.shared` runs them
over a shared store.

Example:
    >>> import asyncio
    >>> from visus.tether.frames import Frame, UserMessagePayload
    >>> from visus.tether.runner import InstanceConfig, TurnOutput
    >>> class Echo:
    ...     async def run_turn(self, *, text, **kw): return TurnOutput(text)
    >>> async def main():
    ...     inst = Instance(InstanceConfig("i-1", "reference", "t", "/tmp"), Echo())
    ...     await inst.accept(Frame(UserMessagePayload("hi"), "s", "m-1"), ())
    ...     await asyncio.gather(*inst._tasks)
    ...     return [f.type for f in inst.ring.read().frames]
    >>> asyncio.run(main())
    ['user.message', 'assistant.done']
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from visus import limits, media
from visus.budget import MemoryBudget, Reservation
from visus.errors import LimitError, NotFoundError, TooLargeError, VisusError
from visus.media import Profile, offload
from visus.tether.deltas import DeltaWriter, Emit
from visus.tether.frames import (
    AssistantDone,
    AssistantStatus,
    ErrorPayload,
    Frame,
    Payload,
    UserMessagePayload,
    frame_size,
    image_from_bytes,
    new_msg_id,
    payload_size,
)
from visus.tether.limits import (
    FrameError,
    TetherLimitError,
    check_image,
    check_image_count,
    check_media_type,
    check_total,
    check_wire,
)
from visus.tether.ring import Ring
from visus.tether.runner import ImageIn, InstanceConfig, ResumableRunner, TurnOutput, TurnRunner

__all__ = [
    "EGRESS_PROFILE",
    "STOPPED",
    "BusyError",
    "Emit",
    "EmitStatus",
    "Instance",
    "Reply",
    "TurnLostError",
    "TurnNotResumedError",
    "TurnsBusyError",
    "fit_egress",
    "request_key",
]

log = logging.getLogger(__name__)

#: Appends an ``assistant.status`` frame: the phase in words, and a tool call starting.
EmitStatus: TypeAlias = Callable[[str, Mapping[str, Any] | None], Awaitable[None]]

#: The ``cancelled`` error frame's message, wherever the turn was stopped.
STOPPED = "stopped by the user; send a new message to go on"


#: What egress images are fitted into when they break a per-image bound.
EGRESS_PROFILE = Profile(
    max_edge=limits.MAX_SOURCE_EDGE,
    max_pixels=limits.MAX_SOURCE_PIXELS,
    max_bytes=limits.TETHER_MAX_IMAGE_BYTES,
    media_types=limits.TETHER_MEDIA_TYPES,
)


def fit_egress(images: Sequence[ImageIn]) -> tuple[tuple[ImageIn, ...], tuple[VisusError, ...]]:
    """The egress images that fit the tether limits, in order, and why others went.

    An image of another media type (a tiff a tool wrote) or over the per-image bound
    is re-fitted by :func:`visus.media.fit` (re-encoded, downscaled if need be); one
    that cannot be fitted is dropped. Past the count bound the extra images are
    dropped; then images are dropped from the end until the frame total fits. CPU
    bound: call it in a worker thread.
    """
    kept: list[ImageIn] = []
    errors: list[VisusError] = []
    for i, image in enumerate(images):
        name = f"payload.images[{i}]"
        try:
            check_media_type(image.media_type, f"{name}.media_type")
            check_image(len(image.data), name)
        except VisusError as e:
            try:
                fitted = media.fit(image.data, EGRESS_PROFILE)
            except VisusError as why:
                errors.append(type(e)(f"{e}; dropped, it could not be fitted: {why}", **_kw(e)))
                continue
            image = ImageIn(fitted.media_type, fitted.data)
        kept.append(image)
    try:
        check_image_count(len(kept))
    except TetherLimitError as e:
        errors.append(e)
        kept = kept[: limits.TETHER_MAX_IMAGES_PER_MESSAGE]
    try:
        check_total(sum(len(im.data) for im in kept))
    except TetherLimitError as e:
        errors.append(e)
        while kept and sum(len(im.data) for im in kept) > limits.TETHER_MAX_FRAME_IMAGE_BYTES:
            kept.pop()
    return tuple(kept), tuple(errors)


def _kw(e: VisusError) -> dict[str, str]:
    if isinstance(e, TetherLimitError):
        return {"limit": e.limit, "field": e.field}
    return {"field": e.field} if isinstance(e, FrameError) else {}


class _TurnBytes(MemoryBudget):
    """The bytes of every turn in flight in this process (``limits.TETHER_TURNS_MAX_BYTES``)."""

    @property
    def total(self) -> int:
        return int(limits.TETHER_TURNS_MAX_BYTES)


#: The messages of the turns in flight, all instances of this process together.
TURNS = _TurnBytes()


class BusyError(LimitError):
    """Too many turns in flight on one instance (HTTP 429)."""


class TurnsBusyError(BusyError):
    """The turns in flight on the server hold TETHER_TURNS_MAX_BYTES (HTTP 429)."""


class TurnLostError(Exception):
    """This replica no longer owns the turn it was answering (another one took it over
    after its lease ran out); nothing more of it may be written."""


class TurnNotResumedError(VisusError):
    """A turn whose replica died cannot be finished here; the turn ends with an
    ``error`` frame of code ``turn_interrupted`` saying why."""

    code = "turn_interrupted"


def request_key(frame: Frame) -> str:
    """What a runner records a request as (``<seq>:<msg_id>``): unique in its instance,
    even when a client sends one msg_id twice, so a resumed turn finds its own message.

    Example:
        >>> request_key(Frame(UserMessagePayload("hi"), "s", "m-1", seq=12))
        '12:m-1'
    """
    return f"{frame.seq}:{frame.msg_id}"


async def _ending(result: TurnOutput, reply: Reply) -> list[Frame]:
    """The frames ending a turn with ``result``: an error per egress image dropped (or a
    done frame over the wire bound), then the ``assistant.done``."""
    frames: list[Frame] = []
    kept, errors = await offload(fit_egress, result.images) if result.images else ((), ())
    for err in errors:
        code = "egress_limit" if isinstance(err, TetherLimitError) else "egress_invalid"
        frames.append(reply.frame(ErrorPayload(code, str(err))))
    sent = tuple(map(image_from_bytes, kept))
    done = reply.frame(AssistantDone(result.text, sent, result.stop_reason, result.usage))
    try:
        check_wire(frame_size(done))
    except TetherLimitError as e:
        frames.append(reply.frame(ErrorPayload("egress_limit", str(e))))
        done = reply.frame(AssistantDone(result.text, (), result.stop_reason, result.usage))
    return [*frames, done]


class Instance:
    """One agent instance: config, runner, ring, and per-session turn order."""

    def __init__(self, config: InstanceConfig, runner: TurnRunner, ring: Any = None):
        self.config = config
        self.runner = runner
        #: The in-process :class:`Ring`, or a shared store's ring (``tether.shared``).
        self.ring: Any = ring if ring is not None else Ring()
        self.closed = False
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        #: (session, request msg_id) -> the task running (or queued to run) its turn.
        self._by_request: dict[tuple[str, str], asyncio.Task[None]] = {}
        #: Requests a client asked to stop (a cancel, not a shutdown).
        self._stopping: set[tuple[str, str]] = set()
        #: (session, request msg_id) -> the phase its turn, run here, is in now.
        self._phases: dict[tuple[str, str], str] = {}

    def describe(self) -> dict[str, Any]:
        """The instance as the API lists it. ``roots`` are the folders its agent reaches:
        the runner's ``roots`` when it has them (a config naming none reaches every root
        the operator allows), else the config's."""
        c = self.config
        reached = getattr(self.runner, "roots", None)
        return {
            "id": c.id,
            "model": c.model,
            "tools": None if c.tools is None else list(c.tools),
            "roots": [str(r) for r in (c.roots if reached is None else reached)],
            "created": c.created,
            "last_seq": self.ring.last_seq,
            "frames": len(self.ring),
            "pending": self.pending,
        }

    @property
    def pending(self) -> int:
        """Turns accepted and not finished."""
        return len(self._tasks)

    def check_capacity(self) -> None:
        """Refuse a new turn while TETHER_MAX_PENDING_TURNS are in flight."""
        cap = limits.TETHER_MAX_PENDING_TURNS
        if self.pending >= cap:
            raise BusyError(
                f"instance {self.config.id}: {self.pending} turns in flight, the limit is "
                f"{cap} (TETHER_MAX_PENDING_TURNS); retry when a turn is done"
            )

    def hold(self, frame: Frame, images: tuple[ImageIn, ...]) -> Reservation:
        """:data:`TURNS`' bytes for a turn's frame and decoded images (at least
        TETHER_TURN_MIN_BYTES), counted twice, which it holds until it ends
        (:class:`BusyError` when they do not fit now): per instance
        TETHER_MAX_PENDING_TURNS bound them, but a client creates any number of
        instances."""
        # Twice: running the turn holds about as much again (its images fitted, sent);
        # at least TETHER_TURN_MIN_BYTES, its context whatever the message.
        message = payload_size(frame.payload) + sum(len(im.data) for im in images)
        size = 2 * max(message, limits.TETHER_TURN_MIN_BYTES)
        try:
            return TURNS.reserve(size, what="a turn's message", wait=0)
        except TooLargeError as e:
            raise TurnsBusyError(
                f"instance {self.config.id}: the turns in flight on this server hold "
                f"{TURNS.in_use} bytes of their messages, and this one's {size} would pass "
                f"the limit of {TURNS.total} (TETHER_TURNS_MAX_BYTES); retry when a "
                "turn is done"
            ) from e

    def start_turn(
        self, frame: Frame, images: tuple[ImageIn, ...], held: Reservation | None = None
    ) -> asyncio.Task[None]:
        """Run the turn for an appended ``user.message`` in the background (``held``:
        its :meth:`hold`, released when it ends)."""
        held = held or self.hold(frame, images)
        task = asyncio.create_task(self._turn(frame, images))
        key = (frame.session, frame.msg_id)
        self._tasks.add(task)
        self._by_request[key] = task

        def forget(done: asyncio.Task[None]) -> None:
            held.release()
            self._tasks.discard(done)
            if self._by_request.get(key) is done:
                del self._by_request[key]
            self._stopping.discard(key)

        task.add_done_callback(forget)
        return task

    async def turns_in_flight(self, session: str) -> list[str]:
        """The msg_ids of ``session``'s requests whose turns are queued or running,
        oldest first: what a client that lost its state (a reloaded page) still waits for.
        """
        return [m for (s, m), task in self._by_request.items() if s == session and not task.done()]

    def turn_phase(self, session: str, msg_id: str) -> str | None:
        """What the turn answering request ``msg_id`` does now, as its latest
        ``assistant.status`` said ("viewing report.pdf page 4"), when this process runs
        it: a client that lost its state (a reloaded page) shows it at once.
        """
        return self._phases.get((session, msg_id))

    async def cancel_turn(self, frame: Frame, target: str) -> Frame:
        """Stop the turn answering request ``target`` (running or queued), then append
        ``frame`` (the ``turn.cancel``) and return it with its seq.

        The runner's task is cancelled: the agent stops at its next await, and the
        turn ends with an ``error`` frame of code ``cancelled``. Raises
        :class:`NotFoundError` when no such turn is in flight (it may have just ended);
        nothing is appended then.
        """
        key = (frame.session, target)
        task = self._by_request.get(key)
        if task is None or task.done():
            raise NotFoundError(
                f"no turn in flight for msg_id {target!r} in session {frame.session!r} "
                "(it may have finished already)"
            )
        self._stopping.add(key)
        task.cancel()
        stored: Frame = await self.ring.append(frame)
        return stored

    async def accept(self, frame: Frame, images: tuple[ImageIn, ...]) -> Frame:
        """Append an ingress ``user.message`` and have its turn run; return it with its seq."""
        held = self.hold(frame, images)  # refused before it is appended
        try:
            stored: Frame = await self.ring.append(frame)
        except BaseException:
            held.release()
            raise
        self.start_turn(stored, images, held)
        return stored

    async def refresh(self) -> None:
        """Bring ``describe()``'s figures up to date (in-process: they always are)."""

    async def _emit(self, frames: Sequence[Frame], final: bool) -> None:
        del final  # the in-process ring keeps no turn state
        for frame in frames:
            await self.ring.append(frame)

    async def run_request(
        self,
        frame: Frame,
        images: tuple[ImageIn, ...],
        emit: Emit | None = None,
        *,
        reply: Reply | None = None,
        resume: bool = False,
    ) -> None:
        """Run the turn answering ``frame`` now; its frames go to ``emit(frames, final)``
        (default: this instance's ring). The caller keeps a session's turns in order.

        ``resume``: the turn was started before (by a replica that died); a runner that
        can (:class:`~visus.tether.runner.ResumableRunner`) finishes it from its last
        recorded step, any other fails it with ``turn_interrupted``.
        """
        payload = frame.payload
        assert isinstance(payload, UserMessagePayload)
        # The answer's frames share one msg_id of their own and name the request.
        reply = reply or Reply(frame.session, new_msg_id(), frame.msg_id)
        out = DeltaWriter(emit or self._emit, reply.frame)
        try:
            await self._run(payload, request_key(frame), reply, images, out, resume)
        finally:
            self._phases.pop((reply.session, reply.reply_to), None)
            await out.aclose()

    async def _turn(self, frame: Frame, images: tuple[ImageIn, ...]) -> None:
        session = frame.session
        reply = Reply(session, new_msg_id(), frame.msg_id)
        # Turns of one session run in order; a session's lock lives while it has turns.
        lock, users = self._locks.get(session, (asyncio.Lock(), 0))
        self._locks[session] = (lock, users + 1)
        try:
            async with lock:
                await self.run_request(frame, images, reply=reply)
        except asyncio.CancelledError:
            if (session, frame.msg_id) not in self._stopping:
                raise  # the server is shutting down or the instance is deleted
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            note = ErrorPayload("cancelled", STOPPED)
            await self.ring.append(reply.frame(note))
        finally:
            lock, users = self._locks[session]
            if users == 1:
                del self._locks[session]
            else:
                self._locks[session] = (lock, users - 1)

    async def _run(
        self,
        payload: UserMessagePayload,
        request_id: str,
        reply: Reply,
        images: tuple[ImageIn, ...],
        out: DeltaWriter,
        resume: bool,
    ) -> None:
        async def emit_status(text: str, tool: Mapping[str, Any] | None = None) -> None:
            # After the text held so far: a client sees the phase where it began. A
            # phase waits like text (at most one window: a model answering at once
            # makes one write, not two); a tool call leaves now, shown as it starts.
            frame = reply.frame(AssistantStatus(text, tool))
            self._phases[(reply.session, reply.reply_to)] = text
            await (out.send(frame) if tool is not None else out.hold(frame))

        try:
            result = await self._answer(
                payload, request_id, reply.session, images, out, resume, emit_status
            )
        except (asyncio.CancelledError, TurnLostError):
            raise
        except Exception as e:  # a failed turn is a frame, never a dead server
            if isinstance(e, VisusError):
                # An expected failure (a bad image, a provider refusal): the client gets
                # it as a frame; a traceback in the server log would only be noise.
                log.warning("turn failed on instance %s: %s", self.config.id, e)
            else:
                log.exception("turn failed on instance %s", self.config.id)
            # An expected failure's own words are for the user; a bug keeps its class.
            text = str(e) if isinstance(e, VisusError) else f"{type(e).__name__}: {e}"
            code = e.code if isinstance(e, TurnNotResumedError) else "turn_failed"
            await out.send(reply.frame(ErrorPayload(code, text)), final=True)
            return
        await out.send(*await _ending(result, reply), final=True)

    async def _answer(
        self,
        payload: UserMessagePayload,
        request_id: str,
        session: str,
        images: tuple[ImageIn, ...],
        out: DeltaWriter,
        resume: bool,
        emit_status: EmitStatus,
    ) -> TurnOutput:
        """The runner's answer: a new turn, or the rest of a turn another replica began."""
        runner = self.runner
        args: dict[str, Any] = {
            "session": session,
            "text": payload.text,
            "images": images,
            "user": payload.user,
            "emit_delta": out.delta,
        }
        if getattr(runner, "reports_status", False):  # TurnRunner's docstring
            args["emit_status"] = emit_status
        if not isinstance(runner, ResumableRunner):
            if resume:
                raise TurnNotResumedError(
                    "the replica running this turn stopped before it finished; send it again"
                )
            return await runner.run_turn(**args)
        if resume:
            return await runner.resume_turn(**args, request_id=request_id)
        return await runner.run_turn(**args, request_id=request_id)

    async def aclose(self) -> None:
        """Cancel turns in flight and close the runner (if it can be closed)."""
        self.closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        close = getattr(self.runner, "aclose", None)
        if close is not None:
            try:
                await close()
            except Exception:
                log.exception("closing the runner of instance %s failed", self.config.id)
        await self.ring.close()


@dataclass(frozen=True, slots=True)
class Reply:
    """The frames answering one request: one session, one msg_id, naming the request."""

    session: str
    msg_id: str
    reply_to: str

    def frame(self, payload: Payload) -> Frame:
        return Frame(payload, self.session, self.msg_id, reply_to=self.reply_to)
