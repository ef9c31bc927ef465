"""Claude's reasoning blocks, kept in the record and sent back exactly as returned.

Claude models that think return ``thinking`` blocks (``thinking`` text, often empty, and
a ``signature``) and ``redacted_thinking`` blocks (opaque ``data``) among a reply's
content; on the Bedrock Converse wire the same blocks are ``reasoningContent``. Newer
models bind each block to everything before it (Anthropic's "Preserved thinking" page:
"Send each assistant turn back exactly as the API returned it: every block type, in the
order received, including thinking blocks whose thinking field is empty"), so a reply
that holds one is kept whole: its content blocks, verbatim and in order, as the
message's :class:`~visus.record.messages.ProviderState` for that wire. Lowering onto the
same wire sends those blocks back as they came while the record's text and tool calls
still say what they said; onto any other wire they are dropped (another provider's
model never sees them, not even as text).

Example:
    >>> reply = [{"type": "thinking", "thinking": "", "signature": "c2ln"},
    ...          {"type": "text", "text": "Looking."},
    ...          {"type": "tool_use", "id": "t1", "name": "view", "input": {"p": "a"}}]
    >>> state = keep("anthropic", reply, reasoning=lambda b: b["type"] == "thinking")
    >>> blocks = replay(state, "anthropic", "Looking.", ["t1"],
    ...                 call_id=lambda b: b.get("id"))  # type: ignore[arg-type]
    >>> blocks == reply, replay(state, "anthropic", "Edited.", ["t1"], call_id=lambda b: None)
    (True, None)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal, NotRequired, TypedDict, cast

from visus.models.spec import ModelSpec
from visus.record.messages import JSONObject, ProviderState

__all__ = [
    "BINDING_BETA",
    "DISPLAY_BETA",
    "ThinkingConfig",
    "dropped_reasoning",
    "is_claude_thinking",
    "is_reasoning_content",
    "keep",
    "progress_notes",
    "replay",
    "replay_reasoning",
    "thinking_config",
]

#: Anthropic's beta for ``thinking.block_binding`` and ``input_transformations``.
BINDING_BETA = "thinking-binding-controls-2026-08-01"
#: Anthropic's beta for ``thinking.display: "updates"``.
DISPLAY_BETA = "thinking-display-updates-2026-08-18"


class ThinkingConfig(TypedDict):
    """The ``thinking`` object visus sends a Claude model (Messages API, and Bedrock's
    ``additionalModelRequestFields``)."""

    type: Literal["adaptive"]
    display: NotRequired[Literal["updates"]]
    block_binding: NotRequired[dict[str, str]]


def thinking_config(spec: ModelSpec) -> tuple[ThinkingConfig | None, list[str]]:
    """What visus asks of a thinking Claude model, and the betas that takes:

    - ``adaptive`` thinking (never ``disabled`` nor a budget: the newest models refuse
      both, "What's new in Claude Opus 5.5"), on models that think adaptively;
    - ``display: "updates"`` where the model writes its notes between tool calls into
      thinking blocks: the reasoning stays hidden and the notes come back as text, for
      the spinner and the web chat's phase line (Anthropic "Thinking", display);
    - on models that bind thinking to its prefix, ``block_binding`` with
      ``prefix_mismatch_behavior: "drop_block"`` and its beta on every request (the API
      keeps neither between requests): an eviction then drops the reasoning after it,
      counted in usage, instead of failing the request with a 400 ("Preserved thinking").

    Example:
        >>> from visus.models import get_model
        >>> thinking_config(get_model("claude-opus-5-5"))[1]
        ['thinking-display-updates-2026-08-18', 'thinking-binding-controls-2026-08-01']
        >>> thinking_config(get_model("claude-sonnet-4-6"))
        (None, [])
    """
    if spec.thinking not in ("adaptive", "always"):
        return None, []
    config: ThinkingConfig = {"type": "adaptive"}
    betas: list[str] = []
    if spec.progress_updates:
        config["display"] = "updates"
        betas.append(DISPLAY_BETA)
    if spec.preserved_thinking:
        config["block_binding"] = {"prefix_mismatch_behavior": "drop_block"}
        betas.append(BINDING_BETA)
    return config, betas


#: A test on one stored block: is it reasoning (kept however the record changes)?
IsReasoning = Callable[[Mapping[str, object]], bool]
#: The tool-call id a stored block carries, or None when it is not a call.
CallId = Callable[[Mapping[str, object]], str | None]
#: The answer text a stored block carries, or None when it is not text.
TextOf = Callable[[Mapping[str, object]], str | None]


def is_claude_thinking(block: Mapping[str, object]) -> bool:
    """A Messages API reasoning block (``thinking`` or ``redacted_thinking``)."""
    return block.get("type") in ("thinking", "redacted_thinking")


def is_reasoning_content(block: Mapping[str, object]) -> bool:
    """A Bedrock Converse reasoning block (``reasoningContent``)."""
    return "reasoningContent" in block


def keep(
    wire: str, blocks: Iterable[Mapping[str, object]], *, reasoning: IsReasoning
) -> ProviderState | None:
    """The reply's content blocks as provider state when one of them is reasoning
    (a reply without reasoning is kept as the record's text and calls alone)."""
    kept = [dict(b) for b in blocks]
    if not any(reasoning(b) for b in kept):
        return None
    return ProviderState(wire, json.dumps(kept, separators=(",", ":"), ensure_ascii=False))


def _stored(state: ProviderState | None, wire: str) -> list[JSONObject] | None:
    """The reply's blocks as returned (None: none for ``wire``, or a view left its
    reasoning out: the turn is built from the record, as Anthropic's and Bedrock's
    prefix checks compare it)."""
    if state is None or state.wire != wire or state.left_out:
        return None
    items = json.loads(state.items)
    return cast("list[JSONObject]", items) if isinstance(items, list) else None


def _text(block: Mapping[str, object]) -> str | None:
    if block.get("type") == "text":
        value = block.get("text")
        return value if isinstance(value, str) else ""
    return None


def replay(
    state: ProviderState | None,
    wire: str,
    text: str,
    call_ids: Sequence[str],
    *,
    call_id: CallId,
    text_of: TextOf = _text,
) -> list[JSONObject] | None:
    """The stored blocks, fresh copies in their order, when the record still holds what
    they hold (the same answer text, the same calls in the same order); None when there
    are none for ``wire`` or the record changed, so the caller builds the turn itself."""
    stored = _stored(state, wire)
    if stored is None:
        return None
    texts = [t for t in map(text_of, stored) if t is not None]
    ids = [i for i in map(call_id, stored) if i is not None]
    if "".join(texts) != text or ids != list(call_ids):
        return None
    return stored


def replay_reasoning(
    state: ProviderState | None, wire: str, *, reasoning: IsReasoning
) -> list[JSONObject]:
    """Only the stored reasoning blocks, in order: what goes back, ahead of the turn's
    text and calls, when the record no longer matches the reply (the model then drops or
    refuses them as its rules say, but never loses them by visus's hand)."""
    return [b for b in _stored(state, wire) or () if reasoning(b)]


def dropped_reasoning(transformations: object) -> int:
    """How many reasoning blocks the provider left out of this request: the
    ``thinking_dropped`` entries of a reply's ``input_transformations`` (Anthropic's
    "Set the mismatch behavior and read input_transformations"; an entry of a type
    visus does not know is ignored, as the page asks).

    Example:
        >>> dropped_reasoning([{"type": "thinking_dropped", "path": "messages.1.content.0",
        ...                     "reason": "prefix_binding_mismatch"}, {"type": "new"}])
        1
    """
    if not isinstance(transformations, list):
        return 0
    return sum(
        1 for t in transformations if isinstance(t, dict) and t.get("type") == "thinking_dropped"
    )


def _note_texts(item: Mapping[str, object]) -> list[str]:
    """The readable text one kept item carries: a Claude thinking block's text (empty
    unless the request asked to see it), Bedrock's ``reasoningText.text``, a Responses
    reasoning item's summary."""
    if item.get("type") == "thinking":
        return [str(item.get("thinking") or "")]
    reasoning = item.get("reasoningContent")
    if isinstance(reasoning, Mapping):
        text = reasoning.get("reasoningText")
        return [str(text.get("text") or "")] if isinstance(text, Mapping) else []
    summary = item.get("summary") if item.get("type") == "reasoning" else None
    if isinstance(summary, list):
        return [str(s.get("text") or "") for s in summary if isinstance(s, Mapping)]
    return []


def progress_notes(state: ProviderState | None) -> tuple[str, ...]:
    """What a reply said about its progress besides its answer: the notes newer Claude
    models write between tool calls into thinking blocks (shown with ``display:
    "updates"``), Responses reasoning summaries. Empty when the provider returned none.

    Example:
        >>> state = ProviderState("anthropic", json.dumps([
        ...     {"type": "thinking", "thinking": "", "signature": "s1"},
        ...     {"type": "thinking", "thinking": "Opening the settings page.", "signature": "s2"},
        ...     {"type": "tool_use", "id": "t", "name": "view", "input": {}}]))
        >>> progress_notes(state)
        ('Opening the settings page.',)
    """
    if state is None:
        return ()
    items = json.loads(state.items)
    if not isinstance(items, list):
        return ()
    texts = (t.strip() for i in items if isinstance(i, Mapping) for t in _note_texts(i))
    return tuple(t for t in texts if t)
