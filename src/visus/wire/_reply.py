"""What every wire's reply side shares: the context a reply is parsed in, stop reasons,
usage pricing, tool-call arguments, and the stream accumulator protocol.

A codec's ``parse(reply, ctx)`` takes a reply as a plain dict (an SDK's
``model_dump()`` or the raw JSON) and its ``Accumulator`` takes stream events as
plain dicts, so both are pure and pinned by snapshot tests without any SDK.

Example:
    >>> from visus.models.spec import ModelSpec
    >>> ctx = ReplyContext(ModelSpec(name="m", provider="openai"), turn=2, provider="openai")
    >>> ctx.message("hi", [], Usage(), "end_turn").stop_reason
    'end_turn'
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from visus.errors import ProviderError
from visus.models.prices import cost_usd
from visus.models.spec import ModelSpec
from visus.record.messages import (
    AssistantMessage,
    JSONObject,
    ProviderState,
    StopReason,
    TextPart,
    ToolCall,
    Usage,
)

__all__ = [
    "Accumulator",
    "JSONObject",
    "ReplyContext",
    "StopReason",
    "decode_arguments",
    "new_call_id",
    "usage_for",
]


def usage_for(
    model: ModelSpec,
    input_tokens: int,
    output_tokens: int,
    *,
    cache_read: int = 0,
    cache_write: int = 0,
) -> Usage:
    """Tokens as the provider reported them (``input_tokens`` with the cached ones),
    priced at list prices (:func:`visus.models.prices.cost_usd`).

    Example:
        >>> spec = ModelSpec(name="m", provider="openai-compatible", input_price_per_mtok=2.0,
        ...                  output_price_per_mtok=8.0)
        >>> usage_for(spec, 1_000_000, 500_000).cost_usd
        6.0
    """
    cost = cost_usd(
        model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )
    return Usage(input_tokens, output_tokens, cost, cache_read, cache_write)


def decode_arguments(raw: object) -> JSONObject:
    """Tool-call arguments as a dict, whether the wire sent JSON text or an object.

    Arguments that are not a JSON object are kept, undecoded, under ``_raw`` so the
    tool layer can report the problem to the model instead of crashing the step.

    Example:
        >>> decode_arguments('{"path": "a.png"}'), decode_arguments("")
        ({'path': 'a.png'}, {})
    """
    if raw is None or raw == "":
        return {}
    if isinstance(raw, Mapping):
        return {str(k): v for k, v in raw.items()}
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return {"_raw": raw}
        return dict(value) if isinstance(value, dict) else {"_raw": raw}
    return {"_raw": str(raw)}


def new_call_id() -> str:
    """An id for a tool call the provider did not name (Gemini, Ollama)."""
    return f"call_{uuid.uuid4().hex[:24]}"


def as_int(value: object) -> int:
    """A token count from a reply (absent or null counts as 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(frozen=True, slots=True)
class ReplyContext:
    """What a codec needs besides the reply: the model (for pricing and the name the
    record keeps), the turn the reply belongs to, and the provider errors name."""

    model: ModelSpec
    turn: int = 1
    provider: str = ""

    def error(self, message: str) -> ProviderError:
        """A malformed or failed reply, named by provider."""
        return ProviderError(f"{self.provider}: {message}", provider=self.provider)

    def message(
        self,
        text: str,
        calls: list[ToolCall],
        usage: Usage,
        stop: StopReason,
        state: ProviderState | None = None,
    ) -> AssistantMessage:
        """The reply as a record value."""
        if stop == "end_turn" and calls:
            stop = "tool_use"  # some wires say "stop" even when they asked for tools
        return AssistantMessage(
            parts=(TextPart(text),) if text else (),
            tool_calls=tuple(calls),
            turn=self.turn,
            model=self.model.name,
            usage=usage,
            stop_reason=stop,
            provider_state=state,
        )


class Accumulator(Protocol):
    """A wire's stream parser: fed event dicts in order, it returns each event's new
    text (for the caller to show) and at the end the whole reply."""

    def feed(self, event: JSONObject) -> str: ...

    def result(self) -> AssistantMessage: ...
