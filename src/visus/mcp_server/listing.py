"""How visus's MCP server is listed: the MCP registry's ``server.json`` (``visus mcp``
over stdio and ``/mcp`` over streamable HTTP) and the server card ``visus serve``
publishes at ``/.well-known/mcp/server-card.json``.

``server.json`` follows the registry's published schema
(``static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json``); the card
follows SEP-2127 (MCP Server Cards: the ``server.json`` fields of a remote server plus
its ``capabilities`` and ``tools``), whose schema is not published yet, so it is checked
against the same ``server.json`` schema and the SEP's required fields.
``tests/test_mcp_listing.py`` validates both, offline.

Example:
    >>> listing = server_json()
    >>> listing["packages"][0]["transport"], listing["remotes"][0]["type"]
    ({'type': 'stdio'}, 'streamable-http')
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from visus import __version__

__all__ = [
    "CARD_PATH",
    "REGISTRY_NAME",
    "SERVER_SCHEMA",
    "server_card",
    "server_card_endpoint",
    "server_json",
]

#: The name visus is listed under (reverse DNS, the publisher's namespace).
REGISTRY_NAME = "io.github.visus/visus"
SERVER_SCHEMA = "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
CARD_SCHEMA = "https://static.modelcontextprotocol.io/schemas/v1/server-card.schema.json"
CARD_PATH = "/.well-known/mcp/server-card.json"
TITLE = "visus"
DESCRIPTION = (
    "Eyes for agents: view images, SVG, PDF pages and code as pixels; tether images in and out"
)
_AUTH = {
    "name": "Authorization",
    "description": "Bearer <token>: the token visus serve prints (or VISUS_TOKEN)",
    "isRequired": True,
    "isSecret": True,
}


def server_json() -> dict[str, Any]:
    """The registry's ``server.json`` for visus: the ``visus mcp`` package (stdio) and
    the ``/mcp`` endpoint of a ``visus serve`` (streamable HTTP, its host a variable)."""
    return {
        "$schema": SERVER_SCHEMA,
        "name": REGISTRY_NAME,
        "title": TITLE,
        "description": DESCRIPTION,
        "version": __version__,
        "packages": [
            {
                "registryType": "pypi",
                "identifier": "visus",
                "version": __version__,
                "runtimeHint": "uvx",
                "transport": {"type": "stdio"},
                "packageArguments": [{"type": "positional", "value": "mcp"}],
                "environmentVariables": [
                    {
                        "name": "VISUS_TOKEN",
                        "description": "The token of the visus serve its tether tools talk to",
                        "isSecret": True,
                    }
                ],
            }
        ],
        "remotes": [
            {
                "type": "streamable-http",
                "url": "https://{host}/mcp",
                "headers": [_AUTH],
                "variables": {
                    "host": {
                        "description": "Where visus serve runs (host and port)",
                        "isRequired": True,
                    }
                },
            }
        ],
    }


async def server_card(base_url: str, mcp: Any) -> dict[str, Any]:
    """The card of the ``/mcp`` endpoint at ``base_url``: its remote, capabilities and
    tools (``mcp``: the mounted server, asked for its tools)."""
    from mcp.types import LATEST_PROTOCOL_VERSION

    tools = await mcp.list_tools()
    return {
        "$schema": CARD_SCHEMA,
        "name": REGISTRY_NAME,
        "title": TITLE,
        "description": DESCRIPTION,
        "version": __version__,
        "remotes": [
            {
                "type": "streamable-http",
                "url": f"{base_url.rstrip('/')}/mcp",
                "supportedProtocolVersions": [LATEST_PROTOCOL_VERSION],
                "headers": [_AUTH],
                "authentication": {"required": True, "schemes": ["bearer"]},
            }
        ],
        "capabilities": {"tools": {"listChanged": False}},
        "tools": [
            {
                "name": t.name,
                "description": t.description or "",
                "inputSchema": t.input_schema,
            }
            for t in tools
        ],
    }


async def server_card_endpoint(request: Request) -> Response:
    """``GET /.well-known/mcp/server-card.json`` (public: it is how a client discovers
    ``/mcp``; it holds no secret)."""
    mcp = getattr(request.app.state, "mcp_server", None)
    if mcp is None:
        return Response(status_code=404)
    return JSONResponse(await server_card(str(request.base_url), mcp))
