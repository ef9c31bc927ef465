"""Forward a request to the fixed upstream and stream its answer back unchanged.

The upstream's base URL comes from configuration only; a request picks the path,
never the host (no open relay). The client's own headers travel on (its API key
included: the proxy holds no key of its own, never logs or stores one), minus
hop-by-hop headers, ``Host`` and the proxy's own token. The answer's bytes are passed
on as they arrive (``aiter_raw``: compressed stays compressed, SSE events are not
re-chunked), so a stream reaches the client byte for byte.

Example:
    >>> forward_headers([(b"x-api-key", b"k"), (b"host", b"h"), (b"accept-encoding", b"br")])
    [(b'x-api-key', b'k'), (b'accept-encoding', b'identity')]
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import httpx

from visus import limits
from visus.proxy.encoding import readable_accept

__all__ = [
    "PROXY_TOKEN_HEADER",
    "forward_headers",
    "new_client",
    "reply_headers",
    "stream_body",
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


def forward_headers(
    headers: Iterable[tuple[bytes, bytes]], *, decoded: bool = False
) -> list[tuple[bytes, bytes]]:
    """The client's headers as the upstream gets them.

    ``Accept-Encoding`` keeps only the codings the proxy reads
    (:func:`~visus.proxy.encoding.readable_accept`); ``decoded``: the body is sent
    decompressed, so its ``Content-Encoding`` goes.
    """
    drop = _HOP | {"accept-encoding"} | ({"content-encoding"} if decoded else set())
    out = [(k, v) for k, v in headers if k.decode("latin-1").lower() not in drop]
    accepted = [v.decode("latin-1") for k, v in headers if k.lower() == b"accept-encoding"]
    if accepted:
        out.append((b"accept-encoding", readable_accept(", ".join(accepted)).encode("latin-1")))
    return out


def reply_headers(headers: httpx.Headers, *, keep_encoding: bool = True) -> dict[str, str]:
    """The upstream's answer headers as the client gets them (the body is re-framed)."""
    drop = _HOP if keep_encoding else _HOP | {"content-encoding"}
    return {k: v for k, v in headers.items() if k.lower() not in drop}


def new_client() -> httpx.AsyncClient:
    """The upstream client: no redirects followed, no environment proxies, no read timeout.

    Only connecting is bounded: once the upstream has the request, the proxy waits as
    long as the client does (the app cancels the request when the client leaves).
    """
    return httpx.AsyncClient(
        timeout=httpx.Timeout(None, connect=limits.PROXY_CONNECT_TIMEOUT_SECONDS),
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
