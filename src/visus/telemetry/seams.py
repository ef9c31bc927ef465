"""The hooks the agent and the servers call: a span (when traces are on) and the
metrics, at each turn, model call and tool call. Callers stay one ``with`` each.

Example:
    >>> from visus.models import get_model
    >>> with model_call(get_model("reference")) as call:
    ...     call.recording  # traces are off: a no-op span, metrics still counted
    False
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from visus.models.spec import ModelSpec
from visus.record.messages import Message
from visus.telemetry import metrics, names
from visus.telemetry.parts import retention as _retention
from visus.telemetry.traces import Span, capture_content, current, span

__all__ = [
    "fitted",
    "model_call",
    "proxied",
    "record_retention",
    "refused",
    "tool_call",
    "turn",
    "turn_outcome",
]


def _model_attributes(model: ModelSpec, operation: str) -> dict[str, Any]:
    return {
        names.OPERATION: operation,
        names.PROVIDER: names.provider_name(model.provider),
        names.REQUEST_MODEL: model.name,
    }


@contextmanager
def turn(
    model: ModelSpec, session: str, *, agent: str = "visus", request_id: str | None = None
) -> Iterator[Span]:
    """One user turn of an agent (``invoke_agent``); counted by how it ends."""
    attributes = {
        **_model_attributes(model, names.INVOKE_AGENT),
        names.AGENT_NAME: agent,
        names.CONVERSATION: session,
    }
    if request_id is not None:
        attributes[names.REQUEST_ID] = request_id
    outcome = "error"
    try:
        with span(f"{names.INVOKE_AGENT} {agent}", attributes) as live:
            yield live
            outcome = ""
    except asyncio.CancelledError:
        outcome = "cancelled"
        raise
    finally:
        if outcome:
            metrics.TURNS.labels(outcome=outcome).inc()


def turn_outcome(live: Span, stopped: str, steps: int, usage: Any) -> None:
    """How a turn ended: ``stopped`` (answer, max_tokens, step_limit), its steps and usage."""
    metrics.TURNS.labels(outcome=stopped).inc()
    live.set({names.STOPPED: stopped, names.STEPS: steps})
    live.usage(usage)


@contextmanager
def model_call(model: ModelSpec) -> Iterator[Span]:
    """One request to a model (``chat``), the child of its turn's span: its latency by
    provider, model and outcome."""
    attributes = _model_attributes(model, names.CHAT)
    provider = names.provider_name(model.provider)
    with (
        metrics.timed(metrics.MODEL_SECONDS, provider=provider, model=model.name),
        span(f"{names.CHAT} {model.name}", attributes, client=True) as live,
    ):
        yield live


def record_retention(history: Sequence[Message], view: Sequence[Message]) -> None:
    """What retention did to one request's images: an event on the current span (the
    turn's), and the image counts."""
    counts = _retention(history, view)
    for event, key in (("elided", names.EVICTED), ("deduplicated", names.DEDUPLICATED)):
        found = counts[key]
        if isinstance(found, list) and found:
            metrics.IMAGES.labels(event=event).inc(len(found))
    live = current()
    if live.recording:
        live.event(names.RETENTION_EVENT, counts)


def fitted(sent: tuple[int, int], shown: tuple[int, int]) -> None:
    """An image of an agent's (a view, a pasted image, an MCP tool's) went to the model
    at ``sent`` pixels (width, height) for ``shown`` ones: counted as fitted when smaller.

    Example:
        >>> fitted((1568, 1045), (3000, 2000)); fitted((300, 200), (300, 200))
    """
    if sent[0] < shown[0] or sent[1] < shown[1]:
        metrics.IMAGES.labels(event="fitted").inc()


def refused(count: int = 1) -> None:
    """A provider refused ``count`` images of a request."""
    metrics.IMAGES.labels(event="refused").inc(count)


@contextmanager
def tool_call(name: str, call_id: str | None, arguments: Mapping[str, Any]) -> Iterator[Span]:
    """One tool call (``execute_tool``; ``call_id`` when the caller has one), counted by
    tool and outcome."""
    attributes: dict[str, Any] = {
        names.OPERATION: names.EXECUTE_TOOL,
        names.TOOL_NAME: name,
        names.TOOL_TYPE: "function",
    }
    if call_id is not None:
        attributes[names.TOOL_CALL_ID] = call_id
    outcome = "error"
    try:
        with span(f"{names.EXECUTE_TOOL} {name}", attributes) as live:
            if live.recording:
                _arguments(live, arguments)
            yield live
            outcome = "ok"
    finally:
        metrics.TOOL_CALLS.labels(tool=name, outcome=outcome).inc()


def _arguments(live: Span, arguments: Mapping[str, Any]) -> None:
    # A view by digest brings back an image retention evicted: a re-view.
    reviewed = any(isinstance(v, str) and v.startswith("sha256:") for v in arguments.values())
    live.set({names.VIEW_REVIEWED: reviewed})
    if capture_content():
        import json

        live.set({names.TOOL_ARGUMENTS: json.dumps(dict(arguments), default=str)})


@contextmanager
def proxied(path: str, model: str) -> Iterator[Span]:
    """One request ``visus proxy`` edits and forwards (``chat``, the client's model). It
    ends with the block, or, when the proxy reads the reply's usage onto it
    (:meth:`Span.keep_open`), once the reply has passed."""
    provider = "anthropic" if path.startswith("/v1/messages") else "openai"
    attributes = {
        names.OPERATION: names.CHAT,
        names.PROVIDER: provider,
        names.REQUEST_MODEL: model,
        names.SURFACE: "proxy",
    }
    with span(f"{names.CHAT} {model}".rstrip(), attributes, client=True) as live:
        yield live
