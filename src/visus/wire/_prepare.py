"""Resolve a request's images for one model on one wire (shared by every wire).

Each :class:`ImagePart` becomes a :class:`WireImage` or a text note; nothing is
dropped. In order:

1. A model without vision gets a note per image instead of pixels.
2. Request image cap (the smaller of ``spec.max_images`` and the wire's): we never
   fail a request for carrying too many images. The oldest re-viewable perceptions
   beyond the cap become descriptors (the model can view them again); only if the
   request still holds too many do the oldest user attachments become notes. Newest
   images always stay.
3. Limits: an image outside what the model takes as it is (``spec.accepted()``,
   tightened by the wire's own caps: edge, pixels, bytes, media types the wire and
   model both take) is re-fitted to its profile with :func:`visus.media.fit`; the
   derived blob is stored and cached by (digest, profile). Wires that count an image's
   bytes as base64 (Anthropic) get 3/4 of the byte cap. Anthropic's many-image rule:
   over ``limits.ANTHROPIC_MANY_IMAGES`` images, every image is fitted to
   ``limits.ANTHROPIC_MANY_IMAGES_MAX_EDGE`` a side.
4. Request byte budget (where the wire has one): if the sent images together are
   over it, images leave in the same order as for the count cap (the last stays).
5. A missing or corrupt blob, or an image media cannot fit, becomes a text note.

Documents (:class:`DocumentPart`, PDFs) are sent as they are, never re-fitted: a
model without ``spec.pdf``, a wire without documents (``rules.documents``), a PDF
past the wire's page or byte cap, or one beyond the wire's document count (oldest
leave first) becomes a text note naming it, and so does a missing blob.

Only the blobs of images and documents that are sent are read.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TypeAlias, assert_never

from visus import limits
from visus.errors import IntegrityError, MediaError, NotFoundError, StoreError
from visus.media.types import Profile
from visus.models.spec import ModelSpec
from visus.models.tokens import pick_detail
from visus.record.messages import (
    AssistantMessage,
    AttachmentOrigin,
    DocumentPart,
    ImagePart,
    ModelRequest,
    Part,
    PerceptionOrigin,
    TextPart,
    ToolResult,
    UserMessage,
)
from visus.wire._prepared import (
    Prepared,
    WireDocument,
    WireImage,
    WireMessage,
    WirePart,
    WireTool,
    WireUser,
)
from visus.wire._refit import BlobReader, BlobWriter, RefitCache, RefitEntry

__all__ = [
    "WireRules",
    "accepted_for",
    "document_filename",
    "max_document_pages",
    "max_images",
    "missing_note",
    "prepare",
    "profile_for",
]


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


def max_document_pages(spec: ModelSpec, rules: WireRules) -> int | None:
    """Pages one natively sent PDF may have for ``spec`` on a wire with ``rules``."""
    large = rules.max_document_pages_large_context
    if large is not None and spec.context_tokens > limits.ANTHROPIC_PDF_LARGE_CONTEXT_TOKENS:
        return large
    return rules.max_document_pages


def document_filename(origin: PerceptionOrigin | AttachmentOrigin) -> str:
    """The file name a document goes by on the wire: its own, ending in ``.pdf``."""
    if isinstance(origin, PerceptionOrigin):
        raw = origin.source.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    elif isinstance(origin, AttachmentOrigin):
        raw = origin.filename or ""
    else:
        assert_never(origin)
    name = raw.strip() or "document.pdf"
    return name if name.lower().endswith(".pdf") else f"{name}.pdf"


def _document_what(part: DocumentPart) -> str:
    origin = part.origin
    what = origin.source if isinstance(origin, PerceptionOrigin) else origin.filename
    return f"{what or 'document'}, {part.page_count} pages"


def _note(text: str) -> TextPart:
    """What an image or document that is not sent becomes: visus's note in its place
    (:attr:`TextPart.note`, which a wire may send apart from the tool's own text)."""
    return TextPart(text, note=True)


def missing_note(digest: str, why: str = "is missing") -> str:
    return f"[image unavailable: blob sha256:{digest} {why}]"


def max_images(spec: ModelSpec, rules: WireRules) -> int:
    """Images one request may carry for ``spec`` on a wire with ``rules``."""
    cap = spec.max_images
    wire = rules.max_images
    large = rules.max_images_large_context
    if large is not None and spec.context_tokens > limits.ANTHROPIC_PDF_LARGE_CONTEXT_TOKENS:
        wire = large
    return min(cap, wire) if wire is not None else cap


def _over_note(part: ImagePart, turn: int, reason: str) -> str:
    """The note an image left out of a full request becomes (``reason``: which bound)."""
    origin = part.origin
    if isinstance(origin, PerceptionOrigin):
        # The digest, not the path: the file may hold other bytes by now.
        ref = f"sha256:{part.digest[: limits.DESCRIPTOR_DIGEST_CHARS]}"
        return (
            f"[image elided: viewed {origin.where()} in turn {turn}; {reason}; "
            f'call view("{ref}") to see it again]'
        )
    if isinstance(origin, AttachmentOrigin):
        name = f'"{origin.filename}"' if origin.filename else "image"
        return f"[image omitted: attachment {name} from turn {turn} is {reason}]"
    assert_never(origin)


def _no_vision_note(part: ImagePart, spec: ModelSpec) -> str:
    origin = part.origin
    what = origin.source if isinstance(origin, PerceptionOrigin) else (origin.filename or "image")
    size = f"{part.width}x{part.height}"
    return f"[image not shown: {spec.name} does not take images ({what}, {size})]"


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


def _fits(media_type: str, width: int, height: int, size: int, profile: Profile) -> bool:
    return (
        media_type in profile.media_types
        and max(width, height) <= profile.max_edge
        and width * height <= profile.max_pixels
        and size <= profile.max_bytes
    )


class _Resolver:
    def __init__(
        self,
        spec: ModelSpec,
        profiles: tuple[Profile, Profile],
        blobs: BlobReader,
        cache: RefitCache,
    ) -> None:
        self.spec = spec
        # What an image is re-fitted to, and what it may keep as it is.
        self.profile, self.accepted = profiles
        self.blobs = blobs
        self.cache = cache

    def _read(self, digest: str) -> bytes | TextPart:
        try:
            return self.blobs.get(digest)
        except NotFoundError:
            return _note(missing_note(digest))
        except IntegrityError:
            return _note(missing_note(digest, "is corrupt"))
        except StoreError as e:
            return _note(missing_note(digest, f"cannot be read ({e})"))

    def resolve(self, part: ImagePart) -> WirePart:
        if _fits(part.media_type, part.width, part.height, part.size, self.accepted):
            data = self._read(part.digest)
            if isinstance(data, TextPart):
                return data
            if len(data) <= self.accepted.max_bytes:
                return self._image(data, part, part.media_type, part.width, part.height)
            return self._refit(part, data)
        return self._refit(part, None)

    def _image(
        self, data: bytes, part: ImagePart, media_type: str, width: int, height: int
    ) -> WireImage:
        return WireImage(
            data=base64.b64encode(data).decode("ascii"),
            size=len(data),
            media_type=media_type,
            width=width,
            height=height,
            digest=part.digest,
            origin=part.origin,
            detail=pick_detail(self.spec, width, height),
        )

    def _refit(self, part: ImagePart, data: bytes | None) -> WirePart:
        entry = self.cache.get(part.digest, self.profile)
        if entry is not None:
            try:
                derived = self.blobs.get(entry.digest)
            except (StoreError, NotFoundError):
                self.cache.forget(part.digest, self.profile)
            else:
                image = self._image(derived, part, entry.media_type, entry.width, entry.height)
                return replace(image, digest=entry.digest)
        if data is None:
            read = self._read(part.digest)
            if isinstance(read, TextPart):
                return read
            data = read
        from visus.media import fit  # media is heavy (Pillow); only refits need it

        try:
            fitted = fit(data, self.profile)
        except MediaError as e:
            return _note(
                f"[image unavailable: blob sha256:{part.digest} cannot be fitted "
                f"for {self.spec.name}: {e}]"
            )
        digest = fitted.digest
        if isinstance(self.blobs, BlobWriter):
            digest = self.blobs.put(fitted.data, fitted.media_type)
        entry = RefitEntry(
            digest=digest,
            media_type=fitted.media_type,
            width=fitted.width,
            height=fitted.height,
            size=len(fitted.data),
        )
        if isinstance(self.blobs, BlobWriter):
            self.cache.put(part.digest, self.profile, entry)
        image = self._image(fitted.data, part, entry.media_type, entry.width, entry.height)
        return replace(image, digest=digest)


_Position: TypeAlias = tuple[int, int]


def _images(request: ModelRequest) -> list[tuple[_Position, ImagePart, int]]:
    """Every image of the request, oldest first: ((message, part), image, turn)."""
    return [
        ((mi, pi), p, message.turn)
        for mi, message in enumerate(request.messages)
        if isinstance(message, UserMessage | ToolResult)
        for pi, p in enumerate(message.parts)
        if isinstance(p, ImagePart)
    ]


def _drop_order(images: list[tuple[_Position, ImagePart, int]]) -> list[_Position]:
    """Which images leave first when a request is full: old perceptions, then attachments."""
    perceptions = [at for at, p, _ in images if isinstance(p.origin, PerceptionOrigin)]
    attachments = [at for at, p, _ in images if isinstance(p.origin, AttachmentOrigin)]
    return perceptions + attachments


def _apply_byte_budget(
    images: list[tuple[_Position, ImagePart, int]],
    resolved: dict[_Position, WirePart],
    rules: WireRules,
    budget: int,
) -> None:
    """Elide images (drop order) until the sent images' bytes fit ``budget``."""

    def cost(part: WirePart) -> int:
        if not isinstance(part, WireImage):
            return 0
        return len(part.data) if rules.base64_byte_limit else part.size

    total = sum(cost(part) for part in resolved.values())
    sent = [at for at in _drop_order(images) if isinstance(resolved[at], WireImage)]
    turns = {at: (p, turn) for at, p, turn in images}
    amount = f"{budget / limits.MB:g} MB" if budget >= limits.MB else f"{budget:,} bytes"
    reason = f"over the {amount} image budget of one request"
    for at in sent[:-1]:  # the last to go always stays: one image is never over budget
        if total <= budget:
            break
        total -= cost(resolved[at])
        part, turn = turns[at]
        resolved[at] = _note(_over_note(part, turn, reason))


def _documents(
    request: ModelRequest, spec: ModelSpec, rules: WireRules, blobs: BlobReader
) -> dict[_Position, WirePart]:
    """Every document of the request as a :class:`WireDocument` or a note."""
    docs = [
        ((mi, pi), p)
        for mi, message in enumerate(request.messages)
        if isinstance(message, UserMessage | ToolResult)
        for pi, p in enumerate(message.parts)
        if isinstance(p, DocumentPart)
    ]
    out: dict[_Position, WirePart] = {}
    if not docs:
        return out
    page_cap = max_document_pages(spec, rules)
    count_cap = rules.max_documents
    over_count = len(docs) - count_cap if count_cap is not None else 0
    for n, (at, part) in enumerate(docs):
        what = _document_what(part)
        if not spec.pdf:
            out[at] = _note(
                f"[document not sent: {spec.name} does not take PDF documents natively ({what})]"
            )
        elif not rules.documents or part.media_type != "application/pdf":
            out[at] = _note(
                f"[document not sent: this wire carries no {part.media_type} documents ({what})]"
            )
        elif page_cap is not None and part.page_count > page_cap:
            out[at] = _note(
                f"[document not sent: {what}; {spec.name} takes at most {page_cap} pages "
                "per document]"
            )
        elif n < over_count:
            out[at] = _note(
                f"[document not sent: {what}; over the {count_cap}-document limit of one request]"
            )
        else:
            out[at] = _read_document(part, spec, rules, blobs)
    return out


def _read_document(
    part: DocumentPart, spec: ModelSpec, rules: WireRules, blobs: BlobReader
) -> WirePart:
    try:
        data = blobs.get(part.digest)
    except NotFoundError:
        return _note(f"[document unavailable: blob sha256:{part.digest} is missing]")
    except IntegrityError:
        return _note(f"[document unavailable: blob sha256:{part.digest} is corrupt]")
    except StoreError as e:
        return _note(f"[document unavailable: blob sha256:{part.digest} cannot be read ({e})]")
    encoded = base64.b64encode(data).decode("ascii")
    cap = rules.max_document_bytes
    if cap is not None:
        size = len(encoded) if rules.base64_byte_limit else len(data)
        if size > cap:
            return _note(
                f"[document not sent: {_document_what(part)} is {len(data):,} bytes; "
                f"over the {cap / limits.MB:g} MB document limit of {spec.name}]"
            )
    return WireDocument(
        data=encoded,
        size=len(data),
        media_type=part.media_type,
        page_count=part.page_count,
        filename=document_filename(part.origin),
        digest=part.digest,
        origin=part.origin,
    )


def prepare(
    request: ModelRequest,
    *,
    spec: ModelSpec,
    rules: WireRules,
    blobs: BlobReader,
    refit_cache: RefitCache | None = None,
) -> Prepared:
    """Resolve every image of ``request`` for ``spec`` under ``rules``."""
    images = _images(request)
    cache = refit_cache if refit_cache is not None else RefitCache()
    resolved = _resolved_images(images, spec, rules, blobs, cache)
    documents = _documents(request, spec, rules, blobs)
    if rules.max_request_image_bytes is not None:
        budget = rules.max_request_image_bytes
        if rules.documents_share_budget:
            # One cap for all inline media of a request: documents sent leave less for images.
            budget -= sum(
                len(d.data) if rules.base64_byte_limit else d.size
                for d in documents.values()
                if isinstance(d, WireDocument)
            )
        _apply_byte_budget(images, resolved, rules, max(budget, 0))
    resolved.update(documents)
    return Prepared(
        messages=_wire_messages(request, resolved),
        system=request.system,
        tools=request.tools,
        max_tokens=request.max_tokens,
        model=spec,
        cache_key=request.cache_key,
        # An effort the model does not take is not sent (the catalog says which it takes).
        effort=request.effort if request.effort in spec.efforts else None,
    )


def _resolved_images(
    images: list[tuple[_Position, ImagePart, int]],
    spec: ModelSpec,
    rules: WireRules,
    blobs: BlobReader,
    refit_cache: RefitCache,
) -> dict[_Position, WirePart]:
    """Each image as sent: fitted for ``spec``, or a note (a text-only model, an image
    over the wire's count cap)."""
    cap = max_images(spec, rules)
    excess = len(images) - max(cap, 0)
    capped = set(_drop_order(images)[:excess]) if spec.vision and excess > 0 else set()
    count = len(images) - len(capped)
    resolver = _Resolver(
        spec,
        (profile_for(spec, rules, count), accepted_for(spec, rules, count)),
        blobs,
        refit_cache,
    )
    resolved: dict[_Position, WirePart] = {}
    for at, part, turn in images:
        if not spec.vision:
            resolved[at] = _note(_no_vision_note(part, spec))
        elif at in capped:
            resolved[at] = _note(
                _over_note(part, turn, f"over the {cap}-image limit of {spec.name}")
            )
        else:
            resolved[at] = resolver.resolve(part)
    return resolved


def _wire_messages(
    request: ModelRequest, resolved: Mapping[_Position, WirePart]
) -> tuple[WireMessage, ...]:
    """The request's messages with every image and document part replaced as resolved."""

    def part_for(mi: int, pi: int, part: Part) -> WirePart:
        if isinstance(part, TextPart):
            return part
        if isinstance(part, ImagePart | DocumentPart):
            return resolved[(mi, pi)]
        assert_never(part)

    out: list[WireMessage] = []
    for mi, message in enumerate(request.messages):
        if isinstance(message, UserMessage):
            parts = tuple(part_for(mi, pi, p) for pi, p in enumerate(message.parts))
            out.append(WireUser(parts))
        elif isinstance(message, ToolResult):
            parts = tuple(part_for(mi, pi, p) for pi, p in enumerate(message.parts))
            out.append(WireTool(message.call_id, message.tool_name, parts, message.is_error))
        elif isinstance(message, AssistantMessage):
            out.append(message)
        else:
            assert_never(message)
    return tuple(out)
