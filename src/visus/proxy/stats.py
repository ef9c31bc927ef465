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
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path

from visus.proxy.edit import Edit
from visus.telemetry import names
from visus.telemetry.ledger import Ledger
from visus.telemetry.metrics import Metric, counter, gauge

__all__ = ["ProxyStats", "edit_attributes", "log_edit"]

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
    #: Images sent as a note naming an equal one still in the request.
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
        # An edit that deduplicates says how many (the rewrite's own count, when it has one).
        self.images_deduplicated += getattr(edit, "deduplicated", 0)
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
            "Images in proxied requests, by what the proxy did (refused: the provider "
            "refused a request for an image; cached: its fitting was remembered)",
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
        }
        for key, (name, doc) in per.items():
            yield counter(name, doc, [({"model": m}, float(getattr(r, key))) for m, r in rows])


def edit_attributes(edit: Edit) -> dict[str, int]:
    """One request's edits as span attributes."""
    return {
        names.IMAGES: edit.images,
        names.FITTED: edit.fitted,
        names.HOISTED: edit.hoisted,
        names.REPAIRED: edit.repaired,
        names.ELIDED: edit.elided,
        names.BYTES_SAVED: edit.bytes_saved,
        names.TOKENS_SAVED: edit.tokens_saved,
    }


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
