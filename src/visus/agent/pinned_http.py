"""An HTTP client for the MCP SDK that connects only to the addresses checked for a URL.

A remote client may name an MCP server's URL (``[mcp] allow_client_urls``);
:func:`visus.net.acheck_url` checks it once (https, every address the name resolves to
public) and returns a :class:`~visus.net.CheckedURL`. Left to itself the SDK's HTTP
client would resolve the name again when it connects, and a DNS server answering a
public address to the check and 127.0.0.1 a moment later (rebinding) would hand it the
server's own loopback. :class:`PinnedTransport` closes that window, as :mod:`visus.net`
does for its own fetches: each request goes to a checked address, with the ``Host``
header, TLS SNI and the certificate check still on the name; a request for any other
origin (a redirect elsewhere) is refused, and proxies from the environment are ignored
(a proxy would resolve the name itself).

Example:
    >>> from visus.net import CheckedURL
    >>> checked = CheckedURL("https://mcp.example/mcp", "https", "mcp.example", 443, ("1.1.1.1",))
    >>> client = pinned_client(checked, headers={}, timeout=5)
    >>> type(client._transport).__name__
    'PinnedTransport'
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import httpx2

from visus.net import CheckedURL

__all__ = ["PinnedTransport", "pinned_client"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


class PinnedTransport(httpx2.AsyncBaseTransport):
    """Sends each request for ``checked``'s origin to its checked addresses, in order
    (the next one when one refuses the connection); any other origin is refused with
    :class:`httpx2.ConnectError` before a packet leaves."""

    def __init__(self, checked: CheckedURL, *, verify: ssl.SSLContext | bool = True) -> None:
        self.checked = checked
        self._inner = httpx2.AsyncHTTPTransport(verify=verify, trust_env=False)

    def _origin_ok(self, url: httpx2.URL) -> bool:
        port = url.port or _DEFAULT_PORTS.get(url.scheme)
        host = url.raw_host.decode("ascii").lower()
        wanted = self.checked
        return (url.scheme, host, port) == (wanted.scheme, wanted.host, wanted.port)

    def _pinned(self, request: httpx2.Request, address: str) -> httpx2.Request:
        extensions = dict(request.extensions)
        if self.checked.scheme == "https":
            extensions["sni_hostname"] = self.checked.host  # the certificate is the name's
        # The Host header was set from the URL as built: it keeps naming the host.
        return httpx2.Request(
            request.method,
            request.url.copy_with(host=address),
            headers=request.headers,
            stream=request.stream,
            extensions=extensions,
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if not self._origin_ok(request.url):
            raise httpx2.ConnectError(
                f"refused {request.url.copy_with(query=None)}: only "
                f"{self.checked.url} was checked, at {', '.join(self.checked.addresses)}",
                request=request,
            )
        *first, last = self.checked.addresses
        for address in first:
            try:
                return await self._inner.handle_async_request(self._pinned(request, address))
            except httpx2.ConnectError:
                continue  # another checked address of the same name may answer
        return await self._inner.handle_async_request(self._pinned(request, last))

    async def aclose(self) -> None:
        await self._inner.aclose()


def pinned_client(
    checked: CheckedURL,
    *,
    headers: Mapping[str, str],
    timeout: float,
    event_hooks: Mapping[str, Sequence[Callable[..., Awaitable[Any]]]] | None = None,
    verify: ssl.SSLContext | bool = True,
) -> httpx2.AsyncClient:
    """The ``httpx2.AsyncClient`` to hand the SDK's ``streamable_http_client`` for a
    checked URL (``trust_env=False``: no proxy, no ``.netrc``)."""
    return httpx2.AsyncClient(
        headers=dict(headers),
        timeout=timeout,
        event_hooks={k: list(v) for k, v in (event_hooks or {}).items()},
        transport=PinnedTransport(checked, verify=verify),
        trust_env=False,
    )
