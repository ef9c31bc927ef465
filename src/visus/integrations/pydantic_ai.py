"""visus in pydantic-ai: one capability gives an agent ``view``/``read`` and retention.

``Agent(model, capabilities=[Vision(roots=["."])])`` is all it takes. The capability

* adds visus's ``view`` and ``read`` tools (a toolset): images are fitted to the model
  the run is calling (``RunContext.model``: its ``model_name`` and ``system`` go
  through visus's catalog), stored once in visus's blob store and returned to
  pydantic-ai as a :class:`~pydantic_ai.messages.BinaryImage` named by its digest,
  which pydantic-ai's own model classes place per wire (inside the tool result where
  the wire takes images there, else hoisted to a following user message);
* decides retention in ``prepare_model_request`` (pydantic-ai's hook for work that
  depends on the serving model): images viewed before the live window reach the
  model as visus's plain-text descriptor in place of the tool result's content. The
  change is for that request only: the run's history (``result.all_messages()``)
  keeps every image, so nothing is lost and no history processor rewrites it;
* keeps token estimates: :attr:`Vision.last_request` after each model request.

Example:
    >>> import tempfile
    >>> from pydantic_ai import Agent
    >>> from pydantic_ai.models.test import TestModel
    >>> vision = Vision(roots=[tempfile.mkdtemp()], data=tempfile.mkdtemp())
    >>> agent = Agent(TestModel(call_tools=[]), capabilities=[vision])
    >>> agent.run_sync("hi").output
    'success (no tool calls)'
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from visus.errors import ConfigError
from visus.integrations.core import TOOL_NAMES, VisionCore
from visus.models import ModelSpec
from visus.record.blobs import BlobStore

try:
    from pydantic_ai import RunContext
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import (
        BinaryContent,
        BinaryImage,
        ModelMessage,
        ModelRequest,
        ModelRequestPart,
        ModelResponse,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models import Model, ModelRequestContext
    from pydantic_ai.tools import Tool
    from pydantic_ai.toolsets import FunctionToolset
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ConfigError(
        "visus.integrations.pydantic_ai needs pydantic-ai: pip install 'visus[pydantic-ai]'"
    ) from e

__all__ = ["RequestImages", "Vision"]

_TAG = "sha256:"


@dataclass(frozen=True, slots=True)
class RequestImages:
    """The images of one model request: how many kept pixels, how many became text.

    ``live_tokens`` estimates the live images' cost by visus's formula for ``model``.
    """

    model: str
    turn: int
    live: int
    elided: int
    live_tokens: int


class Vision(AbstractCapability[Any]):
    """A pydantic-ai capability: visus's view/read tools plus retention of old images.

    ``roots`` bound what the tools may see; ``render=False`` withholds rendering svg,
    text and pdf. ``live_turns`` is how many user turns keep their pixels (1: the
    current one), ``chunk`` moves the window in steps for prompt caches. Blobs go
    to ``blobs`` or under ``data`` (default: visus's data folder).

    Example:
        >>> import tempfile
        >>> v = Vision(roots=[tempfile.mkdtemp()], live_turns=2, data=tempfile.mkdtemp())
        >>> [t.name for t in v.core.tool_specs()]
        ['view', 'read']
    """

    def __init__(
        self,
        roots: Sequence[str | os.PathLike[str]] = (".",),
        *,
        live_turns: int = 1,
        chunk: int = 1,
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
            data=data,
            blobs=blobs,
            tools=tools,
            allow_loopback_http=allow_loopback_http,
        )
        self.last_request: RequestImages | None = None
        self._toolset: FunctionToolset[Any] = FunctionToolset(
            [
                self._tool(spec.name, spec.description, spec.parameters)
                for spec in self.core.tool_specs()
            ]
        )

    # --- tools -------------------------------------------------------------------

    def get_toolset(self) -> FunctionToolset[Any]:
        return self._toolset

    def _tool(self, name: str, description: str, schema: Mapping[str, Any]) -> Tool[Any]:
        async def run(ctx: RunContext[Any], **args: Any) -> Any:
            seen = await self.core.call(name, args, self.spec_for(ctx.model))
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

    # --- retention ---------------------------------------------------------------

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        model: Model = request_context.model
        spec = self.spec_for(model)
        messages, stats = self.model_view(request_context.messages, spec)
        request_context.messages = messages
        self.last_request = stats
        return request_context

    def model_view(
        self, messages: Sequence[ModelMessage], model: ModelSpec
    ) -> tuple[list[ModelMessage], RequestImages]:
        """``messages`` as the model should see them: old viewed images as descriptors.

        The messages given are not changed (changed ones are copies). A turn starts at
        each request that carries a user prompt.
        """
        turns: list[int] = []
        turn = 0
        for m in messages:
            if isinstance(m, ModelRequest) and any(isinstance(p, UserPromptPart) for p in m.parts):
                turn += 1
            turns.append(max(turn, 1))
        current = max(turn, 1)
        first_live = self.core.live_from(current)
        calls = {
            p.tool_call_id: p
            for m in messages
            if isinstance(m, ModelResponse)
            for p in m.parts
            if isinstance(p, ToolCallPart)
        }
        out: list[ModelMessage] = []
        live = elided = tokens = 0
        for m, t in zip(messages, turns, strict=True):
            if not isinstance(m, ModelRequest):
                out.append(m)
                continue
            parts: list[ModelRequestPart] = []
            changed = False
            for p in m.parts:
                images = _viewed_images(p)
                if not images:
                    parts.append(p)
                    continue
                if t >= first_live:
                    live += len(images)
                    tokens += sum(self.core.tokens(model, i.identifier, i.data) for i in images)
                    parts.append(p)
                    continue
                assert isinstance(p, ToolReturnPart)
                elided += len(images)
                parts.append(self._elide(p, images, t, calls.get(p.tool_call_id)))
                changed = True
            out.append(dataclasses.replace(m, parts=parts) if changed else m)
        return out, RequestImages(model.name, current, live, elided, tokens)

    def _elide(
        self,
        part: ToolReturnPart,
        images: list[BinaryContent],
        turn: int,
        call: ToolCallPart | None,
    ) -> ToolReturnPart:
        args = call.args_as_dict() if call is not None else {}
        source = args.get("path") if isinstance(args.get("path"), str) else None
        page = args.get("page") if isinstance(args.get("page"), int) else None
        content = part.content
        items: list[Any] = list(content) if isinstance(content, list | tuple) else [content]
        texts = [i for i in items if isinstance(i, str)]
        for img in images:
            texts.append(self.core.descriptor(img.identifier, turn, source=source, page=page))
        # One plain string: a list would reach the model as JSON, its quotes escaped.
        return dataclasses.replace(part, content="\n".join(texts))


def _viewed_images(part: ModelRequestPart) -> list[BinaryContent]:
    """The images a visus tool put in ``part`` (named ``sha256:...``); others stay as they are."""
    if not isinstance(part, ToolReturnPart):
        return []
    content = part.content
    items = content if isinstance(content, list | tuple) else [content]
    return [
        i
        for i in items
        if isinstance(i, BinaryContent) and i.is_image and i.identifier.startswith(_TAG)
    ]
