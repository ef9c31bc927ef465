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
* :meth:`Vision.session` wraps any SDK ``Session`` (a :class:`VisionSession`): image
  data URLs are stored once in visus's blob store and the session keeps a short
  ``visus-blob:sha256:...`` reference, restored when the items are read back.
* ``Vision(effort="low")`` goes as ``ModelSettings.reasoning.effort`` on each request
  whose settings name no effort of their own (Responses ``reasoning.effort``, Chat
  Completions ``reasoning_effort``). Reasoning items the SDK sends back are left as
  they are: on a model that binds them to the history (GPT-5.6 and later) the API
  drops those an eviction invalidated, without an error.
* A tool call sees the run config: a wiring that would drop its image (Chat
  Completions through a model visus does not wrap) fails with the fix, and a run
  without retention warns once. ``view("sha256:...")`` reaches the images of the
  request whose reply made the call (else of the run's input), never another
  conversation's.

Example:
    >>> import tempfile
    >>> vision = Vision(roots=[tempfile.mkdtemp()], data=tempfile.mkdtemp())
    >>> [t.name for t in vision.tools]
    ['read', 'view']
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import warnings
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Unpack, cast

from visus.agent.options import PathLike, VisionKeywords, VisionOptions
from visus.errors import ConfigError
from visus.integrations._common import (
    RequestImages,
    checked_effort,
    hoisted_label,
    not_sent,
    split_images,
    stale_replies,
    turns_of,
    wire_of,
)
from visus.integrations.core import (
    NO_VIEW,
    HeldImage,
    ImageTally,
    ViewCall,
    VisionCore,
    VisionWarning,
    image_in_text,
)
from visus.integrations.items import VisionSession, data_url, decoded, inline, media_type_of
from visus.models import ModelSpec
from visus.perception.values import content_digest
from visus.record.blobs import BlobStore
from visus.retention import Shown
from visus.wire import Wire

try:
    from agents import (
        FunctionTool,
        Model,
        ModelProvider,
        ModelResponse,
        ModelSettings,
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
        "pip install -e '.[openai-agents]' in the visus checkout"
    ) from e

__all__ = ["RequestImages", "Vision", "VisionModel", "VisionProvider", "VisionSession"]

# Tool calls whose conversation is remembered at once (a run resolves its calls
# right after the reply that made them).
_ASKED = 4096

Item = dict[str, Any]


class Vision:
    """visus's tools and retention for Agents SDK agents. See the module docstring.

    ``roots`` and ``options`` are :class:`~visus.agent.options.VisionOptions` (documented
    there): ``render``, ``live_turns``/``chunk`` (the images of the last user turns keep
    their pixels), ``live_images``/``image_chunk`` (within them at most that many tool
    images, however many steps one run takes), ``data``, ``blobs``, ``tools``,
    ``allow_loopback_http``. ``effort``: how hard the model thinks (one of its levels,
    ``visus models --json``), sent where the agent's ``ModelSettings`` name none.
    """

    def __init__(
        self,
        roots: Sequence[PathLike] | PathLike = (".",),
        *,
        effort: str | None = None,
        **options: Unpack[VisionKeywords],
    ) -> None:
        self.core = VisionCore(VisionOptions.of(roots, **options))
        self.effort = effort
        self.last_request: RequestImages | None = None
        # Tool call id -> the images of the request whose reply made that call: what
        # the call's conversation holds (the tool context does not carry the run's
        # items). Filled by VisionModel; bounded, as ids are never reused.
        self._asked: OrderedDict[str, tuple[HeldImage, ...]] = OrderedDict()
        self._warned = False
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

    @property
    def blobs(self) -> BlobStore:
        """Where this integration stores images (``<data>/integrations/blobs``), a
        :class:`VisionSession`'s too."""
        return self.core.blobs

    def session(self, inner: Session) -> VisionSession:
        """``inner`` (any SDK ``Session``) keeping its images once, in :attr:`blobs`.

        Example:
            >>> import tempfile
            >>> from agents import SQLiteSession
            >>> vision = Vision(roots=[tempfile.mkdtemp()], data=tempfile.mkdtemp())
            >>> vision.session(SQLiteSession("chat")).session_id
            'chat'
        """
        return VisionSession(inner, self.blobs)

    # --- tools -------------------------------------------------------------------

    def _invoker(self, name: str) -> Any:
        async def invoke(ctx: ToolContext[Any], raw: str) -> Any:
            try:
                args = json.loads(raw or "{}")
            except json.JSONDecodeError as e:
                return f"error: arguments are not JSON ({e.msg})"
            if not isinstance(args, dict):
                return "error: arguments must be a JSON object"
            held = self._asked.get(ctx.tool_call_id)
            if held is None:  # no VisionModel saw the request: the run's input is all
                held = tuple(await asyncio.to_thread(self.held, ctx.turn_input))
            seen = await self.core.call(name, args, self.spec_for(_model_of(ctx)), held)
            if seen.image is None:
                return seen.text
            self._check_wiring(ctx)
            url = data_url(seen.image.media_type, seen.data)
            return [ToolOutputText(text=seen.text), ToolOutputImage(image_url=url)]

        return invoke

    def _check_wiring(self, ctx: ToolContext[Any]) -> None:
        """Fail when the image a tool returns cannot reach the model; warn once when
        the run has no retention. The run config is visible here, and the SDK
        resolves the model from it as :func:`_run_model` does."""
        model = _run_model(ctx)
        if model is None or isinstance(model, VisionModel):
            return
        if isinstance(model, OpenAIChatCompletionsModel):
            ours = ctx.run_config is not None and isinstance(
                ctx.run_config.model_provider, VisionProvider
            )
            how = (
                "give the agent vision.model(model) instead of the model itself"
                if ours
                else "run with run_config=vision.run_config(...) (and give an agent an "
                "explicit model as vision.model(model))"
            )
            raise ConfigError(
                "visus: this run calls Chat Completions through a model visus does not "
                "wrap; the SDK keeps only the text of a tool output there, so the model "
                f"would never see this image. Fix: {how}."
            )
        if not self._warned:
            self._warned = True
            warnings.warn(
                "visus: this run's model is not wrapped by vision.run_config() or "
                "vision.model(), so old images are never elided (every request carries "
                "them all) and other tools' images are not fitted.",
                VisionWarning,
                stacklevel=2,
            )

    def note_calls(self, held: Sequence[HeldImage], output: Iterable[Any]) -> None:
        """Remember what the conversation held when a reply made its tool calls."""
        frozen = tuple(held)
        for item in output:
            call_id = getattr(item, "call_id", None)
            if getattr(item, "type", None) == "function_call" and isinstance(call_id, str):
                self._asked[call_id] = frozen
                self._asked.move_to_end(call_id)
        while len(self._asked) > _ASKED:
            self._asked.popitem(last=False)

    def spec_for(self, model: str | Model | None) -> ModelSpec:
        """The catalog spec for an SDK model (a name or a ``Model`` object)."""
        if isinstance(model, VisionModel):
            model = model.inner
        name = model if isinstance(model, str) else getattr(model, "model", None)
        # An agent naming no model runs the SDK's default (OPENAI_DEFAULT_MODEL).
        return self.core.model_spec(str(name or get_default_model()), "openai")

    def settings_for(self, model: Model, settings: ModelSettings) -> ModelSettings:
        """``settings`` with :attr:`effort` as ``reasoning.effort`` when they name none."""
        reasoning = settings.reasoning
        if self.effort is None or (reasoning is not None and reasoning.effort is not None):
            return settings
        effort = checked_effort(self.spec_for(model), self.effort)
        given = reasoning.model_dump(exclude_none=True) if reasoning is not None else {}
        # ModelSettings (a pydantic dataclass) makes its Reasoning of the mapping.
        chosen: Any = {**given, "effort": effort}
        return dataclasses.replace(settings, reasoning=chosen)

    # --- the request view --------------------------------------------------------

    def held(self, items: Iterable[Any]) -> list[HeldImage]:
        """The images ``items`` hold (tool outputs and user messages), with their turns."""
        items = [_with_image_text(i) for i in items]
        calls = _calls(items)
        out: list[HeldImage] = []
        for item, turn in zip(items, _turns(items), strict=True):
            if not isinstance(item, dict):
                continue
            view = NO_VIEW
            if item.get("type") == "function_call_output":
                view = self._view_args(calls.get(item.get("call_id"), {}))
                content = item.get("output")
            elif _is_user(item):
                content = item.get("content")
            else:
                continue
            for c in content if isinstance(content, list) else ():
                url = c.get("image_url") if isinstance(c, dict) else None
                data = inline(url) if isinstance(url, str) else None
                if c.get("type") == "input_image" and data is not None:
                    out.append(HeldImage(content_digest(data), turn, view))
        return out

    def _view_args(self, call: Mapping[str, Any]) -> ViewCall:
        """The arguments of a call to this integration's ``view`` (else none)."""
        if call.get("name") != "view" or "view" not in self.core.registry.names():
            return NO_VIEW
        return _call_args(call)

    def model_input(self, items: Sequence[Item], model: ModelSpec, *, hoist: bool) -> list[Item]:
        """The input one request should carry; ``items`` are not changed.

        A turn starts at each user message. Tool images (a view's, or any other
        tool's ``ToolOutputImage``, fitted to ``model``) of turns before the live window
        become descriptors, and within it the count window (``live_images``) decides;
        with ``hoist`` the live ones move to one user message after each run of tool
        outputs (Chat Completions).
        """
        prepared = [_with_image_text(item) for item in items]
        turns = _turns(prepared)
        current = max(turns, default=1)
        first_live = self.core.live_from(current, model)
        calls = _calls(prepared)
        shown = [
            self.core.shown(_image_key(image.url), inline(image.url), model)
            for item, t in zip(prepared, turns, strict=True)
            if t >= first_live and _is_output(item)
            for image in _images(item)
        ]
        wire = wire_of(model.provider, chat=hoist)
        tally = ImageTally(fates=iter(self.core.plan(shown, model, wire)))
        out: list[Item] = []
        pending: list[Item] = []  # hoisted content waiting for the end of a run of outputs
        for item, t in zip(prepared, turns, strict=True):
            is_output = _is_output(item)
            if pending and not is_output:
                out.append({"role": "user", "content": pending})
                pending = []
            images = _images(item) if is_output else []
            if not images:
                out.append(item)
                continue
            fates = [tally.fate(t >= first_live) for _ in images]
            view = self._view_args(calls.get(item.get("call_id"), {}))
            sent, hoisted = self._output(item, images, fates, t, view, model, tally, hoist=hoist)
            out.append(sent)
            pending += hoisted
        if pending:
            out.append({"role": "user", "content": pending})
        if model.preserved_thinking and not hoist:  # unhoisted: positions are the same
            out = self._fresh_reasoning(prepared, out, turns, first_live, shown, model, wire)
        self.last_request = RequestImages.of(tally, model.name, current, hoisted=hoist)
        return out

    def _fresh_reasoning(
        self,
        given: Sequence[Item],
        items: list[Item],
        turns: Sequence[int],
        first_live: int,
        shown: Sequence[Shown],
        model: ModelSpec,
        wire: Wire | None,
    ) -> list[Item]:
        """``items`` (``given`` as sent) without the reasoning items an eviction already
        had the API drop (:func:`~visus.integrations._common.stale_replies`): each is a
        reply of the request holding the items before it; sent again at every later
        step, it would be dropped and its reasoning redone every time."""
        image_at = [
            n
            for n, (item, t) in enumerate(zip(given, turns, strict=True))
            if t >= first_live and _is_output(item)
            for _ in _images(item)
        ]
        replies = [n for n, i in enumerate(items) if _is_reply(i)]
        reasoned = {n for n in replies if items[n].get("type") == "reasoning"}
        plan = functools.partial(self.core.plan, model=model, wire=wire)
        stale = stale_replies(len(items), reasoned, replies, image_at, shown, plan)
        return [i for n, i in enumerate(items) if n not in stale]

    def _output(
        self,
        item: Item,
        images: Sequence[_Image],
        fates: Sequence[str],
        turn: int,
        view: ViewCall,
        model: ModelSpec,
        tally: ImageTally,
        *,
        hoist: bool,
    ) -> tuple[Item, list[Item]]:
        """One tool output with images as sent (each live one fitted, the others as
        notes), and what it hoists into the next user message."""
        texts = [c["text"] for c in item["output"] if c.get("type") == "input_text"]

        def live(image: _Image) -> Item:
            url = self._live(image, model)
            tally.tokens += self.core.tokens(model, decoded(url))
            return {**image.part, "image_url": url}

        def note(image: _Image, repeat: bool) -> str:
            data = inline(image.url)
            found = None if data is None else (data, media_type_of(image.url))
            return not_sent(self.core, found, image.url, turn, view, repeat=repeat)

        split = split_images(
            images,
            fates,
            tally,
            part=lambda i: i.part,
            live=live,
            note=note,
            text=lambda t: {"type": "input_text", "text": t},
        )
        if not split.live:
            return {**item, "output": "\n".join(texts + split.notes)}, []
        if not hoist:
            return {**item, "output": [split.swap.get(id(c), c) for c in item["output"]]}, []
        said, label = hoisted_label(item.get("call_id"))
        hoisted: list[Item] = []
        for image, sent in split.live:
            detail = image.part.get("detail") or "auto"
            hoisted.append({"type": "input_text", "text": label})
            hoisted.append(
                {"type": "input_image", "image_url": sent["image_url"], "detail": detail}
            )
        return {**item, "output": "\n".join([*texts, *split.notes, said])}, hoisted

    def _live(self, image: _Image, model: ModelSpec) -> str:
        """The URL a live image is sent as: a data URL fitted to ``model`` (a view's
        already is, unless another model than the one that asked gets it)."""
        data = inline(image.url)
        if data is None:
            return image.url  # a web URL (the provider fetches it), or not base64
        fitted = self.core.tool_image(data, media_type_of(image.url), model)
        if fitted.data is data:
            return image.url
        return data_url(fitted.media_type, fitted.data)


@dataclass(frozen=True, slots=True)
class _Image:
    """An ``input_image`` of a tool output (``part``) and its URL."""

    part: Item
    url: str


class VisionModel(Model):
    """An SDK ``Model`` whose requests carry visus's view of the input. See :class:`Vision`."""

    def __init__(self, vision: Vision, inner: Model) -> None:
        self.vision = vision
        self.inner = inner

    def _input(self, input: str | list[Any]) -> tuple[str | list[Any], list[HeldImage]]:
        """The input as sent, and the images the conversation holds."""
        if isinstance(input, str):
            return input, []
        spec = self.vision.spec_for(self.inner)
        hoist = isinstance(self.inner, OpenAIChatCompletionsModel)
        return self.vision.model_input(input, spec, hoist=hoist), self.vision.held(input)

    async def get_response(
        self,
        system_instructions: Any,
        input: Any,
        model_settings: ModelSettings,
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        # Fitting another tool's image is CPU work: off the event loop.
        sent, held = await asyncio.to_thread(self._input, input)
        settings = self.vision.settings_for(self.inner, model_settings)
        response = await self.inner.get_response(
            system_instructions, sent, settings, *args, **kwargs
        )
        self.vision.note_calls(held, response.output)
        return response

    async def stream_response(
        self,
        system_instructions: Any,
        input: Any,
        model_settings: ModelSettings,
        *args: Any,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        sent, held = await asyncio.to_thread(self._input, input)
        settings = self.vision.settings_for(self.inner, model_settings)
        stream = self.inner.stream_response(system_instructions, sent, settings, *args, **kwargs)
        async for event in stream:
            if getattr(event, "type", None) == "response.completed":
                response = getattr(event, "response", None)
                self.vision.note_calls(held, getattr(response, "output", ()))
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


# --- helpers -------------------------------------------------------------------------


def _run_model(ctx: ToolContext[Any]) -> Model | None:
    """The model the SDK runs this call's agent with (its own order: the run config's
    model, the agent's, the provider's for the agent's name); None outside a run."""
    config, agent = ctx.run_config, ctx.agent
    if config is None or agent is None:
        return None
    if isinstance(config.model, Model):
        return config.model
    own = getattr(agent, "model", None)
    if isinstance(own, Model):
        return own
    name = config.model if isinstance(config.model, str) else own
    if isinstance(config.model_provider, VisionProvider):
        return None  # every model it resolves is wrapped
    try:
        return config.model_provider.get_model(name)
    except Exception:  # a provider of any make: it answered this run's request already
        return None


def _turns(items: Sequence[Any]) -> list[int]:
    """Each item's turn: one starts at each user message."""
    return turns_of(items, _is_user)


def _calls(items: Sequence[Any]) -> dict[Any, Item]:
    return {
        i.get("call_id"): i
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call"
    }


def _images(item: Item) -> list[_Image]:
    """Every image (a URL, not a file id) in a function_call_output."""
    output = item.get("output")
    if not isinstance(output, list):
        return []
    return [
        _Image(c, c["image_url"])
        for c in output
        if isinstance(c, dict)
        and c.get("type") == "input_image"
        and isinstance(c.get("image_url"), str)
    ]


def _model_of(ctx: ToolContext[Any]) -> str | Model | None:
    """The model (or its name) the run calls: the run config's wins, as in the SDK."""
    config = ctx.run_config
    if config is not None and config.model is not None:
        return config.model
    return cast("str | Model | None", getattr(ctx.agent, "model", None))


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
    data = inline(url)
    return url if data is None else content_digest(data)


def _is_reply(item: Any) -> bool:
    """An item a model's reply made (reasoning, a call, its message)."""
    if not isinstance(item, dict):
        return False
    kind = item.get("type")
    return kind in ("reasoning", "function_call") or (
        kind == "message" and item.get("role") == "assistant"
    )


def _is_user(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and item.get("role") == "user"
        and item.get("type", "message") == "message"
    )


def _call_args(call: Mapping[str, Any]) -> ViewCall:
    try:
        args = json.loads(call.get("arguments") or "{}")
    except (json.JSONDecodeError, TypeError):
        return NO_VIEW
    return ViewCall.of(args) if isinstance(args, dict) else NO_VIEW
