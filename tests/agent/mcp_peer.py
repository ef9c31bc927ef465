"""A small stdio MCP server (official SDK) that misbehaves on request, for the mount tests.

Run as ``python tests/agent/mcp_peer.py``. It writes a line to stderr on start (which
must land in the log file, not the terminal).
"""

from __future__ import annotations

import base64
import io
import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, ImageContent, TextContent
from PIL import Image

server = MCPServer("peer")


def _png(colour: tuple[int, int, int]) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (64, 32), colour).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


@server.tool()
def picture() -> CallToolResult:
    """Text and a red picture."""
    return CallToolResult(
        content=[
            TextContent(type="text", text="a red picture"),
            ImageContent(type="image", data=_png((255, 0, 0)), mime_type="image/png"),
        ]
    )


@server.tool()
def broken_picture() -> CallToolResult:
    """An image whose data is not base64 at all."""
    return CallToolResult(
        content=[ImageContent(type="image", data="%%% not base64 %%%", mime_type="image/png")]
    )


@server.tool()
def failing() -> CallToolResult:
    """A result the server marks as an error."""
    return CallToolResult(content=[TextContent(type="text", text="no such thing")], is_error=True)


@server.tool()
def hang() -> str:
    """Never answers (in time)."""
    time.sleep(3600)
    return "late"


@server.tool()
def pid() -> str:
    """This process's id (one long-lived session answers the same)."""
    return str(os.getpid())


@server.tool()
def environment() -> str:
    """The names of this process's environment variables, one a line."""
    return "\n".join(sorted(os.environ))


@server.tool()
def crash() -> str:
    """The process dies mid-call."""
    os._exit(3)


if __name__ == "__main__":
    print("peer: started, talking on stdio", file=sys.stderr, flush=True)
    server.run("stdio")
