"""visus in the OpenAI Agents SDK: tools, a run config, and sessions that store images once.

::

    vision = Vision(roots=["."])
    agent = Agent(name="a", model="gpt-4.1", tools=vision.tools)
    result = await Runner.run(agent, "look at shot.png", run_config=vision.run_config())

* :attr:`Vision.tools` are visus's ``view`` and ``read`` as ``FunctionTool`` s: an
  image is fitted to the model the agent calls (its name through visus's catalog),
  stored in visus's blob store and returned as ``ToolOutputImage``.
* :meth:`Vision.run_config` wraps the run's model provider so every model it resolves
  is a :class:`VisionModel`; :meth:`Vision.model` wraps a ``Model`` instance given to
  an ``Agent`` directly. The wrapper rewrites each request's input (never the run's
  items): tool images (a view's, or any other tool's ``ToolOutputImage``, fitted to
  the model) from before the live window become visus's plain-text descriptor,
  and on Chat Completions, whose converter keeps only the text of a tool output (the
  image is silently dropped), live images are hoisted into one user message after the
  tool messages, each labelled with its call.
* :class:`VisionSession` wraps any SDK ``Session``: image data URLs are stored once in
  visus's blob store and the session keeps a short ``visus-blob:sha256:...`` reference,
  restored when the items are read back.

Example:
    >>> import tempfile
    >>> vision = Vision(roots=[tempfile.mkdtemp()], data=tempfile.mkdtemp())
    >>> [t.name for t in vision.tools]
    ['read', 'view']
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import json
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from visus import limits
from visus.errors import ConfigError
from visus.integrations.core import TOOL_NAMES, VisionCore, image_in_text
from visus.models import ModelSpec
from visus.perception.values import content_digest
from visus.record.blobs import BlobStore

try:
    from agents import (
        FunctionTool,
        Model,
        ModelProvider,
        ModelResponse,
        RunConfig,
        ToolOutputImage,
        ToolOutputText,
    )
    from agents.memory import Session
    from agents.models import get_default_model
    from agents.models.multi_provider import MultiProvider
    from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
    from agents.tool_context import ToolContext
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ConfigError(
        "visus.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'visus[openai-agents]'"
    ) from e

__all__ = ["RequestImages", "Vision", "VisionModel", "VisionProvider", "VisionSession"]

_BLOB_REF = "visus-blob:"

Item = dict[str, Any]


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


class Vision:
    """visus's tools and retention for Agents SDK agents. See the module docstring.

    ``roots``/``render`` bound what the tools see; ``live_turns``/``chunk`` keep the
    images of the last user turns, and within them at most ``live_images`` tool images
    stay live (``None``: no bound), the oldest leaving ``image_chunk`` at a time, however
    many steps one run takes; blobs go to ``blobs`` or under ``data`` (default: visus's
    folder).
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
        self._digests: dict[str, str] = {}  # data URL -> digest of its bytes
        self.tools: list[FunctionTool] = [
            FunctionTool(
                name=spec.name,
                description=spec.description,
                params_json_schema=dict(spec.parameters),
                on_invoke_tool=self._invoker(spec.name),
                strict_json_schema=False,  # page/offset/limit are optional
            )
            for spec in self.core.tool_specs()
        ]

    # --- wiring ------------------------------------------------------------------

    def run_config(
        self, *, model_provider: ModelProvider | None = None, **kwargs: Any
    ) -> RunConfig:
        """A ``RunConfig`` whose models are wrapped for retention and hoisting.

        ``model_provider`` (default: the SDK's ``MultiProvider``) resolves model names
        as before; other keyword arguments go to ``RunConfig``.
        """
        model = kwargs.pop("model", None)
        if isinstance(model, Model) and not isinstance(model, VisionModel):
            model = self.model(model)
        provider = VisionProvider(self, model_provider or MultiProvider())
        return RunConfig(model=model, model_provider=provider, **kwargs)

    def model(self, model: Model) -> VisionModel:
        """``model`` wrapped for retention and (on Chat Completions) image hoisting."""
        return model if isinstance(model, VisionModel) else VisionModel(self, model)

    # --- tools -------------------------------------------------------------------

    def _invoker(self, name: str) -> Any:
        async def invoke(ctx: ToolContext[Any], raw: str) -> Any:
            try:
                args = json.loads(raw or "{}")
            except json.JSONDecodeError as e:
                return f"error: arguments are not JSON ({e.msg})"
            if not isinstance(args, dict):
                return "error: arguments must be a JSON object"
            seen = await self.core.call(name, args, self.spec_for(_model_of(ctx)))
            if seen.image is None:
                return seen.text
            url = _data_url(seen.image.media_type, seen.data)
            self._digests[url] = seen.image.digest
            return [ToolOutputText(text=seen.text), ToolOutputImage(image_url=url)]

        return invoke

    def spec_for(self, model: str | Model | None) -> ModelSpec:
        """The catalog spec for an SDK model (a name or a ``Model`` object)."""
        if isinstance(model, VisionModel):
            model = model.inner
        name = model if isinstance(model, str) else getattr(model, "model", None)
        # An agent naming no model runs the SDK's default (OPENAI_DEFAULT_MODEL).
        return self.core.model_spec(str(name or get_default_model()), "openai")

    # --- the request view --------------------------------------------------------

    def model_input(self, items: Sequence[Item], model: ModelSpec, *, hoist: bool) -> list[Item]:
        """The input one request should carry; ``items`` are not changed.

        A turn starts at each user message. Tool images (a view's, or any other
        tool's ``ToolOutputImage``, fitted to ``model``) of turns before the live window
        become descriptors; with ``hoist`` the live ones move to one user message
        after each run of tool outputs (Chat Completions).
        """
        turns: list[int] = []
        turn = 0
        for item in items:
            if _is_user(item):
                turn += 1
            turns.append(max(turn, 1))
        current = max(turn, 1)
        first_live = self.core.live_from(current)
        calls = {
            i.get("call_id"): i
            for i in items
            if isinstance(i, dict) and i.get("type") == "function_call"
        }
        prepared = [_with_image_text(item) for item in items]
        digests = [
            image.ours or _image_key(image.url)
            for item, t in zip(prepared, turns, strict=True)
            if t >= first_live and _is_output(item)
            for image in self._images(item, calls)
        ]
        fates = iter(self.core.plan(digests))
        out: list[Item] = []
        pending: list[Item] = []  # hoisted content waiting for the end of a run of outputs
        live = elided = tokens = repeated = 0
        for item, t in zip(prepared, turns, strict=True):
            is_output = _is_output(item)
            if pending and not is_output:
                out.append({"role": "user", "content": pending})
                pending = []
            images = self._images(item, calls) if is_output else []
            if not images:
                out.append(item)
                continue
            texts = [c["text"] for c in item["output"] if c.get("type") == "input_text"]
            source, page = _call_source(calls.get(item.get("call_id"), {}))
            swap: dict[int, Item] = {}  # id(input_image) -> what is sent instead
            kept: list[tuple[_Image, str]] = []  # live images and the URL each is sent as
            notes: list[str] = []
            for image in images:
                kind = next(fates).kind if t >= first_live else "evicted"
                if kind == "live":
                    digest, url = self._live(image, model)
                    tokens += self.core.tokens(model, digest, _decode(url))
                    swap[id(image.part)] = {**image.part, "image_url": url}
                    kept.append((image, url))
                    continue
                repeat = kind == "repeat"
                note = self._descriptor(image, t, source, page, repeat=repeat)
                swap[id(image.part)] = {"type": "input_text", "text": note}
                notes.append(note)
                repeated += repeat
                elided += not repeat
            if not kept:
                out.append({**item, "output": "\n".join(texts + notes)})
                continue
            live += len(kept)
            if not hoist:
                out.append({**item, "output": [swap.get(id(c), c) for c in item["output"]]})
                continue
            call_id = item.get("call_id")
            texts += notes
            texts.append(f"(the image is in the next user message, labelled {call_id})")
            out.append({**item, "output": "\n".join(texts)})
            for image, url in kept:
                pending.append({"type": "input_text", "text": f"Image from tool call {call_id}:"})
                detail = image.part.get("detail") or "auto"
                pending.append({"type": "input_image", "image_url": url, "detail": detail})
        if pending:
            out.append({"role": "user", "content": pending})
        self.last_request = RequestImages(
            model.name, current, live, elided, live if hoist else 0, tokens, repeated
        )
        return out

    def _images(self, item: Item, calls: Mapping[Any, Item]) -> list[_Image]:
        """Every image (a URL, not a file id) in a function_call_output, a view's or not."""
        # A view of an earlier process (a session read back) is stored under its digest.
        by_view = calls.get(item.get("call_id"), {}).get("name") in self.core.registry.names()
        output = item.get("output")
        if not isinstance(output, list):
            return []
        found: list[_Image] = []
        for c in output:
            if not isinstance(c, dict) or c.get("type") != "input_image":
                continue
            url = c.get("image_url")
            if not isinstance(url, str):
                continue
            digest = self._digests.get(url)
            if digest is None and url.startswith("data:"):
                digest = content_digest(_decode(url))
                if self.core.known_image(digest) is not None or (
                    by_view and self.core.blobs.has(digest)
                ):
                    self._digests[url] = digest
                else:
                    digest = None
            found.append(_Image(c, url, digest))
        return found

    def _live(self, image: _Image, model: ModelSpec) -> tuple[str, str]:
        """(digest, URL) of a live image as sent: another tool's data URL fitted to ``model``."""
        if image.ours is not None:
            return image.ours, image.url
        data = _inline(image.url)
        if data is None:
            return "", image.url  # a web URL (the provider fetches it), or not base64
        fitted = self.core.tool_image(data, _media_type(image.url), model)
        return fitted.digest, _data_url(fitted.media_type, fitted.data)

    def _descriptor(
        self,
        image: _Image,
        turn: int,
        source: str | None,
        page: int | None,
        *,
        repeat: bool = False,
    ) -> str:
        """The note an image that is not sent becomes: its descriptor, or with ``repeat``
        the note that a live image has the same bytes."""
        note = self.core.repeat_descriptor if repeat else self.core.descriptor
        if image.ours is not None:
            return note(image.ours, turn, source=source, page=page)
        data = _inline(image.url)
        if data is None and image.url.startswith("data:"):
            return f"[image elided: returned by a tool in turn {turn}]"
        if data is None:
            return note("", turn, source=image.url)  # view takes the URL
        # Another tool's image: stored, so the digest its descriptor names shows it again.
        return note(self.core.remember(data, _media_type(image.url)), turn)


@dataclass(frozen=True, slots=True)
class _Image:
    """An ``input_image`` of a tool output; ``ours`` is its digest when a view made it."""

    part: Item
    url: str
    ours: str | None


class VisionModel(Model):
    """An SDK ``Model`` whose requests carry visus's view of the input. See :class:`Vision`."""

    def __init__(self, vision: Vision, inner: Model) -> None:
        self.vision = vision
        self.inner = inner

    def _input(self, input: str | list[Any]) -> str | list[Any]:
        if isinstance(input, str):
            return input
        spec = self.vision.spec_for(self.inner)
        hoist = isinstance(self.inner, OpenAIChatCompletionsModel)
        return self.vision.model_input(input, spec, hoist=hoist)

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        # Fitting another tool's image is CPU work: off the event loop.
        sent = await asyncio.to_thread(self._input, input)
        return await self.inner.get_response(system_instructions, sent, *args, **kwargs)

    async def stream_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        sent = await asyncio.to_thread(self._input, input)
        async for event in self.inner.stream_response(system_instructions, sent, *args, **kwargs):
            yield event

    async def close(self) -> None:
        await self.inner.close()

    def __getattr__(self, name: str) -> Any:
        # Whatever else the SDK asks of a model (retry advice, cleanup) is the inner one's.
        return getattr(self.inner, name)


class VisionProvider(ModelProvider):
    """Resolves names with ``inner`` and wraps each model in :class:`VisionModel`."""

    def __init__(self, vision: Vision, inner: ModelProvider) -> None:
        self.vision = vision
        self.inner = inner

    def get_model(self, model_name: str | None) -> Model:
        return self.vision.model(self.inner.get_model(model_name))

    async def aclose(self) -> None:
        await self.inner.aclose()


class VisionSession:
    """An SDK ``Session`` storing each image once in visus's blob store.

    Items are written to ``inner`` with every ``input_image`` data URL replaced by
    ``visus-blob:sha256:<hex>`` (the bytes go to ``blobs``) and restored on read, so a
    50-image session is small on disk. A reference whose blob is gone reads back as a
    text note instead of failing the load.

    Example:
        >>> from agents import SQLiteSession
        >>> from visus.record.blobs import MemoryBlobStore
        >>> s = VisionSession(SQLiteSession("demo"), MemoryBlobStore())
        >>> s.session_id
        'demo'
    """

    def __init__(self, inner: Session, blobs: BlobStore) -> None:
        self.inner = inner
        self.blobs = blobs
        self.session_id = inner.session_id
        self.session_settings = getattr(inner, "session_settings", None)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return [self._restore(i) for i in await self.inner.get_items(limit)]

    async def add_items(self, items: list[Any]) -> None:
        await self.inner.add_items([self._store(i) for i in items])

    async def pop_item(self) -> Any:
        item = await self.inner.pop_item()
        return None if item is None else self._restore(item)

    async def clear_session(self) -> None:
        await self.inner.clear_session()

    def _store(self, item: Any) -> Any:
        return _map_images(item, self._put)

    def _restore(self, item: Any) -> Any:
        return _map_images(item, self._get)

    def _put(self, part: Item) -> Item:
        url = part.get("image_url")
        if not isinstance(url, str):
            return part
        data = _inline(url)
        if data is None:  # a web URL, or a data URL that is not base64: kept as it is
            return part
        digest = self.blobs.put(data, _media_type(url))
        return {**part, "image_url": f"{_BLOB_REF}sha256:{digest}"}

    def _get(self, part: Item) -> Item:
        url = part.get("image_url")
        if not isinstance(url, str) or not url.startswith(_BLOB_REF):
            return part
        digest = url.removeprefix(_BLOB_REF).removeprefix("sha256:")
        try:
            data = self.blobs.get(digest)
        except Exception:  # missing or corrupt: a note, never a failed load
            return {"type": "input_text", "text": f"[image sha256:{digest} is no longer stored]"}
        return {**part, "image_url": _data_url(self.blobs.media_type(digest) or "image/png", data)}


# --- helpers -------------------------------------------------------------------------


def _model_of(ctx: ToolContext[Any]) -> str | Model | None:
    agent = ctx.agent
    model = getattr(agent, "model", None) if agent is not None else None
    if model is None and ctx.run_config is not None:
        model = ctx.run_config.model
    return cast("str | Model | None", model)


def _is_output(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "function_call_output"


def _with_image_text(item: Any) -> Any:
    """A tool output whose text is one image data URL, as the image it means."""
    output = item.get("output") if _is_output(item) else None
    if isinstance(output, str) and image_in_text(output) is not None:
        return {**item, "output": [{"type": "input_image", "image_url": output.strip()}]}
    return item


def _image_key(url: str) -> str:
    """What tells two tool images apart: the digest of a data URL's bytes, else the URL."""
    data = _inline(url)
    return url if data is None else content_digest(data)


def _is_user(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and item.get("role") == "user"
        and item.get("type", "message") == "message"
    )


def _call_source(call: Mapping[str, Any]) -> tuple[str | None, int | None]:
    try:
        args = json.loads(call.get("arguments") or "{}")
    except (json.JSONDecodeError, TypeError):
        return None, None
    if not isinstance(args, dict):
        return None, None
    path, page = args.get("path"), args.get("page")
    return (path if isinstance(path, str) else None), (page if isinstance(page, int) else None)


def _data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def _media_type(url: str) -> str:
    return url[5:].split(";", 1)[0].split(",", 1)[0] or "image/png"


def _inline(url: str) -> bytes | None:
    """The bytes of a base64 ``data:`` URL; None for a web URL or any other data URL."""
    head = url.partition(",")[0]
    if not (url.startswith("data:") and head.endswith(";base64")):
        return None
    return _decode(url) or None


def _decode(url: str) -> bytes:
    try:
        return base64.b64decode(url.split(",", 1)[1], validate=True)
    except (IndexError, binascii.Error, ValueError):
        return b""


def _map_images(item: Any, fn: Any) -> Any:
    """``item`` with ``fn`` applied to every input_image part (a copy; ``item`` untouched)."""
    if not isinstance(item, dict):
        return item
    changed = False
    out = dict(item)
    for key in ("output", "content"):
        value = item.get(key)
        if isinstance(value, list):
            mapped = [
                fn(c) if isinstance(c, dict) and c.get("type") == "input_image" else c
                for c in value
            ]
            if any(a is not b for a, b in zip(mapped, value, strict=True)):
                out[key] = mapped
                changed = True
    return out if changed else copy.copy(item)
