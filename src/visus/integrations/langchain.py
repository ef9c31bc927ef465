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
import base64
import contextvars
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard, Unpack

from visus.agent.options import PathLike, VisionKeywords, VisionOptions
from visus.errors import ConfigError
from visus.integrations._common import (
    BINDING_BETA,
    RequestImages,
    bound_thinking,
    checked_effort,
    hoisted_label,
    not_sent,
    split_images,
    stale_replies,
    turns_of,
    wire_of,
)
from visus.integrations.core import (
    CONSERVATIVE,
    NO_VIEW,
    HeldImage,
    ImageTally,
    ViewCall,
    VisionCore,
    image_in_text,
)
from visus.models import ModelSpec
from visus.perception.values import content_digest
from visus.record.blobs import BlobStore
from visus.wire import window_marks

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

_ARTIFACT = "visus"
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


class VisionMiddleware(AgentMiddleware):
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
        self.core = VisionCore(VisionOptions.of(roots, **options))
        self.effort = effort
        self.last_request: RequestImages | None = None
        self.tools: list[BaseTool] = [self._tool(s.name) for s in self.core.tool_specs()]

    @property
    def blobs(self) -> BlobStore:
        """Where this integration stores images (``<data>/integrations/blobs``)."""
        return self.core.blobs

    # --- tools -------------------------------------------------------------------

    def _tool(self, name: str) -> BaseTool:
        spec = self.core.tool(name).spec

        async def run(**args: Any) -> tuple[Any, Any]:
            # Outside an agent (no wrap_tool_call): conservative limits, no digest reach.
            call = _CALL.get() or _Call(CONSERVATIVE, ())
            seen = await self.core.call(name, args, call.model, call.held)
            if seen.image is None:
                return seen.text, None
            image = seen.image
            block = {
                "type": "image",
                "base64": base64.b64encode(seen.data).decode("ascii"),
                "mime_type": image.media_type,
            }
            artifact = {
                _ARTIFACT: {
                    "digest": image.digest,
                    "source": args.get("path"),
                    "page": args.get("page"),
                    "region": args.get("region"),
                }
            }
            return [{"type": "text", "text": seen.text}, block], artifact

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
        token = _CALL.set(self._call(request))
        try:
            return handler(request)
        finally:
            _CALL.reset(token)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        if request.tool not in self.tools:
            return await handler(request)
        token = _CALL.set(await asyncio.to_thread(self._call, request))
        try:
            return await handler(request)
        finally:
            _CALL.reset(token)

    def _call(self, request: ToolCallRequest) -> _Call:
        """The model whose reply made this call, and what the call's state holds."""
        state = request.state
        messages = state.get("messages", []) if isinstance(state, dict) else []
        call_id = request.tool_call.get("id")
        asked = next(
            (
                m
                for m in reversed(messages)
                if isinstance(m, AIMessage) and any(c.get("id") == call_id for c in m.tool_calls)
            ),
            None,
        )
        noted = asked.response_metadata.get(_MODEL_KEY) if asked is not None else None
        if isinstance(noted, list | tuple) and len(noted) == 2:
            model = self.core.model_spec(str(noted[0]), noted[1])
        else:  # a reply this middleware did not see: what the provider says it was
            meta = asked.response_metadata if asked is not None else {}
            model = self.core.model_spec(
                str(meta.get("model_name") or "unknown"), meta.get("model_provider")
            )
        return _Call(model, tuple(self.held(messages)))

    def held(self, messages: Iterable[BaseMessage]) -> list[HeldImage]:
        """The images ``messages`` hold (tool results and human messages), with turns."""
        messages = list(messages)
        out: list[HeldImage] = []
        for m, turn in zip(messages, _turns(messages), strict=True):
            if not isinstance(m, ToolMessage | HumanMessage):
                continue
            view = _view_of(_visus_artifact(m))
            m = _with_image_text(m)
            blocks = m.content if isinstance(m.content, list) else []
            for block in filter(_is_image_block, blocks):
                found = _image_bytes(block)
                if found is not None:
                    out.append(HeldImage(content_digest(found[0]), turn, view))
        return out

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
        turns = _turns(messages)
        current = max(turns, default=1)
        first_live = self.core.live_from(current, model)
        prepared = [_with_image_text(m) for m in messages]
        shown = [
            self.core.shown(self._digest(b, _visus_artifact(m)), _data(b), model)
            for m, t in zip(prepared, turns, strict=True)
            if t >= first_live
            for b in _tool_image_blocks(m)
        ]
        wire = wire_of(model.provider, chat=hoist if model.provider == "openai" else None)
        tally = ImageTally(fates=iter(self.core.plan(shown, model, wire)))
        out: list[AnyMessage] = []
        pending: list[Any] = []
        for m, t in zip(prepared, turns, strict=True):
            if pending and not isinstance(m, ToolMessage):
                out.append(HumanMessage(content=pending))
                pending = []
            images = _tool_image_blocks(m)
            if not images or not isinstance(m, ToolMessage):
                out.append(m)
                continue
            fates = [tally.fate(t >= first_live) for _ in images]
            sent, hoisted = self._tool_message(m, images, fates, t, model, tally, hoist=hoist)
            out.append(sent)
            pending += hoisted
        if pending:
            out.append(HumanMessage(content=pending))
        if model.preserved_thinking and not hoist:  # unhoisted: positions are the same
            image_at = [
                n
                for n, (m, t) in enumerate(zip(prepared, turns, strict=True))
                if t >= first_live
                for _ in _tool_image_blocks(m)
            ]
            replies = [n for n, m in enumerate(out) if isinstance(m, AIMessage)]
            reasoned = {n for n in replies if _reasoning_blocks(out[n])}
            plan = functools.partial(self.core.plan, model=model, wire=wire)
            for n in stale_replies(len(out), reasoned, replies, image_at, shown, plan):
                kept = [b for b in out[n].content if b not in _reasoning_blocks(out[n])]
                out[n] = out[n].model_copy(update={"content": kept})
        self.last_request = RequestImages.of(tally, model.name, current, hoisted=hoist)
        return out

    def _tool_message(
        self,
        m: ToolMessage,
        images: Sequence[dict[str, Any]],
        fates: Sequence[str],
        turn: int,
        model: ModelSpec,
        tally: ImageTally,
        *,
        hoist: bool,
    ) -> tuple[ToolMessage, list[Any]]:
        """One tool message with images as sent (each live one fitted, the others as
        notes), and what it hoists into the next user message."""
        meta = _visus_artifact(m)
        texts = [b["text"] for b in m.content if isinstance(b, dict) and b.get("type") == "text"]

        def live(block: dict[str, Any]) -> dict[str, Any]:
            # A view's was fitted for the model that asked; this one may need less.
            sent = self._fitted(block, model)
            found = _image_bytes(sent)
            tally.tokens += self.core.tokens(model, found[0]) if found else 0
            return sent

        def note(block: dict[str, Any], repeat: bool) -> str:
            url = _image_url(block)
            view = _view_of(meta)
            return not_sent(self.core, _image_bytes(block), url, turn, view, repeat=repeat)

        split = split_images(
            images,
            fates,
            tally,
            part=lambda b: b,
            live=live,
            note=note,
            text=lambda t: {"type": "text", "text": t},
        )
        if not split.live:
            # One plain string: every chat model reads it as the tool's text.
            return m.model_copy(update={"content": "\n".join(texts + split.notes)}), []
        if not hoist:
            content = [split.swap.get(id(b), b) for b in m.content]
            changed = any(split.swap[id(b)] is not b for b in images)
            return (m.model_copy(update={"content": content}) if changed else m), []
        said, label = hoisted_label(m.tool_call_id)
        hoisted: list[Any] = []
        for _, sent in split.live:
            hoisted += [{"type": "text", "text": label}, sent]
        return m.model_copy(update={"content": "\n".join([*texts, *split.notes, said])}), hoisted

    def _digest(self, block: dict[str, Any], meta: dict[str, Any] | None) -> str:
        """What tells two tool images apart: the bytes' digest (a view's names the same),
        or a web image's URL."""
        found = _image_bytes(block)
        if found is not None:
            return content_digest(found[0])
        if meta is not None:
            return str(meta["digest"])
        return _image_url(block) or ""

    def _fitted(self, block: dict[str, Any], model: ModelSpec) -> dict[str, Any]:
        """An image block as ``model`` is sent it (a web URL as it is). A view's was
        fitted for the model that asked; another model on the same state may need less."""
        found = _image_bytes(block)
        if found is None:
            return block
        data, media_type = found
        fitted = self.core.tool_image(data, media_type, model)
        if fitted.data is data:
            return block
        return {
            "type": "image",
            "base64": base64.b64encode(fitted.data).decode("ascii"),
            "mime_type": fitted.media_type,
        }


#: Chat models that take a call's ``reasoning_effort`` (ChatAnthropic: ``output_config``).
_EFFORT_KINDS = frozenset({"anthropic-chat", "openai-chat"})


def _own_effort(model: BaseChatModel, settings: Mapping[str, Any]) -> bool:
    """Whether the chat model or the call's settings choose an effort of their own."""
    if any(settings.get(k) is not None for k in ("effort", "reasoning_effort", "reasoning")):
        return True
    config = settings.get("output_config") or getattr(model, "output_config", None) or {}
    kwargs = getattr(model, "model_kwargs", None) or {}
    return (
        getattr(model, "reasoning_effort", None) is not None
        or getattr(model, "reasoning", None) is not None
        or "effort" in config
        or any(k in kwargs for k in ("effort", "reasoning_effort", "reasoning"))
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
    first = next((i for i, m in enumerate(messages) if _live_image(m)), None)
    # Every text as a block: a marked message is sent as blocks, and the same message
    # unmarked in a later request must be the same bytes (a string would not be).
    out = [_as_blocks(m) for m in messages]
    marks = window_marks([_blocks(m) for m in messages], first)
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
    blocks = [
        b
        for m in ([system] if system is not None else []) + list(messages)
        if isinstance(m.content, list)
        for b in m.content
    ]
    tools = [t for t in request.tools if (getattr(t, "extras", None) or {}).get("cache_control")]
    return 1 + len(tools) + sum(1 for b in blocks if isinstance(b, dict) and "cache_control" in b)


def _live_image(m: AnyMessage) -> bool:
    if isinstance(m, ToolMessage):
        return bool(_tool_image_blocks(m))
    return (
        isinstance(m, HumanMessage)
        and isinstance(m.content, list)
        and any(_is_image_block(b) for b in m.content)
    )


def _blocks(m: AnyMessage) -> int:
    """Content blocks ``m`` becomes on Anthropic's wire (near enough for the ladder)."""
    if isinstance(m, ToolMessage):
        return 1  # one tool_result
    extra = len(m.tool_calls) if isinstance(m, AIMessage) else 0
    return max(1, (len(m.content) if isinstance(m.content, list) else 1) + extra)


def _as_blocks(m: AnyMessage) -> AnyMessage:
    """A tool or human message whose content is a string, as one text block."""
    if isinstance(m, ToolMessage | HumanMessage) and isinstance(m.content, str) and m.content:
        return m.model_copy(update={"content": [{"type": "text", "text": m.content}]})
    return m


def _marked(m: AnyMessage, cache_control: Any) -> AnyMessage:
    """``m`` (content as blocks) with ``cache_control`` on its last block (LangChain
    lifts a tool message's to its ``tool_result``)."""
    blocks = m.content if isinstance(m.content, list) else []
    if not blocks:
        return m
    last = blocks[-1]
    last = {"type": "text", "text": last} if isinstance(last, str) else dict(last)
    last["cache_control"] = cache_control
    return m.model_copy(update={"content": [*blocks[:-1], last]})


def _view_of(meta: Mapping[str, Any] | None) -> ViewCall:
    """The view call a tool message's visus artifact records (none without one)."""
    if meta is None:
        return NO_VIEW
    args = {"path": meta.get("source"), "page": meta.get("page"), "region": meta.get("region")}
    return ViewCall.of(args)


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


def _noted(response: ModelResponse, ref: tuple[str, str | None]) -> ModelResponse:
    """``response`` with the model that made its tool calls noted on each reply."""
    result = [
        m.model_copy(update={"response_metadata": {**m.response_metadata, _MODEL_KEY: list(ref)}})
        if isinstance(m, AIMessage) and m.tool_calls
        else m
        for m in response.result
    ]
    return dataclasses.replace(response, result=result)


def _turns(messages: Sequence[BaseMessage]) -> list[int]:
    """Each message's turn: one starts at each human message."""
    return turns_of(messages, lambda m: isinstance(m, HumanMessage))


def _with_image_text(m: AnyMessage) -> AnyMessage:
    """A tool message whose text is one image data URL, as the image block it means."""
    if isinstance(m, ToolMessage) and isinstance(m.content, str):
        found = image_in_text(m.content)
        if found is not None:
            block = {
                "type": "image",
                "base64": base64.b64encode(found[0]).decode("ascii"),
                "mime_type": found[1],
            }
            return m.model_copy(update={"content": [block]})
    return m


def _tool_image_blocks(m: AnyMessage) -> list[dict[str, Any]]:
    """The image blocks of a tool message, in order (none for any other message)."""
    if not isinstance(m, ToolMessage) or not isinstance(m.content, list):
        return []
    return [b for b in m.content if _is_image_block(b)]


def _is_image_block(block: object) -> TypeGuard[dict[str, Any]]:
    return isinstance(block, dict) and block.get("type") in {"image", "image_url"}


def _image_url(block: dict[str, Any]) -> str | None:
    """The URL an image block names (LangChain's ``url`` or OpenAI's ``image_url``)."""
    url = block.get("url")
    inner = block.get("image_url")
    if url is None and inner is not None:
        url = inner.get("url") if isinstance(inner, dict) else inner
    return url if isinstance(url, str) else None


def _image_bytes(block: dict[str, Any]) -> tuple[bytes, str] | None:
    """(bytes, media type) of an inline image block in any shape LangChain passes on."""
    b64: Any = block.get("base64")
    media_type: Any = block.get("mime_type")
    if b64 is None and block.get("source_type") == "base64":  # LangChain v0 blocks
        b64 = block.get("data")
    source = block.get("source")
    if b64 is None and isinstance(source, dict) and source.get("type") == "base64":
        b64, media_type = source.get("data"), source.get("media_type")  # Anthropic's shape
    url = _image_url(block)
    if b64 is None and url is not None and url.startswith("data:") and "," in url:
        head, b64 = url[5:].split(",", 1)
        if not head.endswith(";base64"):
            return None
        media_type = head.split(";", 1)[0]
    if not isinstance(b64, str):
        return None
    try:
        data = base64.b64decode(b64, validate=True)
    except ValueError:
        return None
    return data, media_type if isinstance(media_type, str) and media_type else "image/png"


def _reasoning_blocks(m: AnyMessage) -> list[Any]:
    """Claude's thinking blocks in a reply's content (none in any other message)."""
    if not isinstance(m, AIMessage) or not isinstance(m.content, list):
        return []
    kinds = ("thinking", "redacted_thinking")
    return [b for b in m.content if isinstance(b, dict) and b.get("type") in kinds]


def _data(block: dict[str, Any]) -> bytes | None:
    found = _image_bytes(block)
    return None if found is None else found[0]


def _visus_artifact(message: AnyMessage) -> dict[str, Any] | None:
    artifact = getattr(message, "artifact", None)
    if isinstance(artifact, dict):
        meta = artifact.get(_ARTIFACT)
        if isinstance(meta, dict) and isinstance(meta.get("digest"), str):
            return meta
    return None
