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
import json
import warnings
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, Unpack, cast

from visus.agent.options import PathLike, VisionKeywords
from visus.errors import ConfigError
from visus.integrations.core import (
    HeldImage,
    Integration,
    VisionWarning,
)
from visus.integrations.items import VisionSession, data_url, held_items, request_input
from visus.integrations.reasoning import checked_effort
from visus.integrations.values import RequestImages
from visus.models import ModelSpec

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


class Vision(Integration):
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
        self._start(roots, effort, options)
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
        return held_items(self.core, items)

    def model_input(self, items: Sequence[Item], model: ModelSpec, *, hoist: bool) -> list[Item]:
        """The input one request should carry; ``items`` are not changed.

        A turn starts at each user message. Tool images (a view's, or any other
        tool's ``ToolOutputImage``, fitted to ``model``) of turns before the live window
        become descriptors, and within it the count window (``live_images``) decides;
        with ``hoist`` the live ones move to one user message after each run of tool
        outputs (Chat Completions).
        """
        out, self.last_request = request_input(self.core, items, model, hoist=hoist)
        return out


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


def _model_of(ctx: ToolContext[Any]) -> str | Model | None:
    """The model (or its name) the run calls: the run config's wins, as in the SDK."""
    config = ctx.run_config
    if config is not None and config.model is not None:
        return config.model
    return cast("str | Model | None", getattr(ctx.agent, "model", None))
