"""The upstream's reply, read as it passes on to the client: one bounded tap.

What the proxy learns from a reply (the tokens it was billed, the reasoning blocks the
upstream dropped) is read by :class:`ReplyTap` while every byte goes on as it came,
never holding the reply: a stream (``text/event-stream``) is cut into its events and
each event its protocol's :class:`Reader` wants is parsed (picked by a cheap look at
the raw bytes first: most events are text deltas nobody reads); a JSON
reply is held while it stays under ``limits.PROXY_REPLY_TAP_BYTES`` and parsed at its
end. An event past that bound, or a JSON reply, is passed on unread; so is a reply in a
coding the proxy does not read. A gzip or deflate reply is inflated as it passes (at
most ``limits.PROXY_MAX_BODY_BYTES`` of it: past that, unread). Each protocol reads
its own events (:mod:`visus.proxy.anthropic`, :mod:`~visus.proxy.openai_chat`,
:mod:`~visus.proxy.openai_responses`); this module only frames and bounds.

When the reply ends (whole, or cut short by the client leaving) the tap calls its
``ended`` callback once, with what was read: the app puts the usage on the model
call's span, which ends there (:mod:`visus.proxy.app`).

Example:
    >>> import asyncio
    >>> class Last:
    ...     usage, dropped, marker = ReplyUsage(), 0, b"usage"
    ...     seen: list[dict[str, Any]] = []
    ...     def wants(self, event: bytes) -> bool:
    ...         return True
    ...     def read(self, data: dict[str, Any]) -> None:
    ...         self.seen.append(data)
    >>> stream = b'data: {"a": 1}\\n\\ndata: {"usage": 2}\\n\\n'
    >>> async def chunks():
    ...     yield stream[:9]
    ...     yield stream[9:]
    >>> async def run():
    ...     tap = ReplyTap("text/event-stream", None, Last(), lambda: None)
    ...     return b"".join([c async for c in tap.wrap(chunks())])
    >>> asyncio.run(run()) == stream, Last.seen
    (True, [{'usage': 2}])
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from visus import limits

__all__ = ["Reader", "ReplyTap", "ReplyUsage", "as_count", "detailed_usage", "event_data"]

logger = logging.getLogger("visus.proxy")

_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
_SLICE = 64 * 1024


class Reader(Protocol):
    """What one protocol reads from its replies: the usage (:class:`ReplyUsage`) and the
    reasoning blocks the upstream said it dropped (Messages only says)."""

    @property
    def usage(self) -> ReplyUsage: ...

    @property
    def dropped(self) -> int: ...

    #: Bytes every stream event it reads holds, starting with a quote (``b'"usage"'``, a
    #: key; ``b'"message_'``, a type value), so never inside a JSON string, where a quote
    #: is escaped: the tap splits and parses only the chunks that hold it, and passes
    #: the rest of a stream (the text deltas) after finding its last event boundary.
    marker: bytes

    def wants(self, event: bytes) -> bool:
        """Whether one stream event holding the marker (its raw bytes) is worth parsing."""
        ...

    def read(self, data: dict[str, Any]) -> None:
        """One parsed stream event, or the whole JSON reply."""
        ...


@dataclass(slots=True)
class ReplyUsage:
    """The tokens a reply says it was billed, as the GenAI conventions count them:
    ``input_tokens`` every prompt token (the cached ones included), ``cache_read_tokens``
    and ``cache_write_tokens`` the part read from and written to the prompt cache,
    ``reasoning_tokens`` the part of ``output_tokens`` spent reasoning. ``seen``: the
    reply carried a usage at all. ``model``: the model that answered, when it says."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    seen: bool = False
    model: str | None = None


def as_count(value: object) -> int:
    """A token count from a reply (anything but a non-negative int counts 0).

    Example:
        >>> as_count(12), as_count(None), as_count("7"), as_count(True), as_count(-1)
        (12, 0, 0, 0, 0)
    """
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def detailed_usage(usage: dict[str, Any], model: object, inputs: str, outputs: str) -> ReplyUsage:
    """A usage whose input and output counts are ``inputs`` and ``outputs``, each with
    a ``<name>_details`` object (OpenAI's shape on both its wires: ``cached_tokens``
    counted in the input, ``reasoning_tokens`` in the output).

    Example:
        >>> u = detailed_usage({"prompt_tokens": 9, "completion_tokens": 2,
        ...     "prompt_tokens_details": {"cached_tokens": 4}}, "m", "prompt_tokens",
        ...     "completion_tokens")
        >>> u.input_tokens, u.cache_read_tokens, u.output_tokens, u.reasoning_tokens
        (9, 4, 2, 0)
    """
    ins, outs = usage.get(f"{inputs}_details"), usage.get(f"{outputs}_details")
    return ReplyUsage(
        input_tokens=as_count(usage.get(inputs)),
        output_tokens=as_count(usage.get(outputs)),
        cache_read_tokens=as_count(ins.get("cached_tokens")) if isinstance(ins, dict) else 0,
        reasoning_tokens=as_count(outs.get("reasoning_tokens")) if isinstance(outs, dict) else 0,
        seen=True,
        model=model if isinstance(model, str) else None,
    )


def event_data(event: bytes) -> dict[str, Any] | None:
    """The JSON of one SSE event's ``data:`` lines (None when it has none or is not JSON).

    Example:
        >>> event_data(b'event: x\\ndata: {"type": "x"}'), event_data(b"data: [DONE]")
        ({'type': 'x'}, None)
    """
    lines = [ln[5:].strip() for ln in event.split(b"\n") if ln.startswith(b"data:")]
    try:
        found = json.loads(b"\n".join(lines)) if lines else None
    except (ValueError, RecursionError):
        return None
    return found if isinstance(found, dict) else None


class ReplyTap:
    """Passes a reply's bytes on while ``reader`` reads it (module docstring); calls
    ``ended`` once when the reply is over, however it ends."""

    def __init__(
        self,
        content_type: str | None,
        coding: str | None,
        reader: Reader,
        ended: Callable[[], None],
    ) -> None:
        self.sse = (content_type or "").startswith("text/event-stream")
        self.reader = reader
        self.ended = ended
        name = (coding or "identity").strip().lower()
        self.inflate = zlib.decompressobj(_WBITS[name]) if name in _WBITS else None
        # Another coding is not one the proxy asked for (transport narrows
        # Accept-Encoding): passed on unread.
        self.done = name != "identity" and self.inflate is None
        self.pending = b""  # a stream's event not yet whole
        self.held: list[bytes] = []  # a JSON reply so far
        self.size = 0  # bytes read (decoded)

    async def wrap(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        try:
            async for chunk in chunks:
                if not self.done:
                    self._take(chunk)
                yield chunk
            if not self.done and not self.sse:
                self._parse(b"".join(self.held))
        finally:
            self.done, self.held, self.pending = True, [], b""
            try:
                self.ended()
            except Exception:  # the client has its reply: a bug here must not cut it
                logger.exception("could not count a reply's usage")

    def _take(self, chunk: bytes) -> None:
        if self.inflate is None:
            self._plain(chunk)
            return
        try:
            data = self.inflate.decompress(chunk, _SLICE)
            while data and not self.done:
                self._plain(data)
                tail = self.inflate.unconsumed_tail
                data = self.inflate.decompress(tail, _SLICE) if tail else b""
        except zlib.error:
            self.done = True

    def _plain(self, data: bytes) -> None:
        self.size += len(data)
        if self.sse:
            self._events(data)
        elif self.size > limits.PROXY_REPLY_TAP_BYTES:
            self.done, self.held = True, []
        else:
            self.held.append(data)
        if self.inflate is not None and self.size > limits.PROXY_MAX_BODY_BYTES:
            self.done = True  # a stream inflating past any body the proxy reads

    def _events(self, data: bytes) -> None:
        buf = self.pending + data
        if b"\r" in buf:  # after joining: a CRLF split across two chunks is joined first
            buf = buf.replace(b"\r\n", b"\n")
        if self.reader.marker not in buf:
            # Most of a stream (text deltas): only the event still open is kept.
            cut = buf.rfind(b"\n\n")
            self.pending = buf if cut < 0 else buf[cut + 2 :]
        else:
            events = buf.split(b"\n\n")
            self.pending = events.pop()
            for event in events:
                if self.reader.marker in event and self.reader.wants(event):
                    found = event_data(event)
                    if found is not None:
                        self.reader.read(found)
        if len(self.pending) > limits.PROXY_REPLY_TAP_BYTES:
            self.done, self.pending = True, b""

    def _parse(self, raw: bytes) -> None:
        try:
            reply = json.loads(raw)
        except (ValueError, RecursionError):
            return
        if isinstance(reply, dict):
            self.reader.read(reply)
