"""One request's edits: fitting images to the model, eliding old ones, and what changed.

A protocol module (``anthropic``, ``openai_chat``, ``openai_responses``) walks the
client's JSON body and calls an :class:`Edit` for every image it finds. The edit
knows the target model (from the body's ``model``; an unknown one gets the
conservative profile :data:`UNKNOWN_MODEL`) and the wire's own caps (the ``RULES``
of visus's lowering for the same wire), fits with :func:`visus.media.fit` (an SVG is
rendered with :func:`visus.media.load`), and
counts what it did so the app can log one line and add to ``/stats``.

Example:
    >>> from visus.wire.anthropic import RULES
    >>> e = Edit.for_model("claude-sonnet-4-6", RULES, image_count=25)
    >>> e.profile.max_edge  # Anthropic's many-image rule: over 20 images, 2000 px at most
    1568
    >>> Edit.for_model("no-such-model", RULES, image_count=1).spec.name
    'unknown'
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from visus import limits
from visus.errors import InvalidInputError, MediaError
from visus.media import Profile, fit, load, probe, without_unusable_chunks
from visus.models import get_model, image_tokens
from visus.models.spec import AnthropicPatches, ModelSpec
from visus.proxy.cache import AS_IS, AsIs, Cut, FitCache, Fitted, Known, image_key
from visus.proxy.reasoning import Binding
from visus.record.messages import ImagePart, PerceptionOrigin
from visus.retention import Ceiling, Hold, RetentionPolicy, elided_descriptor, policy_for
from visus.wire import WireRules, accepted_for, profile_for
from visus.wire._prepare import max_images

__all__ = [
    "UNKNOWN_MODEL",
    "Edit",
    "Fitted",
    "ImageNote",
    "call_text",
    "data_url",
    "parse_data_url",
]

#: What the proxy assumes of a model the catalog does not know (see limits.py).
UNKNOWN_MODEL = ModelSpec(
    name="unknown",
    provider="openai-compatible",
    vision=True,
    images_in_tool_results=True,
    max_edge=limits.PROXY_UNKNOWN_MAX_EDGE,
    max_pixels=limits.PROXY_UNKNOWN_MAX_PIXELS,
    max_image_bytes=limits.PROXY_UNKNOWN_MAX_IMAGE_BYTES,
    max_images=limits.PROXY_UNKNOWN_MAX_IMAGES,
    tokens=AnthropicPatches(),
)


@dataclass(frozen=True, slots=True)
class ImageNote:
    """Where an image sits in the body sent upstream, and what it is (for error messages)."""

    path: str
    what: str


def parse_data_url(url: str) -> tuple[str, str] | None:
    """``(media_type, base64)`` of a base64 ``data:`` URL, else None.

    Example:
        >>> parse_data_url("data:image/png;base64,iVBO")
        ('image/png', 'iVBO')
        >>> parse_data_url("https://example.com/a.png") is None
        True
    """
    if not url.startswith("data:"):
        return None
    head, sep, payload = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    return head[: -len(";base64")].split(";", 1)[0] or "image/png", payload


def data_url(media_type: str, b64: str) -> str:
    """The ``data:`` URL for a base64 payload."""
    return f"data:{media_type};base64,{b64}"


def call_text(name: str, arguments: Any) -> str:
    """How a tool call is named in a label: ``name(args)``, arguments cut short.

    Example:
        >>> call_text("screenshot", '{"url": "https://example.com"}')
        'screenshot({"url": "https://example.com"})'
    """
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    if len(args) > limits.PROXY_LABEL_ARGS_CHARS:
        args = args[: limits.PROXY_LABEL_ARGS_CHARS] + "…"
    return f"{name}({args})"


def _decode(b64: str) -> bytes | None:
    try:
        return base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        return None


def _view_call(call: tuple[str, Any] | None) -> str | None:
    """The path argument of a call to a ``view`` tool (visus's own, through MCP), if any."""
    if call is None or not (call[0] == "view" or call[0].endswith("__view")):
        return None
    args = call[1]
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            return None
    values = list(args.values()) if isinstance(args, dict) else []
    return values[0] if len(values) == 1 and isinstance(values[0], str) else None


@dataclass(slots=True)
class Edit:
    """What the proxy does to one request, and the tally of it.

    ``cache`` (shared between requests) remembers what each image is and what was sent
    for it; ``live_images`` bounds live images by count (the oldest leave ``chunk`` at
    a time, by default all but the newest); at a provider's limit (``ceiling``) they
    leave in batches of ``limit_share`` of what fits; ``view_tool`` names a tool the
    client has that re-shows an elided image by digest, offered in descriptors.
    """

    spec: ModelSpec
    profile: Profile
    rules: WireRules
    accepted: Profile | None = None
    policy: RetentionPolicy | None = None
    live_images: int | None = None
    chunk: int = 1
    limit_share: float = limits.RETENTION_LIMIT_SHARE
    #: What the live images may come to whatever the windows: the provider's images per
    #: request (the catalog's, capped by the wire's) and, append-only, a share of the
    #: context in image tokens (:meth:`visus.retention.RetentionPolicy.ceiling`).
    ceiling: Ceiling = field(default_factory=Ceiling)
    #: Without a window of the operator's, a model that binds its reasoning to the
    #: prefix keeps its history append-only: past the family's break-even in image
    #: tokens the oldest leave in one batch, the first time only once the cache reads
    #: they cost cover the reasoning leaving drops (:class:`visus.retention.Hold`,
    #: :func:`visus.retention.policy_for`). None: not append-only.
    hold: Hold | None = None
    cache: FitCache | None = None
    view_tool: str | None = None
    images: int = 0
    fitted: int = 0
    hoisted: int = 0
    repaired: int = 0
    elided: int = 0
    #: Re-encoded smaller for the request's byte budget (bytes before pixels).
    compacted: int = 0
    #: Sent as the areas where they differ from the image before them (only what changed).
    cut_images: int = 0
    cache_hits: int = 0
    bytes_saved: int = 0
    tokens_saved: int = 0
    notes: list[ImageNote] = field(default_factory=list)
    #: The first top-level item (message, input item) the edit changed, and the first
    #: where it elided or cut an image (None: none): reasoning after them is bound to a
    #: prefix the proxy edited (:mod:`visus.proxy.reasoning`).
    edited_at: int | None = None
    evicted_at: int | None = None
    #: What the protocol module did about bound reasoning.
    binding: Binding = field(default_factory=Binding)

    @classmethod
    def for_model(
        cls,
        model: object,
        rules: WireRules,
        *,
        image_count: int = 0,
        policy: RetentionPolicy | None = None,
        live_images: int | None = None,
        chunk: int | None = None,
        cache: FitCache | None = None,
        view_tool: str | None = None,
        weigh_reasoning: bool = False,
    ) -> Edit:
        """The edit for a request to ``model`` (the body's field, any type) on a wire
        (``weigh_reasoning``: :attr:`visus.retention.RetentionPolicy.weigh_reasoning`)."""
        spec = UNKNOWN_MODEL
        if isinstance(model, str) and model.strip():
            try:
                known = get_model(model)
            except InvalidInputError:
                known = None
            # An id the catalog lacks comes back with vision=False; the proxy still
            # forwards its images, fitted to the profile every provider takes.
            if known is not None and known.vision:
                spec = known
        ceiling = Ceiling(images=max_images(spec, rules))
        append = None
        if policy is None and live_images is None and spec.preserved_thinking:
            append = policy_for(spec, RetentionPolicy(weigh_reasoning=weigh_reasoning))
            ceiling = ceiling.tighter(append.ceiling(spec))
        return cls(
            spec=spec,
            limit_share=append.share if append else limits.RETENTION_LIMIT_SHARE,
            ceiling=ceiling,
            hold=append.hold(spec) if append else None,
            profile=profile_for(spec, rules, image_count),
            rules=rules,
            accepted=accepted_for(spec, rules, image_count),
            policy=policy,
            live_images=live_images,
            # A live-image window without a chunk leaves whole (as visus's agent's does).
            chunk=chunk if chunk is not None else (live_images or 1),
            cache=cache,
            view_tool=view_tool,
        )

    def touched(self, at: int, *, evicted: bool) -> None:
        """Note that item ``at`` was changed (``evicted``: an image elided or cut)."""
        if at < 0:
            return
        self.edited_at = at if self.edited_at is None else min(self.edited_at, at)
        if evicted:
            self.evicted_at = at if self.evicted_at is None else min(self.evicted_at, at)

    @property
    def changed(self) -> bool:
        return bool(
            self.fitted
            or self.hoisted
            or self.repaired
            or self.elided
            or self.compacted
            or self.cut_images
        )

    def known(self, b64: str, key: str | None = None) -> Known | None:
        """What a base64 image is (decoded and probed once per image, then cached).

        ``key``: its :func:`~visus.proxy.cache.image_key`, if the caller has it.
        """
        key = key if key is not None else image_key(b64)
        found = self.cache.known(key) if self.cache is not None else None
        if found is not None:
            return found
        data = _decode(b64)
        if data is None:
            return None
        try:
            info = probe(data)
        except MediaError:
            return None
        if info.kind == "svg":  # drawn as a raster, whatever size it declares (or none)
            width, height = info.width or 0, info.height or 0
        elif info.kind == "raster" and info.width is not None and info.height is not None:
            width, height = info.width, info.height
        else:
            return None
        found = Known(hashlib.sha256(data).hexdigest(), info.media_type, width, height)
        if self.cache is not None:
            self.cache.remember(key, found)
        return found

    def fit_base64(self, b64: str, media_type: str, where: str) -> Fitted | None:
        """The image fitted to the profile, or None when it already fits (or cannot be read).

        An image the proxy cannot decode is left as it is: the provider's own error
        names it (see :mod:`visus.proxy.rejection`), which beats guessing. What was
        sent for an image is cached, so a re-sent history is not fitted again and its
        images go out as the same bytes.
        """
        digest = image_key(b64)
        known = self.known(b64, digest)
        if known is None:
            self.notes.append(ImageNote(where, f"{where} ({media_type}, not a readable image)"))
            return None
        # Under one profile, what is sent also depends on what the model takes as it is.
        a = self.accepted or self.profile
        key = f"{digest}:{media_type}:{a.max_edge}:{a.max_pixels}:{a.max_bytes}"
        cached = self.cache.fitted(key, self.profile) if self.cache else None
        if cached is None:
            cached = self._fit(b64, media_type, known, where)
            if cached is None:
                return None
            if self.cache is not None:
                self.cache.put(key, self.profile, cached)
        else:
            self.cache_hits += 1
        w, h = known.width, known.height
        if isinstance(cached, Fitted):
            self.fitted += 1
            self.bytes_saved += (len(b64) - len(cached.b64)) * 3 // 4
            self.tokens_saved += self.tokens(w, h) - self.tokens(cached.width, cached.height)
            sent = f", sent as {cached.width}x{cached.height}"
            self.notes.append(ImageNote(where, f"{where} ({known.media_type} {w}x{h}{sent})"))
            return cached
        self.notes.append(ImageNote(where, f"{where} ({media_type} {w}x{h})"))
        return None

    def compact(self, b64: str) -> Fitted | None:
        """The image (as it would be sent) re-encoded smaller at the same size, for a
        request over its byte budget (:func:`visus.media.compact`); None when that is not
        smaller. The same bytes every time for the same image, cached like a fit."""
        from visus.media.compact import compact

        key = f"{image_key(b64)}:compact"
        cached = self.cache.fitted(key, self.profile) if self.cache else None
        if cached is None:
            data = _decode(b64)
            try:
                out = compact(data, self.profile.media_types) if data is not None else None
            except MediaError:
                out = None
            cached = (
                AS_IS
                if out is None
                else Fitted(
                    base64.b64encode(out.data).decode(), out.media_type, out.width, out.height
                )
            )
            if self.cache is not None:
                self.cache.put(key, self.profile, cached)
        if isinstance(cached, AsIs):
            return None
        self.compacted += 1
        self.bytes_saved += (len(b64) - len(cached.b64)) * 3 // 4
        return cached

    def cut(self, base: str, b64: str) -> Cut | None:
        """Where the image ``b64`` differs from ``base`` (both as sent, base64), exactly
        (:func:`visus.media.changes.changed_regions`); None when that is not a few small
        areas. Compared once per pair (cached by their bytes)."""
        from visus.media.changes import changed_regions

        pair = (image_key(base), image_key(b64))
        known, cut = self.cache.cuts.get(pair) if self.cache else (False, None)
        if known:
            return cut
        old, new = _decode(base), _decode(b64)
        cut = None
        if old is not None and new is not None:
            try:
                found = changed_regions(old, new)
            except MediaError:
                found = None
            if found is not None:
                cut = Cut(
                    tuple((r.x0, r.y0, r.x1, r.y1) for r in found.regions),
                    tuple(base64.b64encode(c).decode() for c in found.crops),
                )
        if self.cache is not None:
            self.cache.cuts.put(pair, cut)
        return cut

    def _fit(self, b64: str, media_type: str, known: Known, where: str) -> Fitted | AsIs | None:
        """Fit one image not seen under this profile before (None: it cannot be)."""
        data = _decode(b64) or b""
        if known.media_type == "image/svg+xml":
            return self._render(data, where)
        # An image the provider takes as it is and bills no more than its fit (a
        # 1600x1000 screenshot for gpt-4.1) goes as its own bytes: re-encoding it
        # would only double what the client's history stores.
        w, h, p = known.width, known.height, self.accepted or self.profile
        fits = (
            known.media_type in p.media_types
            and known.media_type == media_type
            and max(w, h) <= p.max_edge
            and w * h <= p.max_pixels
            and len(data) <= p.max_bytes
        )
        # probe() read the image past chunks a provider may refuse it for (a damaged
        # colour profile, say): those bytes must not be forwarded as they are.
        if fits and without_unusable_chunks(data) is data:
            return AS_IS
        try:
            out = fit(data, self.profile)
        except MediaError:
            self.notes.append(ImageNote(where, f"{where} ({known.media_type} {w}x{h}, unfittable)"))
            return None
        return Fitted(base64.b64encode(out.data).decode(), out.media_type, out.width, out.height)

    def _render(self, data: bytes, where: str) -> Fitted | None:
        """An SVG (a chart tool's output, say), which no provider takes, drawn as a raster.

        It renders as ``view`` renders one: in the render worker, under its time and
        memory budget, without network or file access.
        """
        try:
            out = load(data, profile=self.profile)
        except MediaError as e:
            self.notes.append(ImageNote(where, f"{where} (image/svg+xml, not rendered: {e})"))
            return None
        return Fitted(base64.b64encode(out.data).decode(), out.media_type, out.width, out.height)

    def relocate(self, moved: dict[str, str]) -> None:
        """Point notes at where their images ended up (a protocol moved them)."""
        self.notes = [ImageNote(moved.get(n.path, n.path), n.what) for n in self.notes]

    def tokens(self, width: int, height: int) -> int:
        """What an image of that size costs the model, by its token formula."""
        return image_tokens(self.spec, max(1, width), max(1, height))

    def size_of(self, b64: str) -> tuple[int, int] | None:
        """Width and height of a base64 image, from its header (None if unreadable)."""
        known = self.known(b64)
        return None if known is None else (known.width, known.height)

    def is_stale(self, turn: int, current: int) -> bool:
        """Whether an image of ``turn`` leaves the live window when ``current`` is the latest."""
        return self.policy is not None and turn < self.policy.first_live_turn(current)

    def elide(self, b64: str | None, turn: int, call: tuple[str, Any] | None) -> str:
        """The descriptor a stale image becomes (and count it).

        The same bytes every time for the same image (prompt caches keep hitting), and
        short (a long run carries one per step): its size and the one digest that names
        it, and only a call the client can make (the client may have no ``view`` tool):
        its own ``view`` for an image it viewed, the proxy's re-view by digest, or the
        tool again for a fresh image.
        """
        known = self.known(b64) if b64 is not None else None
        self.elided += 1
        if known is not None and b64 is not None and self.cache is not None:
            self.cache.elided.keep(known.digest, known.media_type, b64)
        if known is not None:
            self.tokens_saved += self.tokens(known.width, known.height)
            self.bytes_saved += len(b64 or "") * 3 // 4
        path = _view_call(call)
        if path is not None and known is not None and self.view_tool is None:
            part = ImagePart(
                known.digest,
                known.media_type,
                0,
                known.width,
                known.height,
                PerceptionOrigin(path, call[0] if call else "view"),
            )
            return elided_descriptor(part, turn)
        if known is None:
            again = "; call the tool again for a fresh one" if call else ""
            return f"[image elided: left out by visus proxy{again}]"
        size = f"{known.width}x{known.height}"
        if self.view_tool is not None:
            return (
                f"[image elided: {size}, left out by visus proxy; call "
                f'{self.view_tool}("sha256:{known.digest}") to see it again]'
            )
        again = "; call the tool again for a fresh one" if call else ""
        return f"[image elided: {size} sha256:{known.digest[:12]}, left out by visus proxy{again}]"
