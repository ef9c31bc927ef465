"""The seam between a tether instance and the agent that answers it.

The server owns frames, the ring and HTTP; the agent owns sessions, blobs and
models. They meet here: for every ``user.message`` the server calls
``runner.run_turn(...)`` once, streams what the runner emits as
``assistant.delta`` frames and ends the turn with an ``assistant.done`` frame
holding the :class:`TurnOutput`.

A runner is built per instance by a :data:`RunnerFactory` given to
:func:`visus.tether.server.create_app`. A runner may also define
``async def aclose(self) -> None``; the server calls it when the instance is
deleted or the app shuts down.

Example:
    >>> class Echo:
    ...     async def run_turn(self, *, session, text, images, user, emit_delta):
    ...         await emit_delta(text)
    ...         return TurnOutput(text=text, images=tuple(images))
    >>> factory: RunnerFactory = lambda config: Echo()
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, runtime_checkable

__all__ = [
    "ImageIn",
    "InstanceConfig",
    "ResumableRunner",
    "RunnerFactory",
    "TurnOutput",
    "TurnRunner",
]


@dataclass(frozen=True, slots=True)
class ImageIn:
    """An image travelling through tether, decoded: ``data`` holds the raw bytes."""

    media_type: str
    data: bytes

    def __repr__(self) -> str:
        return f"ImageIn(media_type={self.media_type!r}, data=<{len(self.data)} bytes>)"


@dataclass(frozen=True, slots=True)
class TurnOutput:
    """What a turn ends with: the final text and any images the agent sends out."""

    text: str
    images: tuple[ImageIn, ...] = ()
    #: Why the model stopped (``max_tokens``: the answer was cut off); None: unknown.
    stop_reason: str | None = None
    #: Tokens and cost of the turn (:meth:`visus.record.messages.Usage.as_json`:
    #: input, output, cache read, cache write, cost_usd); None: the runner does not say.
    usage: Mapping[str, int | float] | None = None


#: ``InstanceConfig.extra`` key of the MCP servers a create request asked to mount (a
#: list of ``{name, url, headers, command, args, env}``); the runner factory reads it.
MCP_SERVERS_KEY = "mcp_servers"


@dataclass(frozen=True, slots=True)
class InstanceConfig:
    """One instance as created by ``POST /v1/instances`` and persisted under data_dir.

    ``id`` is the server's handle; ``model`` a catalog id; ``tools`` the tool names the
    agent may use (``None``: the agent's defaults); ``roots`` the folders its tools may
    reach; ``data_dir`` the instance's own folder for sessions and blobs.
    """

    id: str
    model: str
    created: str
    data_dir: str
    tools: tuple[str, ...] | None = None
    roots: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class TurnRunner(Protocol):
    """Runs one turn of one session of an instance.

    ``images`` are already checked against the tether limits. ``emit_delta`` appends
    an ``assistant.delta`` frame (text only). The returned images are checked again
    on egress; images past a limit are dropped with an ``error`` frame naming it.
    Storing the user message and its images (as blobs) is the runner's job.

    A runner with a ``roots`` attribute (the folders its tools reach, after the
    operator's policy) has them listed as the instance's ``roots``.

    A runner whose class sets ``reports_status = True`` also gets
    ``emit_status(text, tool)``, which appends an ``assistant.status`` frame: the phase
    the turn is in, and the tool call that starts (``{"id", "name", "arguments"}``).
    """

    async def run_turn(
        self,
        *,
        session: str,
        text: str,
        images: Sequence[ImageIn],
        user: Mapping[str, Any] | None,
        emit_delta: Callable[[str], Awaitable[None]],
    ) -> TurnOutput: ...


@runtime_checkable
class ResumableRunner(Protocol):
    """A runner whose record says which request each turn answers, so that a turn whose
    replica died (PostgreSQL store, :mod:`visus.tether.shared`) is finished by the
    replica that takes it over, from its last recorded step.

    ``request_id`` names the request (unique in the instance, see
    :func:`visus.tether.instance.request_key`). ``resume_turn`` finishes the turn
    answering it: from the start if nothing of it was recorded, else from its last
    recorded step (asking the model again, re-running a call whose result is missing
    only when that tool only reads); it raises an error naming the call otherwise.
    """

    async def run_turn(
        self,
        *,
        session: str,
        text: str,
        images: Sequence[ImageIn],
        user: Mapping[str, Any] | None,
        emit_delta: Callable[[str], Awaitable[None]],
        request_id: str | None = None,
    ) -> TurnOutput: ...

    async def resume_turn(
        self,
        *,
        session: str,
        text: str,
        images: Sequence[ImageIn],
        user: Mapping[str, Any] | None,
        emit_delta: Callable[[str], Awaitable[None]],
        request_id: str,
    ) -> TurnOutput: ...


RunnerFactory: TypeAlias = Callable[[InstanceConfig], TurnRunner]
