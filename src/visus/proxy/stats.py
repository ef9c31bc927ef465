"""What the proxy has done since it started: ``GET /stats`` (JSON) and ``GET /metrics``
(Prometheus text), from the same counters, and the savings ledger they feed.

Example:
    >>> s = ProxyStats()
    >>> s.requests += 1
    >>> s.as_dict()["requests"]
    1
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path

import httpx

from visus.proxy.edit import Edit
from visus.proxy.replies import Reader, ReplyTap, ReplyUsage
from visus.telemetry import names
from visus.telemetry.ledger import Ledger, usd_spent
from visus.telemetry.metrics import Metric, counter, gauge
from visus.telemetry.traces import Span

__all__ = ["ProxyStats", "edit_attributes", "log_edit", "tap_reply", "usage_attributes"]

logger = logging.getLogger("visus.proxy")


@dataclass(slots=True)
class ProxyStats:
    """Running totals. One event loop updates them, so no lock is needed."""

    requests: int = 0
    requests_changed: int = 0
    images: int = 0
    images_fitted: int = 0
    images_hoisted: int = 0
    images_repaired: int = 0
    images_elided: int = 0
    #: Images sent as a note naming the earlier image they repeat and the crops of the
    #: few small areas that differ (:mod:`visus.proxy.cuts`): the repeated pixels go as
    #: a reference. (A byte-identical image is sent again whole: ``cuts`` skips it.)
    images_deduplicated: int = 0
    #: Images whose fitting was answered from the cache (a re-sent history).
    images_cached: int = 0
    bytes_saved: int = 0
    image_tokens_saved: int = 0
    image_rejections: int = 0
    upstream_errors: int = 0
    #: Reasoning bound to its prefix (:mod:`visus.proxy.reasoning`): requests the proxy
    #: opted into ``drop_block`` (and its beta), requests whose own ``block_binding``
    #: it kept, reasoning blocks or items requests carried after a point the proxy
    #: evicted, and reasoning blocks the upstream said it dropped.
    binding_opt_ins: int = 0
    binding_kept: int = 0
    reasoning_after_edits: int = 0
    reasoning_dropped: int = 0
    #: Reasoning blocks an earlier request's eviction had the upstream drop, left out
    #: of later requests (not dropped, counted and redone again at every step).
    reasoning_left_out: int = 0
    #: What the upstream's replies said they used (``input_tokens`` counts the cached
    #: ones), summed over every reply that said (:mod:`visus.proxy.replies`).
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    #: Answers streaming back to clients now.
    open_streams: int = 0
    #: Per model and day, priced; ``<data>/proxy/ledger.json`` when the proxy has a data folder.
    ledger: Ledger = field(default_factory=lambda: Ledger(None))

    @classmethod
    def at(cls, data: Path | None) -> ProxyStats:
        """Stats whose ledger is kept in ``data`` (None: in memory only)."""
        return cls(ledger=Ledger(None if data is None else data / "proxy" / "ledger.json"))

    def add(self, edit: Edit, *, model: str = "", seconds: float = 0.0) -> None:
        """Count one request's edits (to ``model``, ``seconds`` added before forwarding)."""
        self.images += edit.images
        self.images_fitted += edit.fitted
        self.images_hoisted += edit.hoisted
        self.images_repaired += edit.repaired
        self.images_elided += edit.elided
        self.images_deduplicated += edit.cut_images
        self.images_cached += edit.cache_hits
        self.bytes_saved += edit.bytes_saved
        self.image_tokens_saved += edit.tokens_saved
        if edit.changed:
            self.requests_changed += 1
        self.binding_opt_ins += edit.binding.opted_in
        self.binding_kept += edit.binding.client_choice is not None
        self.reasoning_after_edits += edit.binding.after_edits
        self.reasoning_left_out += edit.binding.left_out
        self.ledger.add(
            model,
            images=edit.images,
            bytes_saved=edit.bytes_saved,
            tokens_saved=edit.tokens_saved,
            seconds=seconds,
        )

    def dropped(self, model: str, blocks: int) -> None:
        """Count reasoning blocks the upstream dropped from a request to ``model``
        (a reply's ``input_transformations``)."""
        self.reasoning_dropped += blocks
        self.ledger.dropped(model, blocks)

    def used(self, model: str, usage: ReplyUsage) -> float:
        """Count what one reply to a request for ``model`` said it used; its price at
        the model's list prices (:func:`~visus.telemetry.ledger.usd_spent`)."""
        usd = usd_spent(
            model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        )
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_read_tokens += usage.cache_read_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        self.ledger.used(
            model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            usd=usd,
        )
        return usd

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "ledger"}

    def metrics(self) -> Iterator[Metric]:
        """The same counters as Prometheus families (read when ``/metrics`` is scraped)."""
        yield counter(
            "visus_proxy_requests",
            "Requests to the rewriting endpoints, by outcome: edited (images changed) or "
            "forwarded as sent",
            [
                ({"outcome": "edited"}, self.requests_changed),
                ({"outcome": "unchanged"}, self.requests - self.requests_changed),
            ],
        )
        yield counter(
            "visus_proxy_upstream_errors",
            "Requests the upstream did not answer",
            [({}, self.upstream_errors)],
        )
        events = {
            "fitted": self.images_fitted,
            "hoisted": self.images_hoisted,
            "repaired": self.images_repaired,
            "elided": self.images_elided,
            "deduplicated": self.images_deduplicated,
            "refused": self.image_rejections,
            "cached": self.images_cached,
        }
        yield counter(
            "visus_proxy_images",
            "Images in proxied requests, by what the proxy did (deduplicated: sent as a note "
            "naming the earlier image it repeats and crops of what changed; refused: the "
            "provider refused a request for an image; cached: its fitting was remembered)",
            [({"event": k}, v) for k, v in events.items()],
        )
        yield gauge(
            "visus_proxy_open_streams",
            "Answers streaming to clients now",
            [({}, self.open_streams)],
        )
        yield from self._saved()

    def _saved(self) -> Iterator[Metric]:
        rows = sorted(self.ledger.totals().items())
        per = {
            "requests": ("visus_proxy_model_requests", "Requests edited, by model"),
            "bytes_saved": ("visus_proxy_saved_bytes", "Image bytes not sent upstream, by model"),
            "tokens_saved": (
                "visus_proxy_saved_tokens",
                "Image tokens not sent upstream, by model",
            ),
            "usd_saved": (
                "visus_proxy_saved_usd",
                "Dollars saved, by model: the saved tokens at the model's list input price "
                "(what the request would have cost unchanged, priced as visus usage prices)",
            ),
            "added_seconds": (
                "visus_proxy_added_seconds",
                "Seconds the proxy added before forwarding (read, edit, write), by model",
            ),
            "reasoning_dropped": (
                "visus_proxy_reasoning_dropped",
                "Reasoning blocks the upstream said it dropped from proxied requests "
                "(input_transformations): reasoning the model may do again, by model",
            ),
            "usd_spent": (
                "visus_proxy_spent_usd",
                "Dollars the upstream's replies said the proxied requests cost, by model "
                "(their usage at the model's list prices, as visus usage prices)",
            ),
        }
        for key, (name, doc) in per.items():
            yield counter(name, doc, [({"model": m}, float(getattr(r, key))) for m, r in rows])
        kinds = ("input", "output", "cache_read", "cache_write")
        yield counter(
            "visus_proxy_used_tokens",
            "Tokens the upstream's replies said the proxied requests used, by model and kind "
            "(input counts the cached ones; cache_read and cache_write are part of it)",
            [
                ({"model": m, "kind": k}, float(getattr(r, f"{k}_tokens")))
                for m, r in rows
                for k in kinds
            ],
        )


def edit_attributes(edit: Edit) -> dict[str, int]:
    """One request's edits as span attributes."""
    return {
        names.IMAGES: edit.images,
        names.FITTED: edit.fitted,
        names.HOISTED: edit.hoisted,
        names.REPAIRED: edit.repaired,
        names.ELIDED: edit.elided,
        names.DEDUPLICATED_IMAGES: edit.cut_images,
        names.BYTES_SAVED: edit.bytes_saved,
        names.TOKENS_SAVED: edit.tokens_saved,
    }


def usage_attributes(usage: ReplyUsage, usd: float) -> dict[str, int | float | str]:
    """One reply's usage as the GenAI conventions' span attributes, its cost, and the
    answering model when the reply names it.

    Example:
        >>> usage_attributes(ReplyUsage(10, 2, seen=True), 0.5)[names.COST_USD]
        0.5
    """
    found: dict[str, int | float | str] = {
        names.INPUT_TOKENS: usage.input_tokens,
        names.OUTPUT_TOKENS: usage.output_tokens,
        names.CACHE_READ_TOKENS: usage.cache_read_tokens,
        names.CACHE_WRITE_TOKENS: usage.cache_write_tokens,
        names.REASONING_TOKENS: usage.reasoning_tokens,
        names.COST_USD: usd,
    }
    if usage.model:
        found[names.RESPONSE_MODEL] = usage.model
    return found


def tap_reply(
    stats: ProxyStats,
    response: httpx.Response,
    body: AsyncIterator[bytes],
    reader: Reader,
    model: str,
    traced: Span,
) -> AsyncIterator[bytes]:
    """``body`` (the reply's bytes) as it comes, read by ``reader`` as it passes: once
    over (or the client gone), what it used is counted in ``stats`` and put on the
    model call's span ``traced``, which ends then, not when the reply starts."""
    traced.keep_open()

    def ended() -> None:
        try:
            if reader.dropped:
                stats.dropped(model, reader.dropped)
            if reader.usage.seen:
                usd = stats.used(model, reader.usage)
                traced.set(usage_attributes(reader.usage, usd))
        finally:
            traced.end()

    headers = response.headers
    coding = headers.get("content-encoding")
    return ReplyTap(headers.get("content-type"), coding, reader, ended).wrap(body)


def log_edit(path: str, model: object, edit: Edit) -> None:
    """One line saying what the proxy changed in a request to ``path``, never what was
    sent: no headers (keys), no text, no pixels."""
    logger.info(
        "%s model=%s images=%d fitted=%d hoisted=%d repaired=%d elided=%d "
        "saved=%d bytes ~%d image tokens",
        path,
        model,
        edit.images,
        edit.fitted,
        edit.hoisted,
        edit.repaired,
        edit.elided,
        edit.bytes_saved,
        edit.tokens_saved,
    )
    bound = edit.binding
    if bound.opted_in or bound.client_choice is not None:
        # Reasoning bound to its prefix (proxy.reasoning): what the request does about it.
        logger.info(
            "%s reasoning after the proxy's edits: %d block(s); %s",
            path,
            bound.after_edits,
            "added block_binding drop_block and its beta"
            if bound.opted_in
            else f"kept the client's prefix_mismatch_behavior={bound.client_choice}",
        )
