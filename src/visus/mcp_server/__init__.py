"""The visus MCP server (official ``mcp`` SDK): tether in and out, and ``view``.

Tools:

- ``tether_send(instance, text, images?, session_id?)``: a ``user.message`` to an
  instance; every limit is checked before anything is sent.
- ``tether_read(instance, session_id?, after_seq?, wait_ms?, include_user_images?)``:
  the first content item is text holding the poll answer as JSON, each image
  replaced by ``{"_mcp_index": N}``; then one image item per image, in order across
  frames, so a caller ties every image to its frame and ``msg_id``. The agent's
  images only, unless ``include_user_images``; the result stays under the cap
  (:func:`read_result`: frames deferred, an image too big alone fitted).
- ``tether_instances()``: the instances the tether server holds.
- ``view(path, page?, offset?, limit?)``: the file as an image fitted so that the
  whole result stays under ``limits.MCP_MAX_RESULT_BYTES`` (``offset``/``limit``
  page through a long text file's lines); ``sha256:<hex>`` shows again an image
  this client session viewed (never another session's).
- ``vision_analyze(prompt, file_path? | file_url? | file_base64?, ...)``: one
  question to a vision model (:func:`visus.analyze.vision_analyze`).

The server talks to a tether server through :class:`~visus.tether.client.TetherClient`
(over HTTP, or in-process when mounted with :func:`mount_mcp`). ``visus mcp`` runs
it over stdio.

This face only re-exports. ``tools`` holds the tools, module-level functions over
one :class:`ToolContext` (the server's lifespan state); ``server`` registers them
(:func:`build_server`) and mounts them (:func:`mount_mcp`); ``results`` keeps every
result under the host's cap (:func:`read_result`); ``view`` is ``view`` over MCP
and each session's recall; ``gate`` checks a request body before the SDK reads it;
``refusals`` makes every failed call (a bad argument included) one JSON refusal
``{"ok": false, "reason", "message", "field"?}``.

Example:
    >>> from visus.tether.client import TetherClient
    >>> server = build_server(TetherClient("http://127.0.0.1:8750"))
    >>> server.name
    'visus'
"""

from __future__ import annotations

from visus.mcp_server.gate import McpBodyGate
from visus.mcp_server.results import max_result_bytes, read_result
from visus.mcp_server.server import TOOLS, build_server, mount_mcp
from visus.mcp_server.tools import McpImage, ToolContext
from visus.mcp_server.view import SessionRecall, view_result

__all__ = [
    "TOOLS",
    "McpBodyGate",
    "McpImage",
    "SessionRecall",
    "ToolContext",
    "build_server",
    "max_result_bytes",
    "mount_mcp",
    "read_result",
    "view_result",
]
