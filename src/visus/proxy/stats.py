"""What the proxy has done since it started: the numbers ``GET /stats`` serves.

Example:
    >>> s = ProxyStats()
    >>> s.requests += 1
    >>> s.as_dict()["requests"]
    1
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from visus.proxy.edit import Edit

__all__ = ["ProxyStats"]


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
    #: Images whose fitting was answered from the cache (a re-sent history).
    images_cached: int = 0
    bytes_saved: int = 0
    image_tokens_saved: int = 0
    image_rejections: int = 0
    upstream_errors: int = 0

    def add(self, edit: Edit) -> None:
        """Count one request's edits."""
        self.images += edit.images
        self.images_fitted += edit.fitted
        self.images_hoisted += edit.hoisted
        self.images_repaired += edit.repaired
        self.images_elided += edit.elided
        self.images_cached += edit.cache_hits
        self.bytes_saved += edit.bytes_saved
        self.image_tokens_saved += edit.tokens_saved
        if edit.changed:
            self.requests_changed += 1

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
