"""An HTTP/1.1 protocol for uvicorn that closes a connection whose request headers do
not arrive in time.

uvicorn bounds the idle time between requests (``timeout_keep_alive``) but not the
time a request's headers take: a client that opens thousands of connections and sends
half a request line on each holds them open for ever, until the process runs out of
file descriptors (redteam, issue 23). Here a connection waiting for headers (no request
being served) longer than :data:`visus.limits.HTTP_HEADERS_TIMEOUT_SECONDS` is closed.
A request being answered (a long poll, an SSE stream, a slow upload) is not cut: once
its headers are in, the app's own budgets apply.

Example:
    >>> import uvicorn
    >>> config = uvicorn.Config(app=None, http=HeadersTimeoutH11)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from visus import limits

__all__ = ["HeadersTimeoutH11"]


class HeadersTimeoutH11(H11Protocol):
    """uvicorn's h11 protocol, plus a deadline on waiting for a request's headers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waiting_since = time.monotonic()
        self._headers_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._waiting_since = time.monotonic()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._headers_timer is not None:
            self._headers_timer.cancel()
            self._headers_timer = None
        super().connection_lost(exc)

    def _serving(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _arm(self) -> None:
        self._headers_timer = self.loop.call_later(limits.HTTP_HEADERS_TIMEOUT_SECONDS, self._check)

    def _check(self) -> None:
        self._headers_timer = None
        if self.transport.is_closing():
            return
        now = time.monotonic()
        if self._serving():
            # A request is in; the wait for the next one starts when it is answered.
            self._waiting_since = now
        elif now - self._waiting_since >= limits.HTTP_HEADERS_TIMEOUT_SECONDS:
            self.transport.close()
            return
        self._arm()
