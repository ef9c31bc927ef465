"""Forward a request to the fixed upstream and stream its answer back unchanged.

The upstream's base URL comes from configuration only; a request picks the path,
never the host (no open relay). The client's own headers travel on (its API key
included: the proxy holds no key of its own, never logs or stores one), minus
hop-by-hop headers, ``Host`` and the proxy's own token. The answer's bytes are passed
on as they arrive (``aiter_raw``: compressed stays compressed, SSE events are not
re-chunked), so a stream reaches the client byte for byte.

Example:
    >>> upstream_url("https://api.anthropic.com/", "/v1/messages", b"beta=true")
    'https://api.anthropic.com/v1/messages?beta=true'
    >>> upstream_base("https://openrouter.ai/api/v1")
    'https://openrouter.ai/api'
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import httpx

from visus import limits

__all__ = [
    "PROXY_TOKEN_HEADER",
    "forward_headers",
    "new_client",
    "reply_headers",
    "stream_body",
    "upstream_base",
    "upstream_url",
]

#: The header a client sends the proxy's own token in (its ``Authorization`` is the
#: provider's key, which the proxy forwards).
PROXY_TOKEN_HEADER = "x-visus-token"

# RFC 9110 hop-by-hop headers, plus what httpx sets itself for the new request.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        PROXY_TOKEN_HEADER,
    }
)


def upstream_base(url: str) -> str:
    """The upstream base without a trailing ``/`` or ``/v1`` (clients send ``/v1/...``)."""
    base = url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def upstream_url(base: str, path: str, query: bytes) -> str:
    """The upstream URL for a request path (the host is always ``base``'s)."""
    url = upstream_base(base) + "/" + path.lstrip("/")
    return f"{url}?{query.decode('latin-1')}" if query else url


def forward_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The client's headers as the upstream gets them."""
    return [(k, v) for k, v in headers if k.decode("latin-1").lower() not in _HOP]


def reply_headers(headers: httpx.Headers, *, keep_encoding: bool = True) -> dict[str, str]:
    """The upstream's answer headers as the client gets them (the body is re-framed)."""
    drop = _HOP if keep_encoding else _HOP | {"content-encoding"}
    return {k: v for k, v in headers.items() if k.lower() not in drop}


def new_client() -> httpx.AsyncClient:
    """The upstream client: no redirects followed, no environment proxies, long reads."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(
            limits.PROVIDER_TIMEOUT_SECONDS, connect=limits.PROXY_CONNECT_TIMEOUT_SECONDS
        ),
        follow_redirects=False,
        trust_env=False,
        # httpx would ask for gzip on a client's behalf and hand it bytes it never
        # asked to decode; a client's own Accept-Encoding overrides this.
        headers={"accept-encoding": "identity"},
    )


async def stream_body(response: httpx.Response) -> AsyncIterator[bytes]:
    """The answer's raw bytes as they arrive; the upstream response is closed after."""
    try:
        async for chunk in response.aiter_raw():
            yield chunk
    finally:
        await response.aclose()
