"""The MCP server: the five tools registered over one :class:`ToolContext`, served over
stdio (``visus mcp``) or mounted at ``/mcp`` inside a tether app (:func:`mount_mcp`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import MCPServer
from starlette.routing import Route

from visus import limits
from visus.agent.policy import guarded_reach
from visus.mcp_server import tools
from visus.mcp_server.gate import McpBodyGate
from visus.mcp_server.refusals import RefusingServer
from visus.mcp_server.results import max_result_bytes
from visus.mcp_server.tools import ToolContext
from visus.perception import Reach
from visus.tether.guard import IN_PROCESS_HOST
from visus.tether.stopping import DisconnectOnStop

if TYPE_CHECKING:
    from fastapi import FastAPI

    from visus.config import VisusConfig
    from visus.models.allowed import AllowedModels
    from visus.tether.client import TetherClient

__all__ = ["TOOLS", "build_server", "mount_mcp"]

INSTRUCTIONS = (
    "visus gives agents eyes. tether_send sends text and images to an agent "
    "instance; tether_read returns its frames with images as image content "
    '({"_mcp_index": N} in the JSON points at the Nth image item); view shows '
    "a file (image, pdf, svg, text) as an image."
)

#: Every tool, in the order hosts list them, with its ``structured_output``: False for
#: those answering a JSON string (see :mod:`visus.mcp_server.tools`), else the SDK's own.
TOOLS: tuple[tuple[Callable[..., Any], bool | None], ...] = (
    (tools.tether_send, False),
    (tools.tether_read, None),
    (tools.tether_instances, False),
    (tools.view, None),
    (tools.vision_analyze, False),
)


def build_server(
    client: TetherClient,
    *,
    roots: Sequence[Path | str] | Reach | None = None,
    name: str = "visus",
    analyze_config: VisusConfig | None = None,
    result_bytes: int | None = None,
    models: AllowedModels | None = None,
) -> MCPServer[ToolContext]:
    """An MCP server whose tether tools go through ``client``; ``view`` and
    ``vision_analyze`` see ``roots`` (a :class:`~visus.perception.Reach`, or folders;
    default: the current directory), never visus's own files.
    ``analyze_config`` is the configuration ``vision_analyze`` resolves its model
    with (default: ``load_config()`` at call time) and ``models`` the models a client
    may name in it (None: any; ``visus serve`` gives its operator's). Every tool result
    stays within
    ``result_bytes`` (default: :func:`max_result_bytes`). A call that fails is a JSON
    refusal whatever failed (:class:`~visus.mcp_server.refusals.RefusingServer`)."""
    reach = roots if isinstance(roots, Reach) else guarded_reach(list(roots or [Path.cwd()]))
    context = ToolContext(
        client, reach, max_result_bytes(result_bytes), analyze_config, models=models
    )
    server = RefusingServer[ToolContext](
        name,
        # The SDK configures the root logger at this level; INFO would log every
        # HTTP request the tools make.
        log_level="WARNING",
        instructions=INSTRUCTIONS,
        lifespan=context.lifespan,
    )
    for tool, structured in TOOLS:
        server.add_tool(tool, structured_output=structured)
    return server


def mount_mcp(
    app: FastAPI,
    *,
    roots: Sequence[Path | str] | Reach | None = None,
    host: str = "127.0.0.1",
    path: str = "/mcp",
    config: VisusConfig | None = None,
    models: AllowedModels | None = None,
) -> MCPServer:
    """Serve the MCP server over streamable HTTP at ``path`` inside a tether ``app``.

    The tools reach the tether API in-process (no socket), with the app's token.
    The app's bearer gate also covers ``/mcp`` when a token is set. ``config`` is the
    configuration read at the server's start; ``vision_analyze`` resolves its model with
    it (None: ``load_config()`` at each call, as a stdio ``visus mcp`` does), and
    ``models`` the models a client may name there (None: any).

    Example:
        >>> import tempfile
        >>> from visus.tether.runner import TurnOutput
        >>> from visus.tether.server import create_app
        >>> class Quiet:
        ...     async def run_turn(self, **kw): return TurnOutput("")
        >>> app = create_app(data_dir=Path(tempfile.mkdtemp()), runner_factory=lambda c: Quiet())
        >>> mount_mcp(app).name
        'visus'
    """
    import httpx

    from visus.tether.client import TetherClient

    client = TetherClient(
        f"http://{IN_PROCESS_HOST}", app.state.token, transport=httpx.ASGITransport(app=app)
    )
    server = build_server(client, roots=roots, analyze_config=config, models=models)
    cap = limits.MCP_MAX_REQUEST_BYTES
    # The SDK's own cap (4 MiB by default) would refuse a 3 MB image with an opaque
    # -32603; ours sits in front of it with the same number and says which bound.
    sub = server.streamable_http_app(
        streamable_http_path=path, host=host, max_request_body_size=cap
    )
    for route in sub.routes:
        if isinstance(route, Route):
            # DisconnectOnStop: the SDK's SSE streams end when this app's server stops
            # (tether_server), not when any uvicorn server in the process does.
            route.app = DisconnectOnStop(McpBodyGate(route.app, cap), app.state)
    app.router.routes.extend(sub.routes)
    app.state.lifespan_hooks.append(server.session_manager.run)
    app.state.mcp_server = server
    # How a client finds /mcp (SEP-2127): public, like the probes.
    from visus.mcp_server.listing import CARD_PATH, server_card_endpoint

    app.router.add_route(CARD_PATH, server_card_endpoint, methods=["GET"])
    app.state.public_paths.add(CARD_PATH)
    return server
