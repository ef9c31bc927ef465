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
import json
from dataclasses import dataclass, field
from typing import Any

from visus import limits
from visus.errors import InvalidInputError, MediaError
from visus.media import Profile, fit, load, probe, without_unusable_chunks
from visus.models import get_model, image_tokens
from visus.models.spec import AnthropicPatches, ModelSpec
from visus.record.messages import ImagePart, PerceptionOrigin
from visus.retention import RetentionPolicy, elided_descriptor
from visus.wire import WireRules, profile_for

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
class Fitted:
    """An image as it leaves the proxy (base64 without a data-URL prefix)."""

    b64: str
    media_type: str
    width: int
    height: int


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


@dataclass(slots=True)
class Edit:
    """What the proxy does to one request, and the tally of it."""

    spec: ModelSpec
    profile: Profile
    policy: RetentionPolicy | None = None
    images: int = 0
    fitted: int = 0
    hoisted: int = 0
    repaired: int = 0
    elided: int = 0
    bytes_saved: int = 0
    tokens_saved: int = 0
    notes: list[ImageNote] = field(default_factory=list)

    @classmethod
    def for_model(
        cls,
        model: object,
        rules: WireRules,
        *,
        image_count: int,
        policy: RetentionPolicy | None = None,
    ) -> Edit:
        """The edit for a request to ``model`` (the body's field, any type) on a wire."""
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
        return cls(spec=spec, profile=profile_for(spec, rules, image_count), policy=policy)

    @property
    def changed(self) -> bool:
        return bool(self.fitted or self.hoisted or self.repaired or self.elided)

    def fit_base64(self, b64: str, media_type: str, where: str) -> Fitted | None:
        """The image fitted to the profile, or None when it already fits (or cannot be read).

        An image the proxy cannot decode is left as it is: the provider's own error
        names it (see :mod:`visus.proxy.errors`), which beats guessing.
        """
        data = _decode(b64)
        if data is None:
            self.notes.append(ImageNote(where, f"{where} (undecodable base64)"))
            return None
        try:
            info = probe(data)
        except MediaError:
            self.notes.append(ImageNote(where, f"{where} ({media_type}, {len(data)} bytes)"))
            return None
        if info.kind == "svg":
            return self._render(data, where)
        if info.kind != "raster" or info.width is None or info.height is None:
            self.notes.append(ImageNote(where, f"{where} ({info.media_type}, not a raster)"))
            return None
        w, h, p = info.width, info.height, self.profile
        fits = (
            info.media_type in p.media_types
            and info.media_type == media_type
            and max(w, h) <= p.max_edge
            and w * h <= p.max_pixels
            and len(data) <= p.max_bytes
        )
        # probe() read the image past chunks a provider may refuse it for (a damaged
        # colour profile, say): those bytes must not be forwarded as they are.
        repaired = without_unusable_chunks(data) is not data
        if fits and not repaired:
            self.notes.append(ImageNote(where, f"{where} ({media_type} {w}x{h})"))
            return None
        try:
            out = fit(data, p)
        except MediaError:
            self.notes.append(ImageNote(where, f"{where} ({info.media_type} {w}x{h}, unfittable)"))
            return None
        self.fitted += 1
        self.bytes_saved += len(data) - out.size
        self.tokens_saved += self._tokens(w, h) - self._tokens(out.width, out.height)
        self.notes.append(
            ImageNote(
                where, f"{where} ({info.media_type} {w}x{h}, sent as {out.width}x{out.height})"
            )
        )
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
        self.fitted += 1
        self.notes.append(
            ImageNote(where, f"{where} (image/svg+xml, sent as {out.width}x{out.height})")
        )
        return Fitted(base64.b64encode(out.data).decode(), out.media_type, out.width, out.height)

    def relocate(self, moved: dict[str, str]) -> None:
        """Point notes at where their images ended up (a protocol moved them)."""
        self.notes = [ImageNote(moved.get(n.path, n.path), n.what) for n in self.notes]

    def _tokens(self, width: int, height: int) -> int:
        return image_tokens(self.spec, max(1, width), max(1, height))

    def size_of(self, b64: str) -> tuple[int, int] | None:
        """Width and height of a base64 image, from its header (None if unreadable)."""
        data = _decode(b64)
        if data is None:
            return None
        try:
            info = probe(data)
        except MediaError:
            return None
        if info.width is None or info.height is None:
            return None
        return info.width, info.height

    def is_stale(self, turn: int, current: int) -> bool:
        """Whether an image of ``turn`` leaves the live window when ``current`` is the latest."""
        return self.policy is not None and turn < self.policy.first_live_turn(current)

    def elide(self, b64: str | None, turn: int, call: tuple[str, Any] | None) -> str:
        """The descriptor a stale image becomes (and count it).

        A tool image whose call took one string argument gets visus's own descriptor
        (``call view("a.png") to see it again``); any other says what was there.
        """
        size = self.size_of(b64) if b64 is not None else None
        self.elided += 1
        if size is not None:
            self.tokens_saved += self._tokens(*size)
            self.bytes_saved += len(b64 or "") * 3 // 4
        dims = f", {size[0]}x{size[1]}" if size else ""
        if call is not None:
            name, arguments = call
            args = arguments
            if isinstance(arguments, str):
                try:
                    args = json.loads(arguments)
                except ValueError:
                    args = arguments
            values = list(args.values()) if isinstance(args, dict) else []
            if size is not None and len(values) == 1 and isinstance(values[0], str):
                part = ImagePart(
                    "0" * 64, "image/png", 0, size[0], size[1], PerceptionOrigin(values[0], name)
                )
                return elided_descriptor(part, turn)
            return (
                f"[image elided: returned by {call_text(name, arguments)} in turn {turn}{dims}; "
                "call it again to see it]"
            )
        return f"[image elided: sent in turn {turn}{dims}; no longer shown to save context]"
