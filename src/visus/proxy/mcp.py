"""The proxy's own MCP server (streamable HTTP at ``/mcp``): ``restore_image``.

A client behind the proxy may have no ``view`` tool to follow a descriptor with. If
it can call MCP tools (Claude Code: ``claude mcp add --transport http visus-proxy
http://127.0.0.1:8790/mcp``), this server gives it one: ``restore_image("sha256:<hex>")``
returns an image the proxy left out of a request, by the digest its descriptor names.
The proxy offers the call in descriptors only when the request's own ``tools`` list
has it (:func:`restore_tool`), so a descriptor never names a tool the model lacks.

The images come from :class:`~visus.proxy.cache.ElidedImages`: only images the proxy
itself elided, found by their full digest; the proxy's token gate covers ``/mcp``.

Example:
    >>> restore_tool([{"name": "mcp__visus-proxy__restore_image"}, {"name": "bash"}])
    'mcp__visus-proxy__restore_image'
    >>> restore_tool([{"type": "function", "function": {"name": "bash"}}]) is None
    True
"""

from __future__ import annotations

import re
from contextlib import AbstractAsyncContextManager
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, ImageContent
from starlette.routing import BaseRoute, Route

from visus import limits
from visus.mcp_server.gate import McpBodyGate
from visus.mcp_server.refusals import RefusingServer, refusal_result
from visus.proxy.cache import ElidedImages

__all__ = ["TOOL", "RestoreServer", "Restorer", "restore_tool"]

#: The tool's name; a client prefixes it with its server's (``mcp__NAME__restore_image``).
TOOL = "restore_image"

_DIGEST = re.compile(r"(?:sha256:)?([0-9a-f]{64})")


def _name(tool: Any) -> str | None:
    if not isinstance(tool, dict):
        return None
    fn = tool.get("function")
    name = fn.get("name") if isinstance(fn, dict) else tool.get("name")
    return name if isinstance(name, str) else None


def restore_tool(tools: Any) -> str | None:
    """The name under which the request's client can call ``restore_image``, if it can.

    ``tools`` is the body's ``tools`` in any of the three APIs' shapes.
    """
    if not isinstance(tools, list):
        return None
    for tool in tools:
        name = _name(tool)
        if name is not None and (name == TOOL or name.endswith("__" + TOOL)):
            return name
    return None


class Restorer:
    """The tool itself, over the proxy's store of elided images."""

    def __init__(self, images: ElidedImages) -> None:
        self.images = images

    def restore_image(self, digest: str) -> CallToolResult:
        """Show again an image visus proxy left out of a request to save context.

        ``digest``: the ``sha256:...`` its ``[image elided: ...]`` note names.
        """
        match = _DIGEST.fullmatch(digest.strip().lower())
        found = self.images.get(match.group(1)) if match else None
        if found is None:
            # A client's value can be megabytes: the refusal quotes its start only.
            shown = repr(digest) if len(digest) <= 80 else repr(digest[:77]) + "..."
            message = (
                f"no image {shown} here: give the full sha256:<64 hex> an [image elided] "
                "note names (the proxy holds images only while their conversation goes on)"
            )
            return refusal_result("not_found", message, "digest")
        media_type, b64 = found
        return CallToolResult(content=[ImageContent(type="image", data=b64, mime_type=media_type)])


class RestoreServer:
    """The MCP server with ``restore_image`` over ``images``: its routes and lifespan."""

    def __init__(self, images: ElidedImages) -> None:
        # A refusing server: a call without a digest (or any failed call) is visus's JSON
        # refusal, as on visus's other MCP servers.
        self.server = RefusingServer[None](
            "visus-proxy",
            log_level="WARNING",
            instructions=(
                "visus proxy leaves old images out of long conversations; restore_image "
                "shows one again by the sha256 digest its [image elided: ...] note names."
            ),
        )
        self.server.add_tool(Restorer(images).restore_image, name=TOOL, structured_output=False)

    def routes(self, path: str = "/mcp") -> list[BaseRoute]:
        """The streamable-HTTP routes (stateless: every call stands alone)."""
        app = self.server.streamable_http_app(
            streamable_http_path=path,
            stateless_http=True,
            json_response=True,
            # The proxy's own gate (loopback names, or its token) covers /mcp already.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        # The same gate as visus serve's /mcp: body cap, JSON depth, one message a POST.
        for route in app.routes:
            if isinstance(route, Route):
                route.app = McpBodyGate(route.app, limits.MCP_MAX_REQUEST_BYTES)
        return list(app.routes)

    def running(self) -> AbstractAsyncContextManager[None]:
        """What the app's lifespan holds open while it serves ``/mcp``."""
        return self.server.session_manager.run()
