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
4. Only what changed: an image stored with the crops where it differs from an earlier
   one goes as a note and those crops when that earlier image is sent before it as its
   own bytes (:mod:`visus.wire._crops`; not on wires without ``rules.crops``).
5. Request byte budget (where the wire has one): bytes before pixels. If the sent
   images together are over it, every whole image is first re-encoded smaller at the
   same size (:func:`visus.media.compact`: a lossy encoding measured to keep words
   legible; an image's re-encoding is the same bytes every time, cached like a refit);
   only if that is still over do images leave, in the same order as for the count cap
   (the last stays).
6. A missing or corrupt blob, or an image media cannot fit, becomes a text note.

Documents (:class:`DocumentPart`, PDFs; :mod:`visus.wire._documents`) are sent as they
are, never re-fitted, or become a note saying why not.

Only the blobs of images and documents that are sent are read.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import assert_never

from visus import limits
from visus.errors import IntegrityError, MediaError, NotFoundError, StoreError
from visus.media.types import Fitted, Profile
from visus.models.spec import ModelSpec
from visus.models.tokens import pick_detail
from visus.record.messages import (
    AssistantMessage,
    AttachmentOrigin,
    DocumentPart,
    ImagePart,
    ModelRequest,
    PerceptionOrigin,
    TextPart,
    ToolResult,
    UserMessage,
)
from visus.wire._crops import Position, crops
from visus.wire._documents import document_filename, documents
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
from visus.wire._rules import (
    WireRules,
    accepted_for,
    max_document_pages,
    max_images,
    profile_for,
)

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


def _note(text: str) -> TextPart:
    """What an image or document that is not sent becomes: visus's note in its place
    (:attr:`TextPart.note`, which a wire may send apart from the tool's own text)."""
    return TextPart(text, note=True)


def missing_note(digest: str, why: str = "is missing") -> str:
    return f"[image unavailable: blob sha256:{digest} {why}]"


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
        from visus.media import fit  # media is heavy (Pillow); only refits need it

        return self._derived(part, data, "", lambda raw: fit(raw, self.profile))

    def compact(self, image: WireImage) -> WireImage:
        """``image`` re-encoded smaller at the same size (:func:`visus.media.compact`),
        or itself when that is not smaller or cannot be done."""
        from visus.media.compact import compact

        def make(raw: bytes) -> Fitted:
            smaller = compact(raw, self.accepted.media_types)
            if smaller is None:
                raise _NotSmaller
            return smaller

        key = ImagePart(
            image.digest, image.media_type, image.size, image.width, image.height, image.origin
        )
        try:
            derived = self._derived(key, base64.b64decode(image.data), "compact", make)
        except _NotSmaller:
            return image
        return derived if isinstance(derived, WireImage) else image

    def _derived(
        self, part: ImagePart, data: bytes | None, how: str, make: Callable[[bytes], Fitted]
    ) -> WirePart:
        """``make`` of the image's bytes, as a stored blob cached by (digest, profile, how)."""
        entry = self.cache.get(part.digest, self.profile, how)
        if entry is not None:
            try:
                derived = self.blobs.get(entry.digest)
            except (StoreError, NotFoundError):
                self.cache.forget(part.digest, self.profile, how)
            else:
                image = self._image(derived, part, entry.media_type, entry.width, entry.height)
                return replace(image, digest=entry.digest)
        if data is None:
            read = self._read(part.digest)
            if isinstance(read, TextPart):
                return read
            data = read
        try:
            fitted = make(data)
        except MediaError as e:
            return _note(
                f"[image unavailable: blob sha256:{part.digest} cannot be fitted "
                f"for {self.spec.name}: {e}]"
            )
        digest = fitted.digest
        entry = RefitEntry(
            digest=digest,
            media_type=fitted.media_type,
            width=fitted.width,
            height=fitted.height,
            size=len(fitted.data),
        )
        if isinstance(self.blobs, BlobWriter):
            self.blobs.put(fitted.data, fitted.media_type)
            self.cache.put(part.digest, self.profile, entry, how)
        image = self._image(fitted.data, part, entry.media_type, entry.width, entry.height)
        return replace(image, digest=digest)

    def read_blob(self, digest: str) -> bytes | None:
        """A blob's bytes, or None when it cannot be read (a crop then goes whole)."""
        data = self._read(digest)
        return None if isinstance(data, TextPart) else data

    def placed(
        self,
        images: list[tuple[Position, ImagePart, int]],
        current: Mapping[Position, WirePart],
        rules: WireRules,
        squeeze: bool,
    ) -> dict[Position, tuple[WirePart, ...]]:
        """Each image as the parts it is sent as: what it resolved to, its note and crops
        (:mod:`visus.wire._crops`), or, when ``squeeze``, re-encoded smaller."""
        cut: dict[Position, tuple[WirePart, ...]] = {}
        if rules.crops:
            count = sum(isinstance(w, WireImage) for w in current.values())
            room = max_images(self.spec, rules) - count
            if rules.many_images_rule and count <= limits.ANTHROPIC_MANY_IMAGES:
                # Images were fitted for a request of `count`: crops must not pass the rule.
                room = min(room, limits.ANTHROPIC_MANY_IMAGES - count)
            cut = crops(
                [(at, p) for at, p, _ in images],
                current,
                spec=self.spec,
                media_types=self.accepted.media_types,
                room=room,
                read=self.read_blob,
            )
        out: dict[Position, tuple[WirePart, ...]] = {}
        for at, wire in current.items():
            if at in cut:
                out[at] = cut[at]
            elif squeeze and isinstance(wire, WireImage):
                out[at] = (self.compact(wire),)
            else:
                out[at] = (wire,)
        return out


class _NotSmaller(Exception):
    """A re-encoding that would not save bytes (the image is sent as it is)."""


def _images(request: ModelRequest) -> list[tuple[Position, ImagePart, int]]:
    """Every image of the request, oldest first: ((message, part), image, turn)."""
    return [
        ((mi, pi), p, message.turn)
        for mi, message in enumerate(request.messages)
        if isinstance(message, UserMessage | ToolResult)
        for pi, p in enumerate(message.parts)
        if isinstance(p, ImagePart)
    ]


def _drop_order(images: list[tuple[Position, ImagePart, int]]) -> list[Position]:
    """Which images leave first when a request is full: old perceptions, then attachments."""
    perceptions = [at for at, p, _ in images if isinstance(p.origin, PerceptionOrigin)]
    attachments = [at for at, p, _ in images if isinstance(p.origin, AttachmentOrigin)]
    return perceptions + attachments


def _within_budget(
    images: list[tuple[Position, ImagePart, int]],
    resolved: dict[Position, WirePart],
    resolver: _Resolver,
    rules: WireRules,
    budget: int | None,
) -> dict[Position, tuple[WirePart, ...]]:
    """Every image placed (:meth:`_Resolver.placed`), its bytes within ``budget``: bytes
    before pixels, so every image is re-encoded smaller before any leaves; then images
    leave in drop order until the rest fit (the last always stays)."""

    def cost(placed: Mapping[Position, tuple[WirePart, ...]]) -> int:
        return sum(
            (len(p.data) if rules.base64_byte_limit else p.size)
            for parts in placed.values()
            for p in parts
            if isinstance(p, WireImage)
        )

    current = dict(resolved)
    squeeze = False
    turns = {at: (p, turn) for at, p, turn in images}
    order = _drop_order(images)
    while True:
        placed = resolver.placed(images, current, rules, squeeze)
        if budget is None or cost(placed) <= budget:
            return placed
        if not squeeze:
            squeeze = True
            continue
        sent = [at for at in order if isinstance(current[at], WireImage)]
        if len(sent) <= 1:  # one image is never over budget
            return placed
        amount = f"{budget / limits.MB:g} MB" if budget >= limits.MB else f"{budget:,} bytes"
        part, turn = turns[sent[0]]
        reason = f"over the {amount} image budget of one request"
        current[sent[0]] = _note(_over_note(part, turn, reason))


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
    resolver = _resolver(images, spec, rules, blobs, cache)
    resolved = _resolved_images(images, spec, rules, resolver)
    docs = documents(request, spec, rules, blobs)
    budget = rules.max_request_image_bytes
    if budget is not None and rules.documents_share_budget:
        # One cap for all inline media of a request: documents sent leave less for images.
        budget -= sum(
            len(d.data) if rules.base64_byte_limit else d.size
            for d in docs.values()
            if isinstance(d, WireDocument)
        )
    placed = _within_budget(
        images, resolved, resolver, rules, None if budget is None else max(budget, 0)
    )
    placed.update((at, (d,)) for at, d in docs.items())
    return Prepared(
        messages=_wire_messages(request, placed),
        system=request.system,
        tools=request.tools,
        max_tokens=request.max_tokens,
        model=spec,
        cache_key=request.cache_key,
        # An effort the model does not take is not sent (the catalog says which it takes).
        effort=request.effort if request.effort in spec.efforts else None,
    )


def _capped(
    images: list[tuple[Position, ImagePart, int]], spec: ModelSpec, rules: WireRules
) -> set[Position]:
    """The images over the request's image cap (drop order), which become notes."""
    excess = len(images) - max(max_images(spec, rules), 0)
    return set(_drop_order(images)[:excess]) if spec.vision and excess > 0 else set()


def _resolver(
    images: list[tuple[Position, ImagePart, int]],
    spec: ModelSpec,
    rules: WireRules,
    blobs: BlobReader,
    refit_cache: RefitCache,
) -> _Resolver:
    count = len(images) - len(_capped(images, spec, rules))
    profiles = (profile_for(spec, rules, count), accepted_for(spec, rules, count))
    return _Resolver(spec, profiles, blobs, refit_cache)


def _resolved_images(
    images: list[tuple[Position, ImagePart, int]],
    spec: ModelSpec,
    rules: WireRules,
    resolver: _Resolver,
) -> dict[Position, WirePart]:
    """Each image as sent: fitted for ``spec``, or a note (a text-only model, an image
    over the wire's count cap)."""
    capped = _capped(images, spec, rules)
    cap = max_images(spec, rules)
    resolved: dict[Position, WirePart] = {}
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
    request: ModelRequest, placed: Mapping[Position, tuple[WirePart, ...]]
) -> tuple[WireMessage, ...]:
    """The request's messages with every image and document part replaced as placed (an
    image sent as its crops becomes several parts)."""

    def parts_of(mi: int, message: UserMessage | ToolResult) -> tuple[WirePart, ...]:
        out: list[WirePart] = []
        for pi, part in enumerate(message.parts):
            if isinstance(part, TextPart):
                out.append(part)
            elif isinstance(part, ImagePart | DocumentPart):
                out.extend(placed[(mi, pi)])
            else:
                assert_never(part)
        return tuple(out)

    out: list[WireMessage] = []
    for mi, message in enumerate(request.messages):
        if isinstance(message, UserMessage):
            out.append(WireUser(parts_of(mi, message)))
        elif isinstance(message, ToolResult):
            parts = parts_of(mi, message)
            out.append(WireTool(message.call_id, message.tool_name, parts, message.is_error))
        elif isinstance(message, AssistantMessage):
            out.append(message)
        else:
            assert_never(message)
    return tuple(out)
