"""visus in LangChain v1 agents: one middleware gives ``create_agent`` eyes.

``create_agent(model, tools=[...], middleware=[VisionMiddleware(roots=["."])])``. The
middleware

* registers visus's ``view`` and ``read`` tools (``AgentMiddleware.tools``): an image
  is fitted to the chat model the agent calls (its model name through visus's
  catalog), stored in visus's blob store and returned as a standard ``image`` content
  block, with its digest and source in the ``ToolMessage.artifact`` (never sent);
* rewrites each model request in ``wrap_model_call`` (the request only: the graph's
  state keeps every message as it was): tool images (a view's, or any other tool's
  image block, fitted to the model) from before the live window become
  visus's plain-text descriptor, and for every chat model but Anthropic's (which
  takes images inside ``tool_result``) live tool images move to one ``HumanMessage``
  after the run of tool messages, each labelled with its call, since OpenAI's Chat
  Completions refuses images in tool messages;
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
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from visus import limits
from visus.errors import ConfigError
from visus.integrations.core import TOOL_NAMES, VisionCore, image_in_text
from visus.models import ModelSpec
from visus.perception.values import content_digest
from visus.record.blobs import BlobStore

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AnyMessage, HumanMessage, ToolMessage
    from langchain_core.tools import BaseTool, StructuredTool
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ConfigError(
        "visus.integrations.langchain needs LangChain v1: pip install 'visus[langchain]'"
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


@dataclass(frozen=True, slots=True)
class RequestImages:
    """The images of one model request: live, elided, hoisted, and the live ones' tokens."""

    model: str
    turn: int
    live: int
    elided: int
    hoisted: int
    live_tokens: int
    #: Images sent as a note because a live image has the same bytes (unchanged screens).
    repeated: int = 0


class VisionMiddleware(AgentMiddleware):
    """visus's view/read tools and retention for ``create_agent``. See the module docstring.

    ``live_turns``/``chunk`` keep the images of the last user turns; within them at most
    ``live_images`` tool images stay live (``None``: no bound), the oldest leaving
    ``image_chunk`` at a time, however many steps one run takes.
    """

    def __init__(
        self,
        roots: Sequence[str | os.PathLike[str]] = (".",),
        *,
        live_turns: int = 1,
        chunk: int = 1,
        live_images: int | None = limits.RETENTION_LIVE_IMAGES,
        image_chunk: int = limits.RETENTION_IMAGE_CHUNK,
        render: bool = True,
        data: str | os.PathLike[str] | None = None,
        blobs: BlobStore | None = None,
        tools: Sequence[str] = TOOL_NAMES,
        allow_loopback_http: bool = False,
    ) -> None:
        super().__init__()
        self.core = VisionCore(
            roots,
            render=render,
            live_turns=live_turns,
            chunk=chunk,
            live_images=live_images,
            image_chunk=image_chunk,
            data=data,
            blobs=blobs,
            tools=tools,
            allow_loopback_http=allow_loopback_http,
        )
        self.last_request: RequestImages | None = None
        # The model whose reply asked for the tool call: what a view is fitted to.
        self._spec: ModelSpec = self.core.model_spec("gpt-4.1", "openai")
        self.tools: list[BaseTool] = [self._tool(s.name) for s in self.core.tool_specs()]

    # --- tools -------------------------------------------------------------------

    def _tool(self, name: str) -> BaseTool:
        spec = self.core.tool(name).spec

        async def run(**args: Any) -> tuple[Any, Any]:
            seen = await self.core.call(name, args, self._spec)
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

    # --- requests ----------------------------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        return handler(self._prepare(request))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        # Fitting another tool's image is CPU work: off the event loop.
        return await handler(await asyncio.to_thread(self._prepare, request))

    def spec_for(self, model: BaseChatModel) -> ModelSpec:
        """The catalog spec of a LangChain chat model (its model name and provider).

        Every LangChain chat model reports both for tracing (``ls_model_name``,
        ``ls_provider``: ``openai``, ``anthropic``, ``google_genai``, ``ollama``...).
        """
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
        return self.core.model_spec(str(name or "unknown").removeprefix("models/"), provider)

    def _prepare(self, request: ModelRequest) -> ModelRequest:
        self._spec = self.spec_for(request.model)
        hoist = getattr(request.model, "_llm_type", "") not in _IMAGES_IN_TOOL_RESULTS
        messages = self.model_messages(request.messages, self._spec, hoist=hoist)
        return request.override(messages=messages)

    def model_messages(
        self, messages: Sequence[AnyMessage], model: ModelSpec, *, hoist: bool
    ) -> list[AnyMessage]:
        """What the model should see of ``messages`` (which are not changed).

        Tool images, a view's or any other tool's (fitted to ``model``), leave the
        window as descriptors and, with ``hoist``, move to one ``HumanMessage``.
        """
        turns: list[int] = []
        turn = 0
        for m in messages:
            if isinstance(m, HumanMessage):
                turn += 1
            turns.append(max(turn, 1))
        current = max(turn, 1)
        first_live = self.core.live_from(current)
        prepared = [_with_image_text(m) for m in messages]
        digests = [
            self._digest(b, _visus_artifact(m))
            for m, t in zip(prepared, turns, strict=True)
            if t >= first_live
            for b in _tool_image_blocks(m)
        ]
        fates = iter(self.core.plan(digests))
        out: list[AnyMessage] = []
        pending: list[Any] = []
        live = elided = tokens = repeated = 0
        for m, t in zip(prepared, turns, strict=True):
            if pending and not isinstance(m, ToolMessage):
                out.append(HumanMessage(content=pending))
                pending = []
            images = _tool_image_blocks(m)
            if not images or not isinstance(m, ToolMessage):
                out.append(m)
                continue
            meta = _visus_artifact(m)
            texts = [
                b["text"] for b in m.content if isinstance(b, dict) and b.get("type") == "text"
            ]
            swap: dict[int, dict[str, Any]] = {}  # id(image block) -> what is sent instead
            notes: list[str] = []
            sent: list[dict[str, Any]] = []
            for b in images:
                kind = next(fates).kind if t >= first_live else "evicted"
                if kind == "live":
                    swap[id(b)] = b if meta is not None else self._fitted(b, model)
                    sent.append(swap[id(b)])
                    continue
                repeat = kind == "repeat"
                note = self._repeat(b, meta, t) if repeat else self._descriptor(b, meta, t)
                swap[id(b)] = {"type": "text", "text": note}
                notes.append(note)
                repeated += repeat
                elided += not repeat
            if not sent:
                # One plain string: every chat model reads it as the tool's text.
                out.append(m.model_copy(update={"content": "\n".join(texts + notes)}))
                continue
            live += len(sent)
            for b in sent:
                found = _image_bytes(b)
                digest = str(meta["digest"]) if meta is not None else ""
                tokens += self.core.tokens(model, digest, found[0]) if found else 0
            if not hoist:
                content = [swap.get(id(b), b) for b in m.content]
                changed = any(swap[id(b)] is not b for b in images)
                out.append(m.model_copy(update={"content": content}) if changed else m)
                continue
            texts += notes
            texts.append(f"(the image is in the next user message, labelled {m.tool_call_id})")
            out.append(m.model_copy(update={"content": "\n".join(texts)}))
            for b in sent:
                pending.append({"type": "text", "text": f"Image from tool call {m.tool_call_id}:"})
                pending.append(b)
        if pending:
            out.append(HumanMessage(content=pending))
        self.last_request = RequestImages(
            model.name, current, live, elided, live if hoist else 0, tokens, repeated
        )
        return out

    def _digest(self, block: dict[str, Any], meta: dict[str, Any] | None) -> str:
        """What tells two tool images apart: a view's digest, the bytes' digest, or a URL."""
        if meta is not None:
            return str(meta["digest"])
        found = _image_bytes(block)
        if found is not None:
            return content_digest(found[0])
        return _image_url(block) or ""

    def _repeat(self, block: dict[str, Any], meta: dict[str, Any] | None, turn: int) -> str:
        digest = self._digest(block, meta)
        source = meta.get("source") if meta is not None else None
        if not isinstance(source, str) and not _image_bytes(block) and meta is None:
            source, digest = digest, ""  # a web URL: view fetches it again
        return self.core.repeat_descriptor(
            digest, turn, source=source if isinstance(source, str) else None
        )

    def _fitted(self, block: dict[str, Any], model: ModelSpec) -> dict[str, Any]:
        """Another tool's image block, fitted to ``model`` (a web URL as it is)."""
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

    def _descriptor(self, block: dict[str, Any], meta: dict[str, Any] | None, turn: int) -> str:
        if meta is not None:  # a view: its descriptor names the call that shows it again
            source = meta.get("source") if isinstance(meta.get("source"), str) else None
            page = meta.get("page") if isinstance(meta.get("page"), int) else None
            return self.core.descriptor(str(meta["digest"]), turn, source=source, page=page)
        found = _image_bytes(block)
        if found is None:
            url = _image_url(block)
            if url is None:  # a provider file id: nothing visus can show again
                return f"[image elided: returned by a tool in turn {turn}]"
            return self.core.descriptor("", turn, source=url)  # view takes the URL
        # Another tool's image: stored, so the digest its descriptor names shows it again.
        return self.core.descriptor(self.core.remember(*found), turn)


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


def _visus_artifact(message: AnyMessage) -> dict[str, Any] | None:
    artifact = getattr(message, "artifact", None)
    if isinstance(artifact, dict):
        meta = artifact.get(_ARTIFACT)
        if isinstance(meta, dict) and isinstance(meta.get("digest"), str):
            return meta
    return None
