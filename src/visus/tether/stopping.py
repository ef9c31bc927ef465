"""Stopping one server without ending every other server's SSE streams in the process.

The MCP SDK's streamable-HTTP server (``/mcp``) answers with sse-starlette's
``EventSourceResponse``. On import, sse-starlette replaces ``uvicorn.Server.handle_exit``
with its own, which sets the process-wide ``AppStatus.should_exit``; from then on every
``EventSourceResponse`` in the process is cancelled as soon as it starts, and nothing
resets the flag (sse-starlette 3.7 ``sse.py``, its note on Issue #211: "nothing resets
it, so every later server in the process would be cancelled"; the SDK's
modelcontextprotocol/python-sdk#3494 reports the same restart failure). A process that
stopped one server and serves another (a test process; a program that runs a tether
server in a thread) then answers every MCP request over SSE with headers and no body,
and the client says "SSE stream ended without a response".

So a tether server stops with uvicorn's own ``handle_exit`` (:func:`uvicorn_handle_exit`)
and ends its own streams: the tether streams by closing their rings, ``/mcp``'s by
:class:`DisconnectOnStop` once :func:`mark_stopping` has run on the app's loop.

Example:
    >>> from starlette.datastructures import State
    >>> state = State()
    >>> async def app(scope, receive, send):
    ...     print(await receive())
    >>> gated = DisconnectOnStop(app, state)
    >>> async def request():
    ...     return {"type": "http.request", "body": b"", "more_body": False}
    >>> import asyncio
    >>> async def main():
    ...     state.stopping = asyncio.Event()  # what the tether app's lifespan makes
    ...     mark_stopping(state)  # the server was asked to stop
    ...     await gated({"type": "http"}, request, None)
    >>> asyncio.run(main())
    {'type': 'http.disconnect'}
"""

from __future__ import annotations

import asyncio
import sys
from types import FrameType
from typing import Any

import anyio
from starlette.datastructures import State
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["DisconnectOnStop", "mark_stopping", "uvicorn_handle_exit"]


def uvicorn_handle_exit(server: Any, sig: int, frame: FrameType | None) -> None:
    """uvicorn's ``Server.handle_exit`` for ``server``: ``should_exit`` (``force_exit``
    on a second SIGINT), never sse-starlette's replacement of it, which would end every
    SSE stream of every server in this process for the rest of its life."""
    import uvicorn

    sse = sys.modules.get("sse_starlette.sse")
    original = getattr(getattr(sse, "AppStatus", None), "original_handler", None)
    handler = original if callable(original) else uvicorn.Server.handle_exit
    handler(server, sig, frame)


def mark_stopping(state: State) -> None:
    """Say the app whose ``state`` this is stops now; call it on the app's event loop.
    Requests that :class:`DisconnectOnStop` wraps then read ``http.disconnect``."""
    stopping: asyncio.Event | None = getattr(state, "stopping", None)
    if stopping is not None:
        stopping.set()


class DisconnectOnStop:
    """ASGI wrapper: once the app is stopping (:func:`mark_stopping`), ``receive``
    answers ``http.disconnect``, so a streaming response that listens for its client
    leaving (sse-starlette's does, the SDK's SSE streams among them) ends, and the
    server stops instead of waiting for every client to hang up.

    ``state`` is the app's ``app.state``; its ``stopping`` event is made by the app's
    lifespan, on the loop that serves it (without one, requests pass unchanged).
    """

    def __init__(self, app: ASGIApp, state: State) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stopping: asyncio.Event | None = getattr(self.state, "stopping", None)
        if scope["type"] != "http" or stopping is None:
            await self.app(scope, receive, send)
            return

        async def receive_or_stop() -> Message:
            return await _receive_unless(receive, stopping)

        await self.app(scope, receive_or_stop, send)


async def _receive_unless(receive: Receive, stopping: asyncio.Event) -> Message:
    """The client's next message, or ``http.disconnect`` once ``stopping`` is set."""
    message: Message = {"type": "http.disconnect"}
    if stopping.is_set():
        return message
    async with anyio.create_task_group() as group:

        async def get() -> None:
            nonlocal message
            message = await receive()
            group.cancel_scope.cancel()

        async def stop() -> None:
            await stopping.wait()
            group.cancel_scope.cancel()

        group.start_soon(get)
        group.start_soon(stop)
    return message
