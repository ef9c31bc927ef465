"""visus in LangChain v1 agents: one middleware gives ``create_agent`` eyes.

``create_agent(model, tools=[...], middleware=[VisionMiddleware(roots=["."])])``. The
middleware

* registers visus's ``view`` and ``read`` tools (``AgentMiddleware.tools``): an image
  is fitted to the chat model whose reply asked for it (``wrap_model_call`` notes the
  model on that ``AIMessage``'s ``response_metadata``; ``wrap_tool_call`` reads it back
  from the conversation's state, so one middleware serves agents of several models
  at once), stored in visus's blob store and returned as a standard ``image`` content
  block, with its digest and source in the ``ToolMessage.artifact`` (never sent). A
  digest reaches only images of the state the call runs in;
* rewrites each model request in ``wrap_model_call`` (the request only: the graph's
  state keeps every message as it was): tool images (a view's, or any other tool's
  image block, fitted to the model) from before the live window become
  visus's plain-text descriptor, and for every chat model but Anthropic's (which
  takes images inside ``tool_result``) live tool images move to one ``HumanMessage``
  after the run of tool messages, each labelled with its call, since OpenAI's Chat
  Completions refuses images in tool messages; a live image is fitted to the
  request's model again if another model asked for it;
* keeps the model's reasoning: ``ChatAnthropic`` replays Claude's thinking blocks,
  which models with preserved thinking bind to everything before them; an eviction
  edits that history, so on such a model each request asks for stale blocks to be
  dropped (``thinking.block_binding`` ``drop_block`` and its beta), never a 400;
* passes ``effort`` (``VisionMiddleware(effort="low")``) as the call's
  ``reasoning_effort`` to ``ChatAnthropic`` and ``ChatOpenAI`` where neither the model
  nor the request chooses one;
* keeps :attr:`VisionMiddleware.last_request` (live/elided/hoisted counts, tokens).

Example:
    >>> import tempfile
    >>> mw = VisionMiddleware(roots=[tempfile.mkdtemp()], data=tempfile.mkdtemp())
    >>> [t.name for t in mw.tools]
    ['read', 'view']
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Unpack

from visus.agent.options import PathLike, VisionKeywords
from visus.errors import ConfigError
from visus.integrations import blocks
from visus.integrations.core import CONSERVATIVE, HeldImage, Integration, ViewCall, image_in_text
from visus.integrations.memo import ImageMemo
from visus.integrations.reasoning import BINDING_BETA, bound_thinking, checked_effort
from visus.integrations.values import RequestImages
from visus.integrations.window import Window, breakpoints, held_in, split_images, wire_of
from visus.models import ModelSpec

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
    from langchain.agents.middleware.types import ToolCallRequest
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import (
        AIMessage,
        AnyMessage,
        BaseMessage,
        HumanMessage,
        ToolMessage,
    )
    from langchain_core.tools import BaseTool, StructuredTool
    from langgraph.types import Command
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ConfigError(
        "visus.integrations.langchain needs LangChain v1: "
        "pip install -e '.[langchain]' in the visus checkout"
    ) from e

__all__ = ["RequestImages", "VisionMiddleware"]

# LangChain's _llm_type -> the catalog's provider; chat models that take images in
# tool results natively.
_PROVIDERS = {
    "openai-chat": "openai",
    "anthropic-chat": "anthropic",
    "chat-google-generative-ai": "gemini",
}
_IMAGES_IN_TOOL_RESULTS = frozenset({"anthropic-chat"})
# Where wrap_model_call notes, on the reply, the model that made its tool calls.
_MODEL_KEY = "visus_model"


@dataclass(frozen=True, slots=True)
class _Call:
    """What one tool call runs with: the model that asked, the images its state holds."""

    model: ModelSpec
    held: tuple[HeldImage, ...]


# Set by wrap_tool_call around the tool's own run (the same task or thread): one
# call's model and conversation, never another's.
_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("visus_call", default=None)


@contextlib.contextmanager
def _calling(call: _Call) -> Iterator[None]:
    token = _CALL.set(call)
    try:
        yield
    finally:
        _CALL.reset(token)


class VisionMiddleware(Integration, AgentMiddleware):
    """visus's view/read tools and retention for ``create_agent``. See the module docstring.

    ``roots`` and ``options`` are :class:`~visus.agent.options.VisionOptions` (documented
    there): ``render``, ``live_turns``/``chunk`` (the images of the last user turns keep
    their pixels), ``live_images``/``image_chunk`` (within them at most that many tool
    images, however many steps one run takes), ``data``, ``blobs``, ``tools``,
    ``allow_loopback_http``. ``effort``: how hard the model thinks (one of its levels,
    ``visus models --json``), sent where neither the chat model nor the request says.
    """

    def __init__(
        self,
        roots: Sequence[PathLike] | PathLike = (".",),
        *,
        effort: str | None = None,
        **options: Unpack[VisionKeywords],
    ) -> None:
        super().__init__()
        self._start(roots, effort, options)
        self.tools: list[BaseTool] = [self._tool(s.name) for s in self.core.tool_specs()]

    # --- tools -------------------------------------------------------------------

    def _tool(self, name: str) -> BaseTool:
        spec = self.core.tool(name).spec

        async def run(**args: Any) -> tuple[Any, Any]:
            # Outside an agent (no wrap_tool_call): conservative limits, no digest reach.
            call = _CALL.get() or _Call(CONSERVATIVE, ())
            seen = await self.core.call(name, args, call.model, call.held)
            if seen.image is None:
                return seen.text, None
            block = blocks.image_block(seen.data, seen.image.media_type)
            return [blocks.text_block(seen.text), block], blocks.view_artifact(
                seen.image.digest, args
            )

        def run_sync(**args: Any) -> tuple[Any, Any]:
            return asyncio.run(run(**args))

        return StructuredTool.from_function(
            func=run_sync,
            coroutine=run,
            name=name,
            description=spec.description,
            args_schema=dict(spec.parameters),
            response_format="content_and_artifact",
        )

    # --- tool calls --------------------------------------------------------------

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        if request.tool not in self.tools:
            return handler(request)
        with _calling(self._call(request)):
            return handler(request)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        if request.tool not in self.tools:
            return await handler(request)
        with _calling(await asyncio.to_thread(self._call, request)):
            return await handler(request)

    def _call(self, request: ToolCallRequest) -> _Call:
        """The model whose reply made this call, and what the call's state holds."""
        state = request.state
        messages = state.get("messages", []) if isinstance(state, dict) else []
        call_id = request.tool_call.get("id")
        asked = [
            m.response_metadata
            for m in messages
            if isinstance(m, AIMessage) and any(c.get("id") == call_id for c in m.tool_calls)
        ]
        model = self.core.model_spec(*_asker(asked[-1] if asked else {}))
        return _Call(model, tuple(self.held(messages)))

    def held(self, messages: Iterable[BaseMessage]) -> list[HeldImage]:
        """The images ``messages`` hold (tool results and human messages), with turns."""
        memo = self.core.memo
        return held_in(list(messages), _opens_turn, lambda m: _held_images(m, memo), memo.digest)

    # --- requests ----------------------------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        prepared, ref = self._prepare(request)
        return _noted(handler(prepared), ref)

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        # Fitting another tool's image is CPU work: off the event loop.
        prepared, ref = await asyncio.to_thread(self._prepare, request)
        return _noted(await handler(prepared), ref)

    def spec_for(self, model: BaseChatModel) -> ModelSpec:
        """The catalog spec of a LangChain chat model (its model name and provider).

        Every LangChain chat model reports both for tracing (``ls_model_name``,
        ``ls_provider``: ``openai``, ``anthropic``, ``google_genai``, ``ollama``...).
        """
        return self.core.model_spec(*_model_ref(model))

    def _prepare(self, request: ModelRequest) -> tuple[ModelRequest, tuple[str, str | None]]:
        ref = _model_ref(request.model)
        spec = self.core.model_spec(*ref)
        kind = getattr(request.model, "_llm_type", "")
        hoist = kind not in _IMAGES_IN_TOOL_RESULTS
        messages = self.model_messages(request.messages, spec, hoist=hoist)
        # With caching on (LangChain's AnthropicPromptCachingMiddleware, outside this one),
        # the breakpoints visus's own wire places.
        control = (request.model_settings or {}).get("cache_control")
        if kind == "anthropic-chat" and control:
            messages = _with_marks(messages, control, 4 - _marks_taken(request, messages))
        model, settings = self._settings(request.model, kind, spec, request.model_settings)
        return request.override(messages=messages, model=model, model_settings=settings), ref

    def _settings(
        self, model: BaseChatModel, kind: str, spec: ModelSpec, given: Mapping[str, Any] | None
    ) -> tuple[BaseChatModel, dict[str, Any]]:
        """The chat model and call settings a request goes with: :attr:`effort` where
        neither chooses one, and on a Claude model that binds its thinking to the history
        the thinking that drops stale blocks, with its beta (a thinking the model was
        built with wins over the call's in ``ChatAnthropic``, so it goes on a copy)."""
        out = dict(given or {})
        if self.effort is not None and kind in _EFFORT_KINDS and not _own_effort(model, out):
            out["reasoning_effort"] = checked_effort(spec, self.effort)
        if kind != "anthropic-chat":
            return model, out
        built = getattr(model, "thinking", None)
        kwargs = getattr(model, "model_kwargs", None) or {}
        bound = bound_thinking(spec, built or out.get("thinking", kwargs.get("thinking")))
        if bound is None:
            return model, out
        if built is not None:
            model = model.model_copy(update={"thinking": bound})
        else:
            out["thinking"] = bound
        betas = out.get("betas", kwargs.get("betas", getattr(model, "betas", None))) or []
        out["betas"] = [*betas, *([] if BINDING_BETA in betas else [BINDING_BETA])]
        return model, out

    def model_messages(
        self, messages: Sequence[AnyMessage], model: ModelSpec, *, hoist: bool
    ) -> list[AnyMessage]:
        """What the model should see of ``messages`` (which are not changed).

        Tool images, a view's or any other tool's, are fitted to ``model``, leave
        the window as descriptors and, with ``hoist``, move to one ``HumanMessage``.
        """
        prepared = [_with_image_text(m) for m in messages]
        wire = wire_of(model.provider, chat=hoist if model.provider == "openai" else None)
        images = functools.partial(_tool_images, memo=self.core.memo)
        window = Window.of(self.core, model, wire, prepared, _opens_turn, images, _reasoned)

        def rewrite(m: AnyMessage, turn: int) -> tuple[AnyMessage, list[Any]] | None:
            images = _tool_image_blocks(m)
            if not images or not isinstance(m, ToolMessage):
                return None
            return _tool_message(m, images, window, turn, hoist=hoist)

        out = window.rewritten(
            prepared,
            rewrite,
            result=lambda m: isinstance(m, ToolMessage),
            user=lambda content: HumanMessage(content=content),
        )
        if model.preserved_thinking and not hoist:  # unhoisted: positions are the same
            out = _without_stale_reasoning(out, window)
        self.last_request = window.request(hoisted=hoist)
        return out


#: Chat models that take a call's ``reasoning_effort`` (ChatAnthropic: ``output_config``).
_EFFORT_KINDS = frozenset({"anthropic-chat", "openai-chat"})


def _tool_message(
    m: ToolMessage, images: Sequence[dict[str, Any]], window: Window, turn: int, *, hoist: bool
) -> tuple[ToolMessage, list[Any]]:
    """One tool message with images as sent (each live one fitted, the others as
    notes), and what it hoists into the next user message."""
    view, text = blocks.view_of(blocks.artifact_of(m)), blocks.text_block
    split = split_images(
        images,
        window.fates(turn, len(images)),
        window.tally,
        part=lambda b: b,
        live=lambda b: _fitted(b, window),
        note=lambda b, repeat: window.note(
            blocks.image_bytes(b, window.core.memo), blocks.image_url(b), turn, view, repeat=repeat
        ),
        text=text,
    )
    texts = [b["text"] for b in m.content if isinstance(b, dict) and b.get("type") == "text"]
    args = (texts, m.content, m.tool_call_id)
    content, hoisted = split.content(*args, hoist=hoist, text=text, hoisted=lambda _, sent: sent)
    if isinstance(content, list) and all(a is b for a, b in zip(content, m.content, strict=True)):
        return m, hoisted
    return m.model_copy(update={"content": content}), hoisted


def _fitted(block: dict[str, Any], window: Window) -> dict[str, Any]:
    """An image block as the request's model is sent it (a web URL as it is)."""
    found = blocks.image_bytes(block, window.core.memo)
    image = window.fitted(found)
    if image is None or found is None or image.data is found[0]:
        return block
    return blocks.image_block(image.data, image.media_type)


def _without_stale_reasoning(out: list[AnyMessage], window: Window) -> list[AnyMessage]:
    """``out`` without the thinking blocks an eviction already had the API drop."""
    replies = [n for n, m in enumerate(out) if isinstance(m, AIMessage)]
    reasoned = {n for n in replies if _reasoning_blocks(out[n])}
    for n in window.stale(len(out), replies, reasoned):
        kept = [b for b in out[n].content if b not in _reasoning_blocks(out[n])]
        out[n] = out[n].model_copy(update={"content": kept})
    return out


def _tool_images(m: AnyMessage, memo: ImageMemo) -> list[tuple[str, bytes | None]]:
    """A message's tool images as the plan tells them apart (:func:`blocks.image_key`),
    with bytes (decoded and hashed once: ``memo``)."""
    meta, found = blocks.artifact_of(m), _tool_image_blocks(m)
    return [(blocks.image_key(b, meta, memo), blocks.image_data(b, memo)) for b in found]


def _held_images(m: BaseMessage, memo: ImageMemo) -> list[tuple[bytes | None, ViewCall]]:
    """The images a tool result or human message holds, with the view that made them."""
    if not isinstance(m, ToolMessage | HumanMessage):
        return []
    view = blocks.view_of(blocks.artifact_of(m))
    content = _with_image_text(m).content
    images = [b for b in content if blocks.is_image_block(b)] if isinstance(content, list) else []
    return [(blocks.image_data(b, memo), view) for b in images]


def _own_effort(model: BaseChatModel, settings: Mapping[str, Any]) -> bool:
    """Whether the chat model or the call's settings choose an effort of their own."""
    keys = ("effort", "reasoning_effort", "reasoning")
    config = settings.get("output_config") or getattr(model, "output_config", None) or {}
    kwargs = getattr(model, "model_kwargs", None) or {}
    return (
        any(settings.get(k) is not None for k in keys)
        or any(getattr(model, k, None) is not None for k in keys[1:])  # the model.s own fields
        or "effort" in config
        or any(k in kwargs for k in keys)
    )


def _with_marks(messages: list[AnyMessage], cache_control: Any, free: int) -> list[AnyMessage]:
    """``messages`` with ``cache_control`` ending the history before the first live tool
    image, and on the ladder before it (:func:`visus.wire.window_marks`), as visus's own
    Anthropic wire marks them: an eviction rewrites the request from there on only, so
    it reads the prefix up to there from the cache. At most ``free`` marks (the API
    takes four, LangChain trims none), the window's first. LangChain rebuilds an AI
    message's ``tool_use`` blocks from its tool calls (a mark there would be lost), so a
    mark meant for one goes on the tool or human message before it.
    """
    # Every text as a block: a marked message is sent as blocks, and the same message
    # unmarked in a later request must be the same bytes (a string would not be).
    out = [_as_blocks(m) for m in messages]
    marks = breakpoints(messages, _blocks, _live_image)
    for i in reversed(marks[-free:] if free > 0 else ()):
        while i >= 0 and isinstance(out[i], AIMessage):
            i -= 1
        if i >= 0 and isinstance(out[i], ToolMessage | HumanMessage):
            out[i] = _marked(out[i], cache_control)
    return out


def _marks_taken(request: ModelRequest, messages: Sequence[AnyMessage]) -> int:
    """Breakpoints a request already carries: the top-level one (automatic caching, on
    the newest block), the system prompt's, the tools' and any in the messages."""
    system = request.system_message
    parts = [
        b
        for m in ([system] if system is not None else []) + list(messages)
        if isinstance(m.content, list)
        for b in m.content
    ]
    tools = [t for t in request.tools if (getattr(t, "extras", None) or {}).get("cache_control")]
    return 1 + len(tools) + sum(1 for b in parts if isinstance(b, dict) and "cache_control" in b)


def _live_image(m: AnyMessage) -> bool:
    """Whether ``m`` is a tool result or human message with an image block."""
    content = m.content if isinstance(m, ToolMessage | HumanMessage) else None
    return isinstance(content, list) and any(blocks.is_image_block(b) for b in content)


def _blocks(m: AnyMessage) -> int:
    """Content blocks ``m`` becomes on Anthropic's wire (near enough for the ladder)."""
    if isinstance(m, ToolMessage):
        return 1  # one tool_result
    extra = len(m.tool_calls) if isinstance(m, AIMessage) else 0
    return max(1, (len(m.content) if isinstance(m.content, list) else 1) + extra)


def _as_blocks(m: AnyMessage) -> AnyMessage:
    """A tool or human message whose content is a string, as one text block."""
    if isinstance(m, ToolMessage | HumanMessage) and isinstance(m.content, str) and m.content:
        return m.model_copy(update={"content": [blocks.text_block(m.content)]})
    return m


def _marked(m: AnyMessage, cache_control: Any) -> AnyMessage:
    """``m`` (content as blocks) with ``cache_control`` on its last block (LangChain
    lifts a tool message's to its ``tool_result``)."""
    parts = m.content if isinstance(m.content, list) else []
    return m.model_copy(update={"content": blocks.marked(parts, cache_control)}) if parts else m


def _model_ref(model: BaseChatModel) -> tuple[str, str | None]:
    """The (name, provider) a chat model reports of itself, as the catalog is asked."""
    try:
        params = model._get_ls_params()
    except Exception:  # a chat model of any make: its tracing hook is not ours to trust
        params = {}
    name = (
        params.get("ls_model_name")
        or getattr(model, "model_name", None)
        or getattr(model, "model", None)
    )
    provider = params.get("ls_provider") or _PROVIDERS.get(getattr(model, "_llm_type", ""))
    # Google's clients name models "models/gemini-2.5-flash"; the catalog does not.
    return str(name or "unknown").removeprefix("models/"), provider


def _asker(meta: Mapping[str, Any]) -> tuple[str, str | None]:
    """The (name, provider) of the model whose reply has ``meta``: as wrap_model_call
    noted it, else (a reply this middleware did not see) as the provider says."""
    noted = meta.get(_MODEL_KEY)
    if isinstance(noted, list | tuple) and len(noted) == 2:
        return str(noted[0]), noted[1]
    return str(meta.get("model_name") or "unknown"), meta.get("model_provider")


def _noted(response: ModelResponse, ref: tuple[str, str | None]) -> ModelResponse:
    """``response`` with the model that made its tool calls noted on each reply."""
    result = [
        m.model_copy(update={"response_metadata": {**m.response_metadata, _MODEL_KEY: list(ref)}})
        if isinstance(m, AIMessage) and m.tool_calls
        else m
        for m in response.result
    ]
    return dataclasses.replace(response, result=result)


def _opens_turn(m: BaseMessage) -> bool:
    """A turn starts at each human message."""
    return isinstance(m, HumanMessage)


def _with_image_text(m: AnyMessage) -> AnyMessage:
    """A tool message whose text is one image data URL, as the image block it means."""
    if isinstance(m, ToolMessage) and isinstance(m.content, str):
        found = image_in_text(m.content)
        if found is not None:
            return m.model_copy(update={"content": [blocks.image_block(*found)]})
    return m


def _tool_image_blocks(m: AnyMessage) -> list[dict[str, Any]]:
    """The image blocks of a tool message, in order (none for any other message)."""
    content = m.content if isinstance(m, ToolMessage) else None
    return [b for b in content if blocks.is_image_block(b)] if isinstance(content, list) else []


def _reasoned(m: AnyMessage) -> int:
    """A reply's reasoning bound to the prefix (:func:`~visus.integrations.blocks.reasoned`)."""
    usage = m.usage_metadata if isinstance(m, AIMessage) else None
    return blocks.reasoned(m.content, usage["output_tokens"] if usage else 0)


def _reasoning_blocks(m: AnyMessage) -> list[Any]:
    """Claude's thinking blocks in a reply's content (none in any other message)."""
    return blocks.thinking_blocks(m.content) if isinstance(m, AIMessage) else []
