"""Claude's thinking on the reference server: the request rules and the reply's blocks.

Shared by the Anthropic Messages wire and Bedrock Converse (whose Claude models take the
same ``thinking`` object and betas through ``additionalModelRequestFields``). What each
model does is its catalog entry (``thinking``, ``preserved_thinking``,
``forced_tool_choice``, ``efforts``, ``progress_updates``); the rules are the providers'
pages, cited where each is enforced:

- "What's new in Claude Opus 5.5": on models whose thinking is always on, ``thinking:
  {"type": "disabled"}`` or a manual budget is a 400; forced tool use is a 400 on the
  models that refuse it; text between tool calls comes back in ``thinking`` blocks, empty
  at the default ``display: "omitted"``.
- "Thinking" (display): ``"updates"`` (beta ``thinking-display-updates-2026-08-18``)
  returns those notes as text and keeps the reasoning empty; ``"summarized"`` returns
  both.
- "Preserved thinking": ``block_binding`` needs the ``thinking-binding-controls-2026-08-01``
  beta; a block failing the prefix check is a 400 by default (this server is a new
  account), or with ``prefix_mismatch_behavior: "drop_block"`` the failing blocks are
  dropped and listed in ``input_transformations``; each block is checked against the
  prefix it was made with, so thinking made after a change stays valid ("Prefix checks
  on thinking blocks"; :mod:`visus.reference.binding`).

What a dropped block costs is this server's own model (the pages say only that the
model redoes the reasoning it lost): the reasoning the block's own reply did, billed as
output of the reply, at every request it is dropped from. The reply that redoes it holds
that redo in its own block (billed as input while kept), but if that block is dropped in
turn only its own reasoning is billed again, never the redo it carried.

Example:
    >>> from visus.models import get_model
    >>> cfg = config({}, None, None, set(), get_model("claude-opus-5-5"), _raise)
    >>> cfg.thinks, cfg.display, cfg.mode
    (True, 'omitted', 'error')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from visus.models.spec import ModelSpec
from visus.reference.binding import (
    BINDING_BETA,
    DISPLAY_BETA,
    Item,
    Mode,
    Tampered,
    Verdict,
    judge,
    mint,
    prefix,
    reasoning_tokens,
)
from visus.reference.conversation import Reply

__all__ = [
    "Thinking",
    "blocks",
    "check",
    "config",
    "converse_blocks",
    "converse_items",
    "converse_tool_choice",
    "items",
    "transformations",
]

#: What a wire raises for a refused request (its own error shape): message -> exception.
Refuse = Callable[[str], Exception]

_SUMMARY = "Reading what the request holds before answering."


def _raise(message: str) -> NoReturn:
    raise ValueError(message)


@dataclass(frozen=True, slots=True)
class Thinking:
    """How this request thinks: whether the model thinks, what it shows, what a failed
    prefix check does, whether ``input_transformations`` is reported, and at what effort."""

    thinks: bool
    display: str
    mode: Mode
    report: bool
    effort: str | None
    betas: frozenset[str]


def _thinking_type(thinking: Mapping[str, Any], spec: ModelSpec, refuse: Refuse) -> str:
    kind = thinking.get("type", "adaptive")
    if spec.thinking == "always" and kind in ("disabled", "enabled"):
        # "What's new in Claude Opus 5.5", "Thinking can't be disabled".
        raise refuse(
            f'"thinking.type.{kind}" is not supported for this model. Use '
            '"thinking.type.adaptive" and "output_config.effort" to control thinking behavior.'
        )
    if kind not in ("adaptive", "enabled", "disabled", "between_tools"):
        raise refuse(
            f"thinking: Input tag '{kind}' found using 'type' does not match any of the "
            "expected tags: 'adaptive', 'disabled', 'enabled'"
        )
    return str(kind)


def _display(thinking: Mapping[str, Any], betas: set[str], refuse: Refuse) -> str:
    display = thinking.get("display", "omitted")
    allowed = ["summarized", "omitted", *(["updates"] if DISPLAY_BETA in betas else [])]
    if display not in allowed:
        raise refuse(
            "thinking.adaptive.display: Input should be " + " or ".join(f"'{d}'" for d in allowed)
        )
    return str(display)


def _mode(thinking: Mapping[str, Any], betas: set[str], spec: ModelSpec, refuse: Refuse) -> Mode:
    binding = thinking.get("block_binding")
    if binding is not None and BINDING_BETA not in betas:
        raise refuse(
            f"thinking.{thinking.get('type', 'adaptive')}.block_binding: "
            "Extra inputs are not permitted"
        )
    behavior = binding.get("prefix_mismatch_behavior") if isinstance(binding, dict) else None
    if behavior not in (None, "error", "drop_block"):
        raise refuse(
            "thinking.adaptive.block_binding.prefix_mismatch_behavior: Input should be "
            "'error' or 'drop_block'"
        )
    if not spec.preserved_thinking:
        return "off"
    # This server answers as an account created after 2026-08-31: "error" unless asked.
    return "drop" if behavior == "drop_block" else "error"


def config(
    thinking: object,
    tool_choice: object,
    effort: object,
    betas: set[str],
    spec: ModelSpec,
    refuse: Refuse,
) -> Thinking:
    """The request's thinking settings, or ``refuse(message)`` raised where the model
    refuses them (module docstring)."""
    t = thinking if isinstance(thinking, dict) else {}
    if thinking is not None and not isinstance(thinking, dict):
        raise refuse("thinking: Input should be a valid dictionary")
    kind = _thinking_type(t, spec, refuse)
    display = _display(t, betas, refuse)
    mode = _mode(t, betas, spec, refuse)
    if (
        not spec.forced_tool_choice
        and isinstance(tool_choice, dict)
        and tool_choice.get("type") in ("any", "tool")
    ):
        # "What's new in Claude Opus 5.5", "Forced tool use is not supported".
        raise refuse('tool_choice: type "tool" and "any" are not supported for this model.')
    if effort is not None and spec.efforts and effort not in spec.efforts:
        raise refuse(
            "output_config.effort: Input should be " + ", ".join(f"'{e}'" for e in spec.efforts)
        )
    thinks = spec.thinking != "none" and kind != "disabled"
    report = BINDING_BETA in betas
    level = effort if isinstance(effort, str) else None
    return Thinking(thinks, display, mode, report, level, frozenset(betas))


def items(
    system: object, tools: object, messages: Sequence[object]
) -> tuple[dict[str, Any], list[Item]]:
    """The request as the prefix check reads it: the head (``system``, ``tools``) and every
    content block in order, thinking blocks as reasoning items."""
    head = {"system": system, "tools": tools}
    out: list[Item] = []
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        content = m.get("content") if isinstance(m, dict) else None
        seq = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for j, block in enumerate(seq if isinstance(seq, list) else []):
            path = f"messages.{i}.content.{j}"
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "thinking":
                text = block.get("thinking")
                out.append(
                    Item(
                        path,
                        None,
                        str(block.get("signature") or ""),
                        text if isinstance(text, str) else "",
                    )
                )
            elif kind == "redacted_thinking":
                out.append(Item(path, None, str(block.get("data") or ""), None))
            else:
                out.append(Item(path, {"role": role, "block": block}))
    return head, out


def check(
    head: Mapping[str, object],
    request: Sequence[Item],
    spec: ModelSpec,
    cfg: Thinking,
    refuse: Refuse,
) -> Verdict:
    """Judge the request's thinking blocks; a tampered block, or (mode ``error``) one that
    fails the prefix check, is refused with the Messages API's own words."""
    try:
        verdict = judge(head, request, spec, cfg.mode)
    except Tampered as e:
        raise refuse(f"{e.path}: Invalid `signature` in `thinking` block") from None
    if verdict.failed is not None and cfg.mode == "error":
        message = (
            f"{verdict.failed}: Invalid `signature` in `thinking` block. The block is bound "
            "to a different conversation. Remove the block, or set "
            '`thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
        )
        if not cfg.report:
            message += (
                f" That setting requires the `{BINDING_BETA}` value in the `anthropic-beta` header."
            )
        raise refuse(message + " Content before this block differs from when it was created.")
    return verdict


def transformations(verdict: Verdict, cfg: Thinking) -> list[dict[str, str]] | None:
    """``input_transformations`` for the reply (None: the beta was not sent)."""
    if not cfg.report:
        return None
    dropped = [
        {"type": "thinking_dropped", "path": path, "reason": reason}
        for path, reason in verdict.dropped
    ]
    allowed = [
        {"type": "thinking_mismatch_allowed", "path": path, "reason": "prefix_binding_mismatch"}
        for path in verdict.allowed
    ]
    return dropped + allowed


def blocks(
    reply: Reply,
    spec: ModelSpec,
    cfg: Thinking,
    verdict: Verdict,
    head: Mapping[str, object],
    request: Sequence[Item],
) -> tuple[list[dict[str, Any]], int]:
    """The reply's thinking blocks (signed over this request) and the text blocks of the
    answer, in order, with the reasoning tokens they stand for. A model that puts its
    notes between tool calls in thinking blocks does so here (empty unless shown)."""
    if not cfg.thinks:
        return [], 0
    digest = prefix(head, [i.value for i in request if not i.reasoning])
    # Reasoning dropped from the request is reasoning done again: billed with this
    # reply, but the block stands for its own reasoning only if it is dropped in turn
    # (binding's docstring: the redo is billed where the blocks it redid are dropped).
    own = reasoning_tokens(cfg.effort)
    spent = own + verdict.dropped_tokens
    shown = _SUMMARY if cfg.display == "summarized" else ""
    first, first_id = mint(
        spec, digest, spent, previous=verdict.last, count=verdict.count, text=shown, own=own
    )
    out = [{"type": "thinking", "thinking": shown, "signature": first}]
    if spec.progress_updates and reply.text and reply.tool_calls:
        note = reply.text if cfg.display in ("updates", "summarized") else ""
        token, _ = mint(spec, digest, 0, previous=first_id, count=verdict.count + 1, text=note)
        out.append({"type": "thinking", "thinking": note, "signature": token})
    return out, spent


# --- Bedrock Converse: the same rules, Converse's shapes -----------------------------


def _no_points(value: object) -> object:
    """A Converse list without its ``cachePoint`` blocks (markers, as ``cache_control``
    is on the Messages API: not part of the prefix)."""
    if isinstance(value, list):
        return [v for v in value if not (isinstance(v, dict) and "cachePoint" in v)]
    return value


def converse_items(body: Mapping[str, Any]) -> tuple[dict[str, Any], list[Item]]:
    """A Converse request as the prefix check reads it: ``reasoningContent`` blocks are
    the reasoning items (``reasoningText.signature`` or ``redactedContent``)."""
    tool_config = body.get("toolConfig")
    tools = tool_config.get("tools") if isinstance(tool_config, dict) else None
    head = {"system": _no_points(body.get("system")), "tools": _no_points(tools)}
    out: list[Item] = []
    for i, m in enumerate(body.get("messages") or []):
        role = m.get("role") if isinstance(m, dict) else None
        content = m.get("content") if isinstance(m, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else []):
            path = f"messages.{i}.content.{j}"
            if not isinstance(block, dict) or "cachePoint" in block:
                continue
            reasoning = block.get("reasoningContent")
            if not isinstance(reasoning, dict):
                out.append(Item(path, {"role": role, "block": block}))
                continue
            text = reasoning.get("reasoningText")
            if isinstance(text, dict):
                shown = text.get("text")
                out.append(
                    Item(
                        path,
                        None,
                        str(text.get("signature") or ""),
                        shown if isinstance(shown, str) else "",
                    )
                )
            else:
                out.append(Item(path, None, str(reasoning.get("redactedContent") or ""), None))
    return head, out


def converse_tool_choice(tool_config: object) -> dict[str, Any] | None:
    """Converse's ``toolChoice`` (``{"any": {}}``, ``{"tool": {...}}``) as the Messages
    API's ``tool_choice``, which the model's rules are written against."""
    choice = tool_config.get("toolChoice") if isinstance(tool_config, dict) else None
    if not isinstance(choice, dict):
        return None
    for kind in ("any", "tool", "auto"):
        if kind in choice:
            return {"type": kind}
    return None


def converse_blocks(reasoning: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The reply's thinking blocks as Converse ``reasoningContent`` blocks."""
    return [
        {
            "reasoningContent": {
                "reasoningText": {"text": b["thinking"], "signature": b["signature"]}
            }
        }
        for b in reasoning
    ]
