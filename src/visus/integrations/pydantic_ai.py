"""visus in pydantic-ai: one capability gives an agent ``view``/``read`` and retention.

``Agent(model, capabilities=[Vision(roots=["."])])`` is all it takes. The capability

* adds visus's ``view`` and ``read`` tools (a toolset): images are fitted to the model
  the run is calling (``RunContext.model``: its ``model_name`` and ``system`` go
  through visus's catalog), stored once in visus's blob store and returned to
  pydantic-ai as a :class:`~pydantic_ai.messages.BinaryImage` named by its digest,
  which pydantic-ai's own model classes place per wire (inside the tool result where
  the wire takes images there, else hoisted to a following user message). A digest
  reaches only images of the run's own messages (``RunContext.messages``);
* decides retention in ``prepare_model_request`` (pydantic-ai's hook for work that
  depends on the serving model): tool images (a view's, or any other tool's, which
  are fitted to the model here) from before the live window reach the model as
  visus's plain-text descriptor in place of the tool result's content (on Gemini,
  which reads a tool result as JSON, a text part after the function responses). The
  change is for that request only: the run's history (``result.all_messages()``)
  keeps every image, so nothing is lost and no history processor rewrites it;
* keeps the model's reasoning: pydantic-ai replays Claude's thinking blocks, which
  models with preserved thinking bind to everything before them; an eviction edits
  that history, so on such a model every request asks for stale blocks to be dropped
  (``block_binding`` ``drop_block`` in the ``thinking`` object, which brings its beta),
  never a 400 (:func:`~visus.integrations.reasoning.bound_thinking`);
* passes ``effort`` (``Vision(effort="low")``) as pydantic-ai's ``thinking`` level
  when the run's settings name none of their own;
* keeps token estimates: :attr:`Vision.last_request` after each model request.

Example:
    >>> import tempfile
    >>> from pydantic_ai import Agent
    >>> from pydantic_ai.models.test import TestModel
    >>> vision = Vision(roots=[tempfile.mkdtemp()], data=tempfile.mkdtemp())
    >>> import warnings  # TestModel is no vision model visus knows: it would say so
    >>> from visus.integrations.core import VisionWarning
    >>> warnings.simplefilter("ignore", VisionWarning)
    >>> agent = Agent(TestModel(call_tools=[]), capabilities=[vision])
    >>> agent.run_sync("hi").output
    'success (no tool calls)'
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeGuard, Unpack, cast

from visus.agent.options import PathLike, VisionKeywords
from visus.errors import ConfigError
from visus.integrations.core import (
    NO_VIEW,
    HeldImage,
    Integration,
    ViewCall,
    image_in_text,
    raster_type,
)
from visus.integrations.reasoning import bound_thinking, checked_effort
from visus.integrations.values import RequestImages
from visus.integrations.window import Window, breakpoints, held_in, wire_of
from visus.models import ModelSpec
from visus.retention import sealed_reasoning

try:
    from pydantic_ai import RunContext
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import (
        BinaryContent,
        BinaryImage,
        CachePoint,
        ImageUrl,
        ModelMessage,
        ModelRequest,
        ModelRequestPart,
        ModelResponse,
        TextPart,
        ThinkingPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models import Model, ModelRequestContext
    from pydantic_ai.settings import ModelSettings, merge_model_settings
    from pydantic_ai.tools import Tool
    from pydantic_ai.toolsets import FunctionToolset
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ConfigError(
        "visus.integrations.pydantic_ai needs pydantic-ai: "
        "pip install -e '.[pydantic-ai]' in the visus checkout"
    ) from e

__all__ = ["RequestImages", "Vision"]


class Vision(Integration, AbstractCapability[Any]):
    """A pydantic-ai capability: visus's view/read tools plus retention of old images.

    ``roots`` and ``options`` are :class:`~visus.agent.options.VisionOptions` (documented
    there): ``render``, ``live_turns``/``chunk`` (the images of the last user turns keep
    their pixels), ``live_images``/``image_chunk`` (within them at most that many tool
    images, however many steps one run takes), ``data``, ``blobs``, ``tools``,
    ``allow_loopback_http``. ``effort``: how hard the model thinks (one of its levels,
    ``visus models --json``), sent as the ``thinking`` setting unless the run's own
    settings choose (``thinking``, ``anthropic_effort``, ``openai_reasoning_effort``).

    Example:
        >>> import tempfile
        >>> v = Vision(roots=[tempfile.mkdtemp()], live_turns=2, data=tempfile.mkdtemp())
        >>> [t.name for t in v.core.tool_specs()]
        ['read', 'view']
    """

    def __init__(
        self,
        roots: Sequence[PathLike] | PathLike = (".",),
        *,
        effort: str | None = None,
        **options: Unpack[VisionKeywords],
    ) -> None:
        self._start(roots, effort, options)
        tools = [self._tool(s.name, s.description, s.parameters) for s in self.core.tool_specs()]
        self._toolset: FunctionToolset[Any] = FunctionToolset(tools)

    # --- tools -------------------------------------------------------------------

    def get_toolset(self) -> FunctionToolset[Any]:
        return self._toolset

    def _tool(self, name: str, description: str, schema: Mapping[str, Any]) -> Tool[Any]:
        async def run(ctx: RunContext[Any], **args: Any) -> Any:
            # Only this run's own messages say which images a digest may name.
            held = await asyncio.to_thread(self.held, ctx.messages)
            seen = await self.core.call(name, args, self.spec_for(ctx.model), held)
            if seen.image is None:
                return seen.text
            image = BinaryImage(
                data=seen.data, media_type=seen.image.media_type, identifier=seen.tagged_digest
            )
            return [seen.text, image]

        return Tool.from_schema(run, name, description, dict(schema), takes_ctx=True)

    def spec_for(self, model: Any) -> ModelSpec:
        """The catalog spec of a pydantic-ai model object (its name and provider system)."""
        name = getattr(model, "model_name", None) or str(model)
        return self.core.model_spec(name, getattr(model, "system", None))

    def held(self, messages: Sequence[ModelMessage]) -> list[HeldImage]:
        """The images ``messages`` hold (tool results and prompts), each with its turn."""
        calls = _calls(messages)
        images = functools.partial(self._held_images, calls=calls)
        return held_in(messages, _opens_turn, images, self.core.memo.digest)

    def _held_images(
        self, m: ModelMessage, calls: Mapping[str, ToolCallPart]
    ) -> list[tuple[bytes | None, ViewCall]]:
        """The images a request's tool returns and prompts hold, with the view that made them."""
        out: list[tuple[bytes | None, ViewCall]] = []
        for p in m.parts if isinstance(m, ModelRequest) else ():
            if isinstance(p, ToolReturnPart):
                view = self._view_args(calls.get(p.tool_call_id))
                given = p.content if isinstance(p.content, list | tuple) else [p.content]
            elif isinstance(p, UserPromptPart) and not isinstance(p.content, str):
                view, given = NO_VIEW, list(p.content)
            else:
                continue
            out += [(_image_data(i), view) for i in map(_as_image, given) if _is_image(i)]
        return out

    def _view_args(self, call: ToolCallPart | None) -> ViewCall:
        """The arguments of a call to this capability's ``view`` (else none)."""
        if call is None or call.tool_name != "view" or "view" not in self.core.registry.names():
            return NO_VIEW
        return ViewCall.of(call.args_as_dict())

    # --- retention ---------------------------------------------------------------

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        model: Model = request_context.model
        spec, settings = self.spec_for(model), request_context.model_settings
        marks = getattr(model, "system", None) == "anthropic" and _caching(settings)
        # Fitting another tool's image is CPU work: off the event loop.
        messages, stats = await asyncio.to_thread(
            self.model_view, request_context.messages, spec, breakpoints=marks
        )
        request_context.messages = messages
        request_context.model_settings = self.settings_for(model, spec, settings)
        self.last_request = stats
        return request_context

    def settings_for(
        self, model: Model, spec: ModelSpec, given: ModelSettings | None
    ) -> ModelSettings | None:
        """The request's settings with :attr:`effort` (where they choose none) and, on
        an Anthropic model that binds its thinking to the history, the ``thinking``
        object that drops stale blocks (in ``extra_body``, which pydantic-ai honours
        over its own and gives the binding beta; the caller's thinking is kept in it)."""
        merged: Mapping[str, Any] = merge_model_settings(model.settings, given) or {}
        out: dict[str, Any] = dict(given or {})
        if self.effort is not None and not any(merged.get(k) is not None for k in _EFFORTS):
            out["thinking"] = checked_effort(spec, self.effort)
        if getattr(model, "system", None) == "anthropic":
            extra = merged.get("extra_body")
            extra = dict(extra) if isinstance(extra, Mapping) else {}
            own = extra.get("thinking", merged.get("anthropic_thinking"))
            bound = bound_thinking(spec, own if isinstance(own, Mapping) else None)
            if bound is not None:
                out["extra_body"] = {**extra, "thinking": bound}
        return cast("ModelSettings", out) if out else given

    def model_view(
        self, messages: Sequence[ModelMessage], model: ModelSpec, *, breakpoints: bool = False
    ) -> tuple[list[ModelMessage], RequestImages]:
        """``messages`` as the model should see them: old tool images as descriptors.

        The messages given are not changed (changed ones are copies). A turn starts at
        each request that carries a user prompt and no tool return (a tool's
        ``ToolReturn(content=...)`` rides in a user prompt part beside its return).
        Images other tools return (inside a tool return, or its ``ToolReturn``
        content) are fitted to ``model`` and leave the window like a view's. With
        ``breakpoints`` (an Anthropic model with pydantic-ai's caching on), the prompt
        cache's breakpoints go where visus's own agent puts them (:func:`_with_marks`).
        """
        calls = _calls(messages)
        keys = functools.partial(_keys, digest=self.core.memo.digest)
        args = (wire_of(model.provider), messages, _opens_turn, keys, _reasoned)
        window = Window.of(self.core, model, *args)
        out = [
            self._request(m, turn, window, calls) if isinstance(m, ModelRequest) else m
            for m, turn in zip(messages, window.turns, strict=True)
        ]
        if model.preserved_thinking:
            out = _without_stale_thinking(out, window)
        return (_with_marks(out) if breakpoints else out), window.request()

    def _request(
        self, m: ModelRequest, turn: int, window: Window, calls: Mapping[str, ToolCallPart]
    ) -> ModelRequest:
        """One request as sent: its tool returns' images (and a ``ToolReturn``'s) by their
        fates, the descriptors moved out of a tool return after its parts."""
        from_tools = any(isinstance(p, ToolReturnPart) for p in m.parts)
        parts: list[ModelRequestPart] = []
        notes: list[str] = []
        for p in m.parts:
            if isinstance(p, ToolReturnPart):
                part, moved = self._tool_part(p, turn, window, calls)
                parts.append(part)
                notes += moved
            elif isinstance(p, UserPromptPart) and from_tools:
                parts.append(self._prompt_part(p, turn, window))
            else:
                parts.append(p)
        if notes:
            parts.append(UserPromptPart(content="\n".join(notes)))
        changed = bool(notes) or any(a is not b for a, b in zip(parts, m.parts, strict=False))
        return dataclasses.replace(m, parts=parts) if changed else m

    def _tool_part(
        self,
        part: ToolReturnPart,
        turn: int,
        window: Window,
        calls: Mapping[str, ToolCallPart],
    ) -> tuple[ToolReturnPart, list[str]]:
        """The tool return as sent, and descriptors to send after it as plain text (on
        Gemini, :func:`_notes_after`); elsewhere they replace the images inside it."""
        content = part.content
        given: list[Any] = list(content) if isinstance(content, list | tuple) else [content]
        items = [_as_image(i) for i in given]
        if not any(_is_image(i) for i in items):
            return part, []
        view = self._view_args(calls.get(part.tool_call_id))
        sent = [_sent(i, turn, window, view) if _is_image(i) else i for i in items]
        if all(a is b for a, b in zip(sent, given, strict=True)):
            return part, []
        # The images that became text (a descriptor, or a note that a live image has
        # the same bytes), and everything else as sent.
        gone = [isinstance(d, str) and _is_image(was) for d, was in zip(sent, items, strict=True)]
        notes = [str(d) for d, g in zip(sent, gone, strict=True) if g]
        if notes and window.model.provider == "gemini":
            return _notes_after(part, [d for d, g in zip(sent, gone, strict=True) if not g], notes)
        if not any(_is_image(i) for i in sent):
            # One plain string: a list would reach the model as JSON, its quotes escaped.
            texts = [i for i in items if isinstance(i, str)] + notes
            return dataclasses.replace(part, content="\n".join(texts)), []
        new: Any = sent if isinstance(content, list | tuple) else sent[0]
        return dataclasses.replace(part, content=new), []

    def _prompt_part(self, part: UserPromptPart, turn: int, window: Window) -> UserPromptPart:
        """A tool's ``ToolReturn(content=...)``: its images fitted, or elided when old."""
        if isinstance(part.content, str) or not any(_is_image(i) for i in part.content):
            return part
        items = list(part.content)
        sent = [_sent(i, turn, window) if _is_image(i) else i for i in items]
        if all(a is b for a, b in zip(sent, items, strict=True)):
            return part
        return dataclasses.replace(part, content=sent)


Image = BinaryContent | ImageUrl


def _notes_after(
    part: ToolReturnPart, kept: list[Any], notes: list[str]
) -> tuple[ToolReturnPart, list[str]]:
    """Gemini reads a tool return as a JSON object (its quotes escaped): the return keeps
    what did not become a note (``kept``) and a pointer, and the ``notes`` go in a text
    part after the function responses, labelled with the call."""
    kept = [*kept, f"(image left the context; see the note for call {part.tool_call_id})"]
    if not any(_is_image(i) for i in kept):
        kept = ["\n".join(i for i in kept if isinstance(i, str))]
    moved = [f"Tool call {part.tool_call_id}: {d}" for d in notes]
    return dataclasses.replace(part, content=kept if len(kept) > 1 else kept[0]), moved


def _sent(image: Image, turn: int, window: Window, view: ViewCall = NO_VIEW) -> Image | str:
    """A tool image as this request carries it: live (fitted), its descriptor, or a
    note that a live image has the same bytes."""
    fate = window.tally.fate(window.live(turn))
    window.tally.count(fate)
    if fate == "live":
        return _live(image, window)
    url = image.url if isinstance(image, ImageUrl) else None
    return window.note(_found(image), url, turn, view, repeat=fate == "repeat")


def _live(image: Image, window: Window) -> Image:
    """A live image as sent: fitted to the request's model (a view's already is,
    unless this request calls another model than the one that asked for it)."""
    if isinstance(image, ImageUrl):
        inline = _inline(image)
        if inline is None:
            return image  # a web URL: the provider fetches it
        # Anthropic's wire would send a data URL as a URL source and be refused.
        image = inline
    fitted = window.fitted((image.data, image.media_type))
    if fitted is None or fitted.data is image.data:
        return image
    return BinaryImage(data=fitted.data, media_type=fitted.media_type, identifier=image.identifier)


def _reasoned(m: ModelMessage) -> int:
    """A reply's reasoning bound to the prefix: its output tokens, else as its thinking's
    signatures hold it (:func:`~visus.retention.sealed_reasoning`); 0 without thinking."""
    thought = [p for p in getattr(m, "parts", ()) if isinstance(p, ThinkingPart)]
    if not thought or not isinstance(m, ModelResponse):
        return 0
    return m.usage.output_tokens or sealed_reasoning(*(p.signature for p in thought))


def _without_stale_thinking(out: list[ModelMessage], window: Window) -> list[ModelMessage]:
    """``out`` without the thinking an eviction already had the API drop."""
    replies = {n: m for n, m in enumerate(out) if isinstance(m, ModelResponse)}
    reasoned = {n for n, m in replies.items() if any(isinstance(p, ThinkingPart) for p in m.parts)}
    for n in window.stale(len(out), list(replies), reasoned):
        kept = [p for p in replies[n].parts if not isinstance(p, ThinkingPart)]
        out[n] = dataclasses.replace(replies[n], parts=kept)
    return out


def _keys(m: ModelMessage, digest: Callable[[bytes], str]) -> list[tuple[str, bytes | None]]:
    """A request's tool images as the plan tells them apart (their bytes' ``digest``; a
    web image's URL), with their bytes."""
    out: list[tuple[str, bytes | None]] = []
    for image in _tool_images(m):
        data = _image_data(image)
        url = image.url if isinstance(image, ImageUrl) else ""
        out.append((url if data is None else digest(data), data))
    return out


def _tool_images(m: ModelMessage) -> list[Image]:
    """The tool images of a request in the order :meth:`Vision.model_view` meets them."""
    parts = m.parts if isinstance(m, ModelRequest) else []
    from_tools = any(isinstance(p, ToolReturnPart) for p in parts)
    found: list[Image] = []
    for p in parts:
        if isinstance(p, ToolReturnPart):
            content = p.content
            given = list(content) if isinstance(content, list | tuple) else [content]
            found += [i for i in map(_as_image, given) if _is_image(i)]
        elif isinstance(p, UserPromptPart) and from_tools and not isinstance(p.content, str):
            found += [i for i in p.content if _is_image(i)]
    return found


def _caching(settings: Mapping[str, Any] | None) -> bool:
    """Whether a request asks for prompt caching: pydantic-ai's unified ``cache``
    setting (its ``Caching`` capability) or one of Anthropic's own."""
    return any((settings or {}).get(k) for k in _CACHE_SETTINGS)


#: The settings by which a run chooses its own effort (pydantic-ai's unified one first).
_EFFORTS = ("thinking", "anthropic_effort", "openai_reasoning_effort")

_CACHE_SETTINGS = (
    "cache",
    "anthropic_cache",
    "anthropic_cache_messages",
    "anthropic_cache_instructions",
    "anthropic_cache_tool_definitions",
)


def _with_marks(messages: list[ModelMessage]) -> list[ModelMessage]:
    """``messages`` with a ``CachePoint`` ending the history before the first live image,
    and the ladder before it (:func:`visus.wire.window_marks`), as visus's own Anthropic
    wire marks them: an eviction rewrites the request from there on only, so it reads
    the prefix up to there from the cache, where pydantic-ai's own breakpoint (the
    newest block) would have it write the whole history again.

    A ``CachePoint`` ending a request goes on its last block; one opening a request
    goes on the last block of the response before it (pydantic-ai's rule).
    """
    out = list(messages)
    mark = UserPromptPart(content=[CachePoint()])
    for i in breakpoints(messages, _blocks, lambda m: bool(_tool_images(m)), _live_prompt_images):
        m, after = out[i], out[i + 1] if i + 1 < len(out) else None
        if isinstance(m, ModelRequest):
            out[i] = dataclasses.replace(m, parts=[*m.parts, mark])
        elif isinstance(after, ModelRequest) and _markable_end(m):
            out[i + 1] = dataclasses.replace(after, parts=[mark, *after.parts])
    return out


def _live_prompt_images(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and any(
        isinstance(p, UserPromptPart)
        and not isinstance(p.content, str)
        and any(_is_image(i) for i in p.content)
        for p in message.parts
    )


def _blocks(message: ModelMessage) -> int:
    """Content blocks ``message`` becomes on Anthropic's wire (near enough for the ladder)."""
    if isinstance(message, ModelResponse):
        return max(1, len(message.parts))
    prompts = [p.content for p in message.parts if isinstance(p, UserPromptPart)]
    tools = sum(isinstance(p, ToolReturnPart) for p in message.parts)
    return max(1, tools + sum(1 if isinstance(c, str) else len(c) for c in prompts))


def _markable_end(response: ModelResponse) -> bool:
    """Whether a response's last block takes ``cache_control`` (a thinking block does not)."""
    last = response.parts[-1] if response.parts else None
    return isinstance(last, ToolCallPart) or (isinstance(last, TextPart) and bool(last.content))


def _is_image(item: object) -> TypeGuard[Image]:
    return isinstance(item, ImageUrl) or (isinstance(item, BinaryContent) and item.is_image)


def _as_image(item: Any) -> Any:
    """``item``, or the image it is: raster bytes (a Playwright screenshot returned as
    it is) or a text that is one image data URL. pydantic-ai would send either as text."""
    if isinstance(item, bytes):
        media_type = raster_type(item)
        return item if media_type is None else BinaryImage(data=item, media_type=media_type)
    if isinstance(item, str):
        found = image_in_text(item)
        return item if found is None else BinaryImage(data=found[0], media_type=found[1])
    return item


def _inline(image: ImageUrl) -> BinaryContent | None:
    """The bytes of a ``data:`` image URL (None for a web URL or a malformed one)."""
    if not image.url.startswith("data:"):
        return None
    try:
        return BinaryContent.from_data_uri(image.url)
    except ValueError:
        return None


def _found(image: Image) -> tuple[bytes, str] | None:
    """The bytes and media type an image item holds (None for a web URL or a malformed
    data URL)."""
    held = _inline(image) if isinstance(image, ImageUrl) else image
    return None if held is None else (held.data, held.media_type)


def _image_data(image: Image) -> bytes | None:
    """The bytes an image item holds (None for a web URL or a malformed data URL)."""
    found = _found(image)
    return None if found is None else found[0]


def _opens_turn(m: ModelMessage) -> bool:
    """A turn starts at each request with a user prompt and no tool return (a
    ``ToolReturn``'s content rides in a user prompt part beside its return)."""
    return (
        isinstance(m, ModelRequest)
        and any(isinstance(p, UserPromptPart) for p in m.parts)
        and not any(isinstance(p, ToolReturnPart) for p in m.parts)
    )


def _calls(messages: Sequence[ModelMessage]) -> dict[str, ToolCallPart]:
    return {
        p.tool_call_id: p
        for m in messages
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart)
    }
