"""``visus proxy``: fix images for any agent by changing one base URL.

An HTTP proxy in front of one provider. It speaks Anthropic Messages, OpenAI Chat
Completions and Responses, and edits a request only where images are: fits each to
the model's limits (the many-image rule included), hoists images out of Chat
Completions tool messages, turns stringified media back into images, and (with
``live_turns``) replaces images of older turns by descriptors. Everything else,
streaming answers included, passes byte for byte.

Example:
    >>> app = create_proxy_app(ProxyConfig(upstream="https://api.openai.com"))
    >>> app.state.proxy.stats.requests
    0
"""

from __future__ import annotations

from visus.proxy.app import UVICORN_OPTIONS, ProxyConfig, create_proxy_app
from visus.proxy.edit import UNKNOWN_MODEL, Edit
from visus.proxy.stats import ProxyStats

__all__ = [
    "UNKNOWN_MODEL",
    "UVICORN_OPTIONS",
    "Edit",
    "ProxyConfig",
    "ProxyStats",
    "create_proxy_app",
]
