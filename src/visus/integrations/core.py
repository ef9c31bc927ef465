"""The framework-neutral half of every integration: tools, fitting, retention, tokens.

Each framework adapter (``pydantic_ai``, ``openai_agents``, ``langchain``) is a thin
translation between its framework's message types and this core. The core owns:

* the ``view`` and ``read`` tools, run through visus's own tool registry, so reach,
  render capability and typed refusals are exactly the agent's;
* fitting to the model the framework is calling: a framework model name goes through
  the catalog (``visus.models``); a name the catalog does not know as a vision model
  gets :data:`CONSERVATIVE`'s limits and one warning;
* the blob store: every viewed image is stored once by sha256, so a framework history
  that holds only the descriptor (or the digest) can always have the pixels back. It
  is the integrations' own (``<data>/integrations/blobs``), apart from the sessions'
  store that ``visus gc`` collects: only the framework knows what its histories
  still hold;
* a conversation's reach: ``view("sha256:...")`` (or a prefix) names only images of
  the history the call belongs to (:class:`HeldImage`, read from the framework's own
  messages each time), never another conversation's on the same instance;
* retention as a view decision: :meth:`VisionCore.live_from` says which turns keep
  pixels and :meth:`VisionCore.descriptor` is the plain text an older image becomes;
* images the framework's own tools return (a screenshot tool of the user's): fitted to
  the model like a view's (:meth:`VisionCore.tool_image`), stored once, and re-viewable
  by digest once elided, as the agent treats an MCP tool's images;
* token estimates of the images a request carries.

Example:
    >>> import tempfile
    >>> core = VisionCore(VisionOptions.of([tempfile.mkdtemp()], data=tempfile.mkdtemp()))
    >>> core.model_spec("claude-sonnet-4-6", "anthropic").vision
    True
    >>> [core.live_from(t) for t in (1, 2, 3)]
    [1, 2, 3]
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from visus import media, paths
from visus.agent.options import PathLike, VisionKeywords, VisionOptions
from visus.agent.policy import own_places
from visus.agent.tools import Tool, ToolContext, ToolRegistry
from visus.errors import VisusError
from visus.integrations.memo import ImageMemo
from visus.integrations.values import (
    NO_VIEW,
    HeldImage,
    ImageTally,
    RequestImages,
    Seen,
    ToolImage,
    ViewCall,
    held_record,
    image_in_text,
    raster_type,
)
from visus.models import ModelSpec, get_model, image_tokens
from visus.models.spec import AnthropicPatches
from visus.perception import Reach
from visus.record.blobs import BlobStore, FileBlobStore
from visus.record.messages import (
    ImagePart,
    TextPart,
    ToolSpec,
)
from visus.retention import (
    ImageFate,
    RetentionPolicy,
    Shown,
    elided_descriptor,
    plan_tool_images,
    policy_for,
    repeat_descriptor,
)
from visus.telemetry import seams
from visus.wire import Wire, image_ceiling

__all__ = [
    "CONSERVATIVE",
    "NO_VIEW",
    "TOOL_NAMES",
    "HeldImage",
    "ImageTally",
    "Integration",
    "RequestImages",
    "Seen",
    "ToolImage",
    "ViewCall",
    "VisionCore",
    "VisionWarning",
    "catalog_provider",
    "held_record",
    "image_in_text",
    "raster_type",
]

#: The tools an integration can hand to a framework, in the order the model sees them.
TOOL_NAMES: tuple[str, ...] = ("view", "read")

#: What an image is fitted to when the catalog does not know the framework's model as
#: a vision model: the strictest limits among the providers visus speaks (Anthropic's
#: 1568 px native edge, Bedrock's 3.75 MB, png/jpeg only), so the image is accepted
#: anywhere that takes images at all.
CONSERVATIVE = ModelSpec(
    name="unknown",
    provider="openai-compatible",
    vision=True,
    max_edge=1568,
    max_pixels=1568 * 1568,
    max_image_bytes=3_750_000,
    max_images=20,
    media_types=frozenset({"image/png", "image/jpeg"}),
    tokens=AnthropicPatches(),
)

# A framework's own name for a provider -> the catalog's. pydantic-ai says "google-gla"
# or "google-vertex", LangChain "google_genai" or "google_vertexai"; all mean Gemini.
_PROVIDERS: Mapping[str, str] = {
    "openai": "openai",
    "azure": "openai",
    "anthropic": "anthropic",
    "google": "gemini",
    "google-gla": "gemini",
    "google-vertex": "gemini",
    "google_genai": "gemini",
    "google_vertexai": "gemini",
    "gemini": "gemini",
    "bedrock": "bedrock",
    "amazon_bedrock": "bedrock",
    "ollama": "ollama",
}


class VisionWarning(UserWarning):
    """A visus integration fitted images for a model it does not know."""


def catalog_provider(framework_name: str | None) -> str | None:
    """The catalog's provider for a framework's provider name (None when unknown).

    Example:
        >>> catalog_provider("google-gla"), catalog_provider("groq")
        ('gemini', None)
    """
    if not framework_name:
        return None
    return _PROVIDERS.get(framework_name.lower())


class VisionCore:
    """The state an integration shares across its framework's turns, made from one
    :class:`~visus.agent.options.VisionOptions` (its fields are documented there).

    ``roots`` bound what the tools may see (``render=False`` withholds rendering svg,
    text and pdf), never visus's own files whatever the roots
    (:func:`~visus.agent.policy.own_places`: the data folder but its ``files``, the
    configuration, the blob store); the retention knobs make :attr:`policy` (by default at most
    ``limits.RETENTION_LIVE_IMAGES`` tool images live, however long a run is). Blobs go
    to ``blobs`` if given, else under ``data`` (default: visus's data folder) in
    :func:`~visus.paths.integration_blobs_dir`. ``tools`` defaults to
    :data:`TOOL_NAMES`.

    Nothing here belongs to one conversation: what a call may name by digest comes
    from the history it is called in (:class:`HeldImage`), so one instance can serve
    many conversations.
    """

    def __init__(self, options: VisionOptions) -> None:
        self.options = options
        self.policy = options.retention()
        folder = paths.data_dir(options.data)
        self.blobs: BlobStore = (
            options.blobs
            if options.blobs is not None
            else FileBlobStore(paths.integration_blobs_dir(folder))
        )
        # The framework's model is a client like any other: visus's own files (the data
        # folder, the configuration, this blob store) stay out of reach whatever the roots.
        own = [folder, *([self.blobs.root] if isinstance(self.blobs, FileBlobStore) else [])]
        reach = options.reach()
        self.reach = Reach(
            reach.roots,
            render=reach.render,
            deny=own_places(*own),
            deny_except=[paths.files_dir(folder)],
        )
        tools = TOOL_NAMES if options.tools is None else options.tools
        unknown = sorted(set(tools) - set(TOOL_NAMES))
        if unknown:
            raise ValueError(f"unknown visus tools {unknown}; choose from {list(TOOL_NAMES)}")
        self.registry = ToolRegistry.builtin().only(tools)
        self.allow_loopback_http = options.allow_loopback_http
        self._specs: dict[tuple[str, str | None], ModelSpec] = {}
        self._warned: set[str] = set()
        # A framework sends its whole history with every request: each image is
        # decoded, hashed, probed and fitted once, not once per request.
        self.memo = ImageMemo()

    # --- models ------------------------------------------------------------------

    def model_spec(self, name: str, provider: str | None = None) -> ModelSpec:
        """The catalog spec for the framework's model ``name`` (served by ``provider``).

        A model the catalog does not know as a vision model gets :data:`CONSERVATIVE`
        limits under its own name, with one :class:`VisionWarning` per name.
        """
        key = (name, provider)
        cached = self._specs.get(key)
        if cached is not None:
            return cached
        mapped = catalog_provider(provider)
        spec = get_model(f"{mapped}:{name}" if mapped else name)
        if not spec.vision:
            if name not in self._warned:
                self._warned.add(name)
                warnings.warn(
                    f"visus does not know {name!r} as a vision model; images are fitted to "
                    "conservative limits (1568 px, 3.75 MB, png/jpeg). Register the model "
                    "with visus.models.register_model for its real limits.",
                    VisionWarning,
                    stacklevel=3,
                )
            spec = dataclasses.replace(CONSERVATIVE, name=name)
        self._specs[key] = spec
        return spec

    # --- tools -------------------------------------------------------------------

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """Name, description and JSON schema of each tool, as visus's agent offers them."""
        return self.registry.specs()

    def tool(self, name: str) -> Tool:
        found = self.registry.get(name)
        if found is None:
            raise KeyError(name)
        return found

    async def call(
        self,
        name: str,
        args: Mapping[str, Any],
        model: ModelSpec,
        held: Iterable[HeldImage] = (),
    ) -> Seen:
        """Run tool ``name`` with decoded ``args`` for ``model``; never raises for bad input.

        ``held`` is what the calling conversation's history holds: the only images
        ``view("sha256:...")`` may show, and the earlier views a re-view by path is
        compared with.
        """
        ctx = ToolContext(
            reach=self.reach,
            model=model,
            blobs=self.blobs,
            allow_loopback_http=self.allow_loopback_http,
            record=held_record(held),
        )
        # The framework traces its own model calls (or not); visus's tools are visus's.
        with seams.tool_call(name, None, args) as traced:
            outcome = await self.registry.call(name, args, ctx)
            tokens = functools.partial(image_tokens, model)
            traced.tool_outcome(outcome.parts, is_error=outcome.is_error, tokens=tokens)
        texts = [p.text for p in outcome.parts if isinstance(p, TextPart)]
        images = [p for p in outcome.parts if isinstance(p, ImagePart)]
        if not images:
            return Seen("\n".join(texts), is_error=outcome.is_error)
        image = images[0]  # view returns one image per call
        return Seen("\n".join(texts), image, self.blobs.get(image.digest), outcome.is_error)

    def remember(self, data: bytes, media_type: str) -> str:
        """Store an image a framework tool returned (once) and return its digest.

        Its descriptor then names the digest, which ``view`` takes back.
        """
        digest = self.memo.digest(data)
        if not self.memo.stored(digest):
            if not self.blobs.has(digest):
                self.blobs.put(data, media_type)
            self.memo.keep_stored(digest)
        return digest

    def tool_image(self, data: bytes, media_type: str, model: ModelSpec) -> ToolImage:
        """An image as ``model`` is sent it: stored once, fitted to ``model`` if it must be.

        A view's image was fitted for the model that asked for it; another request
        (another model on the same history) gets it fitted again when it does not
        fit. Never raises: bytes that are not an image visus can fit go on as they are.
        """
        digest = self.memo.digest(data)
        cached = self.memo.fitted(digest, model.name)
        if cached is not None:
            return cached
        self.remember(data, media_type)
        image = ToolImage(digest, data, media_type)
        # Bytes visus cannot read as an image go on: the provider says what is wrong.
        with contextlib.suppress(VisusError):
            image = self._fit(image, model)
        self.memo.keep_fitted(model.name, image)
        return image

    def _fit(self, image: ToolImage, model: ModelSpec) -> ToolImage:
        data, media_type = image.data, image.media_type
        head = media.probe(data)
        profile = model.profile()
        if head.kind == "raster" and head.width and head.height:
            fits = (
                head.media_type == media_type
                and head.media_type in profile.media_types
                and max(head.width, head.height) <= profile.max_edge
                and head.width * head.height <= profile.max_pixels
                and len(data) <= profile.max_bytes
            )
            if fits:
                return dataclasses.replace(image, width=head.width, height=head.height)
            out = media.fit(data, profile)
            return ToolImage(image.digest, out.data, out.media_type, out.width, out.height)
        if head.kind == "svg" and self.reach.render:
            # No provider takes image/svg+xml (a chart tool's output): drawn as view
            # draws one, in the render worker under its budget.
            out = media.load(data, profile=profile)
            return ToolImage(image.digest, out.data, out.media_type, out.width, out.height)
        return image

    # --- retention ---------------------------------------------------------------

    def policy_for(self, model: ModelSpec | None) -> RetentionPolicy:
        """The retention for ``model``: :attr:`policy` with what it leaves open decided
        per model family (:func:`visus.retention.policy_for`): append-only for a model
        that binds its reasoning to the history, the count window otherwise."""
        return policy_for(model, self.policy)

    def live_from(self, current_turn: int, model: ModelSpec | None = None) -> int:
        """The earliest turn whose images keep their pixels when ``current_turn`` is
        newest (for ``model``: 1 on an append-only history, whose images leave only at
        a ceiling)."""
        return self.policy_for(model).first_live_turn(current_turn)

    def shown(self, key: str, data: bytes | None, model: ModelSpec) -> Shown:
        """A tool image as :meth:`plan` weighs it: ``key`` (its digest, or a web image's
        URL), its bytes and its tokens for ``model`` (none known for a web image)."""
        if data is None:
            return Shown(key)
        return Shown(key, len(data), self.tokens(model, data))

    def plan(
        self,
        images: Sequence[Shown | str],
        model: ModelSpec | None = None,
        wire: Wire | None = None,
    ) -> tuple[ImageFate, ...]:
        """The fate of each tool image the turn window keeps (oldest first; a digest
        alone weighs nothing): the one plan every surface applies
        (:func:`visus.retention.plan_tool_images`) for ``model``. At most
        ``live_images`` live, evicted in batches, an unchanged screen a repeat; on an
        append-only history no count window, the oldest leaving in one batch only near
        a ceiling (the model's images per request, a share of its context, the family's
        break-even; the bytes ``wire`` takes when it is known)."""
        shown = [i if isinstance(i, Shown) else Shown(i) for i in images]
        ceiling = image_ceiling(model, wire) if model is not None and wire is not None else None
        return plan_tool_images(shown, self.policy, model=model, ceiling=ceiling)

    def descriptor(self, digest: str, turn: int, view: ViewCall = NO_VIEW) -> str:
        """The plain text an image of ``turn`` becomes once it leaves the live window.

        ``view`` is the view call that made it (from the framework's recorded call:
        path, page, region, as visus's own agent names them); without one the digest
        names the image. The call it offers is ``view("sha256:...")``, which shows
        exactly those pixels (a web image's: its URL, as ``view``'s ``source``).
        """
        return elided_descriptor(self._part(digest, view), turn)

    def repeat_descriptor(self, digest: str, turn: int, view: ViewCall = NO_VIEW) -> str:
        """The text an image becomes when a live image has the same bytes."""
        return repeat_descriptor(self._part(digest, view), turn)

    def _part(self, digest: str, view: ViewCall) -> ImagePart:
        bare = digest.removeprefix("sha256:")
        return ImagePart(bare, "image/png", 0, 0, 0, view.origin(bare))

    def tokens(self, model: ModelSpec, data: bytes) -> int:
        """Image tokens of ``data`` (an image as sent) for ``model`` (visus's formulas).

        Bytes that are not an image cost 0.
        """
        size = self.memo.size(data)
        return 0 if size is None else image_tokens(model, *size)


class Integration:
    """What each framework's adapter holds: the :class:`VisionCore` its options make
    (``core``), the ``effort`` it sends, and ``last_request``, the image counts of its
    latest model request (None before one)."""

    core: VisionCore
    effort: str | None
    last_request: RequestImages | None

    def _start(
        self, roots: Sequence[PathLike] | PathLike, effort: str | None, options: VisionKeywords
    ) -> None:
        self.core = VisionCore(VisionOptions.of(roots, **options))
        self.effort = effort
        self.last_request = None

    @property
    def blobs(self) -> BlobStore:
        """Where this integration stores images (``<data>/integrations/blobs``; the Agents
        SDK's :class:`~visus.integrations.items.VisionSession` too)."""
        return self.core.blobs
