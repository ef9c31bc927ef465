"""Reasoning bound to the history, through the proxy.

Newer models bind the reasoning they return to everything before it: a Claude
``thinking`` / ``redacted_thinking`` block sent back is checked against its prefix
(top-level ``system``, ``tools``, every earlier message), and on Responses a reasoning
item after a changed point is discarded (Anthropic "Preserved thinking", "Prefix checks
on thinking blocks"; OpenAI "preserved reasoning"; docs/WIRES.md). A client that replays
them as returned (Claude Code does) keeps its history append-only, but the proxy's
evictions replace an old image with a descriptor: an edit of the prefix of every
reasoning block after it. On an account created from 2026-08-31 that is a 400 unless
the request sets ``thinking.block_binding.prefix_mismatch_behavior: "drop_block"`` and
sends ``anthropic-beta: thinking-binding-controls-2026-08-01``, on every later request
of the conversation (the API keeps neither between requests), and adding the
``thinking`` object "changes nothing else" on those models, which think adaptively by
default (platform.claude.com, "Fix a thinking block bound to a different conversation").

So, on ``/v1/messages`` for a model whose catalog entry says ``preserved_thinking``,
when the proxy changed anything before a reasoning block, :func:`bind_claude` adds that
opt-in, unless the client set a ``block_binding`` of its own (its choice is never
overridden; the stats say so). Since a descriptor stays once written, every later
request of the conversation carries the opt-in too. What it costs is counted twice:
the reasoning the request carried after the first point the proxy evicted (its own
count, on both wires) and the blocks the upstream says it dropped (``thinking_dropped``
entries of the reply's ``input_transformations``, read as the reply passes by
:class:`visus.proxy.anthropic.MessagesReply`).

Example:
    >>> from visus.models import get_model
    >>> body = {"model": "claude-opus-5-5", "messages": [
    ...     {"role": "user", "content": [{"type": "text", "text": "[image elided]"}]},
    ...     {"role": "assistant", "content": [{"type": "thinking", "thinking": "",
    ...                                        "signature": "s"}]}]}
    >>> bind_claude(body, get_model("claude-opus-5-5"), edited_at=0, evicted_at=0)
    Binding(opted_in=True, client_choice=None, after_edits=1, left_out=0)
    >>> body["thinking"]
    {'type': 'adaptive', 'block_binding': {'prefix_mismatch_behavior': 'drop_block'}}
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from visus.models.spec import ModelSpec
from visus.wire._thinking import BINDING_BETA

__all__ = [
    "BINDING_BETA",
    "Binding",
    "bind_claude",
    "reasoning_after",
    "responses_reasoning",
    "with_beta",
]

_CLAUDE_REASONING = frozenset({"thinking", "redacted_thinking"})
_DROP = {"prefix_mismatch_behavior": "drop_block"}


@dataclass(frozen=True, slots=True)
class Binding:
    """What the proxy did about one request's bound reasoning.

    ``opted_in``: it added ``drop_block`` and the beta; ``client_choice``: the client's
    own ``prefix_mismatch_behavior`` (kept as sent) where the proxy would have opted
    in; ``after_edits``: reasoning blocks or items the request carried after the first
    point the proxy evicted (what the provider may drop); ``left_out``: blocks an
    earlier request's eviction already had dropped, not sent again
    (:func:`visus.proxy.slots.stale_reasoning`).
    """

    opted_in: bool = False
    client_choice: str | None = None
    after_edits: int = 0
    left_out: int = 0


def _claude_reasoning(message: object) -> int:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return 0
    return sum(1 for b in content if isinstance(b, dict) and b.get("type") in _CLAUDE_REASONING)


def reasoning_after(counts: Sequence[int], at: int | None) -> int:
    """Reasoning blocks in the items after index ``at`` (``counts``: per item).

    Example:
        >>> reasoning_after([0, 1, 0, 2], 1), reasoning_after([0, 1], None)
        (2, 0)
    """
    return 0 if at is None else sum(counts[at + 1 :])


def bind_claude(
    body: dict[str, Any],
    spec: ModelSpec,
    *,
    edited_at: int | None,
    evicted_at: int | None,
    left_out: int = 0,
) -> Binding:
    """Opt a Messages ``body`` into ``drop_block`` where the proxy edited before a
    thinking block of a model that binds it (module docstring); the caller adds
    :data:`BINDING_BETA` to the request's ``anthropic-beta`` when ``opted_in``.

    ``edited_at``: the first message the proxy changed (a fit included: a fitted image
    is stable, but the opt-in only matters where something is not); ``evicted_at``: the
    first where it elided or cut an image; ``left_out``: stale blocks the caller took out.
    """
    messages = body.get("messages")
    if not spec.preserved_thinking or edited_at is None or not isinstance(messages, list):
        return Binding()
    counts = [_claude_reasoning(m) for m in messages]
    after = reasoning_after(counts, evicted_at)
    if not reasoning_after(counts, edited_at):
        return Binding(after_edits=after, left_out=left_out)
    thinking = body.get("thinking")
    if thinking is None:
        # "If your request doesn't set the thinking parameter, adding it changes nothing
        # else": these models think adaptively by default.
        body["thinking"] = {"type": "adaptive", "block_binding": dict(_DROP)}
        return Binding(opted_in=True, after_edits=after, left_out=left_out)
    if not isinstance(thinking, dict) or thinking.get("type") == "disabled":
        # Not ours to fix: a malformed object is the upstream's to refuse, and with
        # thinking off the docs say to remove the thinking by hand.
        return Binding(after_edits=after, left_out=left_out)
    binding = thinking.get("block_binding")
    if binding is not None:
        choice = binding.get("prefix_mismatch_behavior") if isinstance(binding, dict) else None
        return Binding(False, str(choice or "error"), after, left_out)
    thinking["block_binding"] = dict(_DROP)
    return Binding(opted_in=True, after_edits=after, left_out=left_out)


def responses_reasoning(items: Iterable[object]) -> list[int]:
    """Per Responses input item: 1 for a ``reasoning`` item, else 0."""
    return [1 if isinstance(i, dict) and i.get("type") == "reasoning" else 0 for i in items]


def with_beta(headers: list[tuple[bytes, bytes]], beta: str) -> list[tuple[bytes, bytes]]:
    """``headers`` with ``beta`` among its ``anthropic-beta`` values (added once).

    Example:
        >>> with_beta([(b"anthropic-beta", b"a-1")], "b-2")
        [(b'anthropic-beta', b'a-1,b-2')]
        >>> with_beta([(b"anthropic-beta", b"b-2")], "b-2")
        [(b'anthropic-beta', b'b-2')]
        >>> with_beta([], "b-2")
        [(b'anthropic-beta', b'b-2')]
    """
    named = [v.decode("latin-1") for k, v in headers if k.lower() == b"anthropic-beta"]
    values = [b.strip() for v in named for b in v.split(",") if b.strip()]
    if beta in values:
        return headers
    joined = ",".join([*values, beta]).encode("latin-1")
    return [(k, v) for k, v in headers if k.lower() != b"anthropic-beta"] + [
        (b"anthropic-beta", joined)
    ]
