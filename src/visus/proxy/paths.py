"""Which request paths the proxy serves, and where on the upstream each one goes.

Clients spell their base URL differently: Claude Code wants the bare host
(``/v1/messages`` is appended), the Vercel AI SDK's ``@ai-sdk/anthropic`` and every
OpenAI client want ``.../v1`` (``/messages``, ``/chat/completions`` appended), so one
exported variable sends some clients to ``/messages`` and others to
``/v1/v1/messages``. :func:`api_path` takes all three as the same API path.

Everything the proxy forwards lives under its API prefix ``/v1``. A path that leaves
it, however it is spelled (``/v1/../admin``, ``%2e%2e``, ``%252e``, ``..;``, a
backslash, an empty segment), is refused before anything is sent: the upstream, or
a server in front of it, may resolve it differently than the proxy would.

:func:`upstream_url` maps the API path onto the configured upstream. Anthropic's
clients append ``/v1/messages`` to a base URL, OpenAI's append ``/chat/completions``
to an API root: a bare host (``https://api.openai.com``) gets ``/v1``, any other
path is the root as written (``https://api.openai.com/v1``,
``https://generativelanguage.googleapis.com/v1beta/openai``,
``https://r.openai.azure.com/openai/deployments/gpt-4o?api-version=2024-10-21``; its
query is kept).

Example:
    >>> api_path("/messages"), api_path("/v1/v1/messages"), api_path("/v1/%2e%2e/admin")
    ('/v1/messages', '/v1/messages', None)
    >>> upstream_url("https://api.anthropic.com", "/v1/messages", b"beta=true", anthropic=True)
    'https://api.anthropic.com/v1/messages?beta=true'
    >>> upstream_url("https://x.googleapis.com/v1beta/openai/", "/v1/chat/completions", b"")
    'https://x.googleapis.com/v1beta/openai/chat/completions'
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit, urlunsplit

__all__ = ["API_PREFIX", "BARE_PATHS", "api_path", "upstream_base", "upstream_url"]

#: The prefix of every path the proxy forwards.
API_PREFIX = "/v1"

#: Endpoints a client may also reach without ``/v1`` (its base URL already had it).
BARE_PATHS = frozenset(
    {"messages", "messages/count_tokens", "chat/completions", "responses", "models"}
)

# One path segment as a provider API spells it (ids like ft:gpt-4o:org::x,
# anthropic.claude-v2:1, @cf/meta/...): RFC 3986 unreserved and sub-delims, minus
# ';' (path parameters, '..;/' tricks), '%' (a second decoding by someone else) and
# '\' (a separator on some servers).
_SEGMENT = re.compile(r"[A-Za-z0-9._~:@!$&'()*+,=-]+")


def api_path(path: str) -> str | None:
    """The canonical ``/v1/...`` path for a decoded request path, or None to refuse it.

    Example:
        >>> api_path("/chat/completions"), api_path("/v1/models/gpt-4.1")
        ('/v1/chat/completions', '/v1/models/gpt-4.1')
        >>> [api_path(p) for p in ("/admin", "/v1/./x", "/v1//x", "/v1/%252e", "/v1\\\\x")]
        [None, None, None, None, None]
    """
    if not path.startswith("/"):
        return None
    segments = path[1:].split("/")
    if segments and segments[-1] == "" and len(segments) > 1:
        segments.pop()  # one trailing slash is harmless
    for segment in segments:
        if not _SEGMENT.fullmatch(segment) or segment.strip(".") == "":
            return None
    while segments[:2] == ["v1", "v1"]:
        segments.pop(0)
    if segments[0] != "v1":
        if "/".join(segments) not in BARE_PATHS:
            return None
        segments.insert(0, "v1")
    return "/" + "/".join(segments)


def upstream_base(url: str) -> str:
    """The upstream as an Anthropic base URL: no trailing ``/`` or ``/v1``.

    Example:
        >>> upstream_base("https://openrouter.ai/api/v1/")
        'https://openrouter.ai/api'
    """
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    path = path[: -len("/v1")] if path.endswith("/v1") else path
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def upstream_url(upstream: str, path: str, query: bytes, *, anthropic: bool = False) -> str:
    """The upstream URL for a canonical API ``path`` (the host is always ``upstream``'s).

    ``anthropic``: the request speaks Anthropic's API, whose base URL excludes ``/v1``.
    """
    parts = urlsplit(upstream)
    rest = path[len(API_PREFIX) :]
    root = parts.path.rstrip("/")
    if anthropic:
        root = urlsplit(upstream_base(upstream)).path + API_PREFIX
    elif not root:
        root = API_PREFIX
    queries = [q for q in (parts.query, query.decode("latin-1")) if q]
    full = quote(root + rest, safe="/:@!$&'()*+,=-._~")
    return urlunsplit((parts.scheme, parts.netloc, full, "&".join(queries), ""))
