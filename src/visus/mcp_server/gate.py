"""What stands in front of the SDK at ``/mcp``: the body cap, the JSON depth bound, and
the message's shape (one JSON-RPC object; the SDK answered a batch or a bare value with
pydantic's multi-line dump of four union members)."""

from __future__ import annotations

from typing import Any

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from visus.errors import VisusError
from visus.tether import limits as tether_limits

__all__ = ["McpBodyGate", "not_a_message"]


def _rpc_error(status: int, code: int, message: str) -> JSONResponse:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=status)


def not_a_message(value: Any) -> str | None:
    """Why a parsed body is not one JSON-RPC message, or None.

    Example:
        >>> not_a_message({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}) is None
        True
        >>> not_a_message([{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}])
        'a batch (a JSON array) is not taken: one JSON-RPC message per POST'
        >>> not_a_message({"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"})
        'id: a string or a number'
    """
    if isinstance(value, list):
        # MCP 2025-06-18 dropped batches; the SDK takes none.
        return "a batch (a JSON array) is not taken: one JSON-RPC message per POST"
    if not isinstance(value, dict):
        return f"a JSON-RPC message is a JSON object, not {type(value).__name__}"
    ident = value.get("id")
    if isinstance(ident, bool) or not isinstance(ident, str | int | None):
        return "id: a string or a number"
    return None


class McpBodyGate:
    """ASGI wrapper of the ``/mcp`` endpoint: a POST body over ``cap`` bytes gets 413
    naming ``MCP_MAX_REQUEST_BYTES``, one nested past ``JSON_MAX_DEPTH`` or not one
    JSON-RPC message (:func:`not_a_message`) gets 400 ``invalid_input``; all as
    JSON-RPC errors, before the SDK parses anything."""

    def __init__(self, app: ASGIApp, cap: int) -> None:
        self.app = app
        self.cap = cap

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        too_big = _rpc_error(
            413,
            -32600,
            f"too_large: request body over {tether_limits.mb(self.cap)} (MCP_MAX_REQUEST_BYTES)",
        )
        length = Headers(scope=scope).get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.cap):
            await too_big(scope, receive, send)
            return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            body += message.get("body", b"")
            more = bool(message.get("more_body", False))
            if len(body) > self.cap:
                await too_big(scope, receive, send)
                return
        try:
            problem = not_a_message(tether_limits.load_json(bytes(body)))
        except VisusError as e:
            await _rpc_error(400, -32700, f"invalid_input: {e}")(scope, receive, send)
            return
        if problem is not None:
            await _rpc_error(400, -32600, f"invalid_input: {problem}")(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
