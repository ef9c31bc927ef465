"""Stopping a tether server ends its own SSE streams, ``/mcp``'s too, and no other's.

sse-starlette (the SDK's SSE responses) replaces uvicorn's ``Server.handle_exit`` with
one that sets a process-wide flag nothing resets. A tether server stopped through it
(tests/tether/test_sse.py, test_ops.py) made every later MCP request over SSE in the
process end without an answer: the MCP tests that ran after tests/tether failed with
"SSE stream ended without a response" (visus.tether.stopping).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path

import httpx
from fastapi import FastAPI

from tests.timing import within
from visus.agent import McpMounts, McpServerSpec, ToolRegistry
from visus.mcp_server import mount_mcp
from visus.tether.server import create_app, tether_server

from .doubles import Factory, live_server, serving

TOKEN = "stopping-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: What an MCP client sends with every request (streamable HTTP).
MCP_HEADERS = {**AUTH, "Accept": "application/json, text/event-stream"}
PROTOCOL = "2025-06-18"


def _mcp_app(data: Path) -> FastAPI:
    app = create_app(data_dir=data, runner_factory=Factory(), token=TOKEN)
    mount_mcp(app, roots=[data])
    return app


async def test_a_stopped_server_leaves_another_servers_mcp_answering(tmp_path: Path) -> None:
    # The SDK's server is loaded (this module imports visus.mcp_server), and with it
    # sse-starlette's replacement of uvicorn's handle_exit: as in any process serving /mcp.
    assert "sse_starlette.sse" in sys.modules
    # A tether server in a thread (visus serve runs one in the main thread).
    app = create_app(data_dir=tmp_path / "a", runner_factory=Factory())
    server = tether_server(app, log_level="warning")
    with serving(server) as (thread, _):
        server.handle_exit(signal.SIGINT, None)  # Ctrl-C
        await asyncio.to_thread(thread.join, within(10))
        assert not thread.is_alive()

    with live_server(_mcp_app(tmp_path / "b")) as base:
        registry = ToolRegistry()
        mounts = McpMounts([McpServerSpec(name="b", url=f"{base}/mcp", headers=AUTH)])
        try:
            warnings = await mounts.start(registry.add)
        finally:
            await mounts.aclose()
    assert warnings == []  # was: "SSE stream ended without a response"
    assert "b__view" in registry.names()


async def _open_session(http: httpx.AsyncClient) -> str:
    """Initialize an MCP session over streamable HTTP; its id."""
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    r = await http.post("/mcp", json=hello)
    assert r.status_code == 200, r.text
    assert '"result"' in r.text
    session = r.headers["mcp-session-id"]
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    headers = {"mcp-session-id": session, "mcp-protocol-version": PROTOCOL}
    r = await http.post("/mcp", json=done, headers=headers)
    assert r.status_code == 202, r.text
    return session


async def test_a_stopped_server_ends_its_own_mcp_streams(tmp_path: Path) -> None:
    """The stream an MCP client keeps open for the server's own messages (GET /mcp)
    never ends by itself; uvicorn waits for it before it stops, so the server ends it."""
    server = tether_server(_mcp_app(tmp_path), log_level="warning")
    with serving(server) as (thread, base):
        async with httpx.AsyncClient(base_url=base, headers=MCP_HEADERS, timeout=60) as http:
            session = await _open_session(http)
            headers = {"mcp-session-id": session, "mcp-protocol-version": PROTOCOL}
            async with http.stream("GET", "/mcp", headers=headers) as stream:
                assert stream.status_code == 200
                assert stream.headers["content-type"].startswith("text/event-stream")
                server.handle_exit(signal.SIGINT, None)  # Ctrl-C

                async def drain() -> None:
                    # cut, not finished: sse-starlette cancels a stream whose client left
                    with contextlib.suppress(httpx.RemoteProtocolError):
                        async for _ in stream.aiter_bytes():
                            pass

                # It ends when the server ends it (sse-starlette pings every 15 s, so
                # the client's read timeout alone would wait for ever).
                await asyncio.wait_for(drain(), within(10))
        await asyncio.to_thread(thread.join, within(10))
        assert not thread.is_alive()
