"""What a wire imposes on images and documents, and the profiles images are fitted to.

A wire's :class:`WireRules` caps apply on top of the model's own (the smaller wins), so a
custom or unknown model spec never lowers to a request the service refuses for size.

Example:
    >>> from visus.models import get_model
    >>> rules = WireRules(media_types=frozenset({"image/png"}), max_images=100)
    >>> max_images(get_model("claude-sonnet-4-6"), rules)
    100
"""

from __future__ import annotations

from dataclasses import dataclass

from visus import limits
from visus.media.types import Profile
from visus.models.spec import ModelSpec

__all__ = ["WireRules", "accepted_for", "max_document_pages", "max_images", "profile_for"]


@dataclass(frozen=True, slots=True)
class WireRules:
    """What a wire itself imposes on images, whatever the model.

    The caps apply on top of the model's own (the smaller wins), so a custom or
    unknown model spec can never lower to a request the service refuses for size.
    ``max_image_bytes`` and ``max_request_image_bytes`` (all images of one request)
    count base64 characters when ``base64_byte_limit``, decoded bytes otherwise.
    """

    media_types: frozenset[str]
    base64_byte_limit: bool = False
    many_images_rule: bool = False
    max_images: int | None = None
    #: A larger image cap for models whose context is over
    #: ``limits.ANTHROPIC_PDF_LARGE_CONTEXT_TOKENS`` (Anthropic: 600 instead of 100).
    max_images_large_context: int | None = None
    max_edge: int | None = None
    max_image_bytes: int | None = None
    max_request_image_bytes: int | None = None
    #: Documents (PDF): whether the wire carries them natively at all, and its caps
    #: (bytes count as base64 when ``base64_byte_limit``, like images).
    documents: bool = True
    max_documents: int | None = None
    max_document_bytes: int | None = None
    max_document_pages: int | None = None
    #: A larger page cap for models whose context is over
    #: ``limits.ANTHROPIC_PDF_LARGE_CONTEXT_TOKENS`` (Anthropic: 600 instead of 100).
    max_document_pages_large_context: int | None = None
    #: Documents sent count against ``max_request_image_bytes`` (Anthropic's 32 MB
    #: request, Gemini's inline-data cap): images leave first when both do not fit.
    documents_share_budget: bool = False
    #: Whether an image may go as a note and the crops where it changed from an earlier
    #: image of the request (:mod:`visus.wire._crops`): False where the wire cannot put
    #: the note beside its crops (Ollama's ``images`` list carries no text between them).
    crops: bool = True


def max_document_pages(spec: ModelSpec, rules: WireRules) -> int | None:
    """Pages one natively sent PDF may have for ``spec`` on a wire with ``rules``."""
    large = rules.max_document_pages_large_context
    if large is not None and spec.context_tokens > limits.ANTHROPIC_PDF_LARGE_CONTEXT_TOKENS:
        return large
    return rules.max_document_pages


def max_images(spec: ModelSpec, rules: WireRules) -> int:
    """Images one request may carry for ``spec`` on a wire with ``rules``."""
    cap = spec.max_images
    wire = rules.max_images
    large = rules.max_images_large_context
    if large is not None and spec.context_tokens > limits.ANTHROPIC_PDF_LARGE_CONTEXT_TOKENS:
        wire = large
    return min(cap, wire) if wire is not None else cap


def profile_for(spec: ModelSpec, rules: WireRules, image_count: int) -> Profile:
    """The profile an image is re-fitted to in a request of ``image_count`` images."""
    return _tightened(spec.profile(), spec, rules, image_count)


def accepted_for(spec: ModelSpec, rules: WireRules, image_count: int) -> Profile:
    """The bounds an image may keep as it is in such a request: ``spec.accepted()`` (the
    provider takes it and bills no more than the fit), tightened like :func:`profile_for`."""
    return _tightened(spec.accepted(), spec, rules, image_count)


def _tightened(base: Profile, spec: ModelSpec, rules: WireRules, image_count: int) -> Profile:
    media_types = (spec.media_types & rules.media_types) or rules.media_types
    max_bytes = base.max_bytes
    if rules.max_image_bytes is not None:
        max_bytes = min(max_bytes, rules.max_image_bytes)
    if rules.base64_byte_limit:
        max_bytes = max_bytes // 4 * 3  # so that 4 * ceil(n / 3) base64 chars still fit
    max_edge = base.max_edge
    if rules.max_edge is not None:
        max_edge = min(max_edge, rules.max_edge)
    if rules.many_images_rule and image_count > limits.ANTHROPIC_MANY_IMAGES:
        max_edge = min(max_edge, limits.ANTHROPIC_MANY_IMAGES_MAX_EDGE)
    return Profile(
        max_edge=max_edge,
        max_pixels=min(base.max_pixels, max_edge * max_edge),
        max_bytes=max_bytes,
        media_types=frozenset(media_types),
    )
