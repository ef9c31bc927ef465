"""The neutral request every wire parses into, and the reply the model gives back.

A wire module turns its provider's body into a :class:`Conversation` (roles, texts,
decoded images with where they came from, tool calls and results, the offered tool
names); :func:`visus.reference.model.respond` answers it with a :class:`Reply`. The
helpers here read a conversation the way a model does: where the user's latest
message is, which tool results answer it, which calls a reply makes.

Example:
    >>> conv = Conversation(messages=(InMessage(role="user", texts=("hi",)),))
    >>> latest_user(conv), after_tools(conv)
    (0, False)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

__all__ = [
    "NEUTRAL_ROLES",
    "Conversation",
    "InCall",
    "InImage",
    "InMessage",
    "OutCall",
    "Reply",
    "Role",
    "after_tools",
    "call_ids",
    "latest_user",
]

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]

#: Provider role names -> neutral roles.
NEUTRAL_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "model": "assistant",
    "tool": "tool",
    "function": "tool",
}


@dataclass(frozen=True, slots=True)
class InImage:
    """An image part as received: ``where`` says which message/part carried it."""

    data: bytes
    width: int
    height: int
    where: str
    detail: str = "auto"


@dataclass(frozen=True, slots=True)
class InCall:
    """A tool call an earlier assistant message made (``arguments`` as JSON text)."""

    id: str
    name: str
    arguments: str = "{}"


@dataclass(frozen=True, slots=True)
class InMessage:
    """One message as the server parsed it; ``tool`` messages carry ``tool_call_id``."""

    role: Role
    texts: tuple[str, ...] = ()
    images: tuple[InImage, ...] = ()
    tool_calls: tuple[InCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class Conversation:
    """A parsed request: messages, offered tool names, and tool definitions as text."""

    messages: tuple[InMessage, ...]
    tools: tuple[str, ...] = ()
    tool_text: str = ""


@dataclass(frozen=True, slots=True)
class OutCall:
    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer: text, or tool calls; token counts for the usage fields."""

    text: str
    tool_calls: tuple[OutCall, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    #: Cut off at the output limit (each wire says so with its own signal).
    truncated: bool = False


def _hoisted(messages: Sequence[InMessage], i: int) -> bool:
    # A user message right after tool results is the hoisted-images message of wires
    # that cannot put images in a tool result: part of the tool results, not the user.
    return messages[i].role == "user" and i > 0 and messages[i - 1].role == "tool"


def latest_user(conv: Conversation) -> int | None:
    """Index of the user's latest own message (hoisted tool images are not one), or None.

    Example:
        >>> msgs = (InMessage("user", ("look",)), InMessage("assistant"),
        ...         InMessage("tool", tool_call_id="c"), InMessage("user", ("[image]",)))
        >>> latest_user(Conversation(msgs))
        0
    """
    for i in range(len(conv.messages) - 1, -1, -1):
        if conv.messages[i].role == "user" and not _hoisted(conv.messages, i):
            return i
    return None


def after_tools(conv: Conversation) -> bool:
    """Whether the request ends with tool results (and their hoisted images): the
    model's calls are answered and it writes the turn's answer now."""
    if not conv.messages:
        return False
    last = len(conv.messages) - 1
    return conv.messages[last].role == "tool" or _hoisted(conv.messages, last)


def call_ids(
    conv: Conversation, calls: Sequence[tuple[str, Mapping[str, Any]]]
) -> tuple[OutCall, ...]:
    """``calls`` with ids derived from the request, so the same request gets the same ids.

    Example:
        >>> conv = Conversation((InMessage("user", ("x",)),))
        >>> call_ids(conv, [("view", {"path": "a.png"})])[0].id
        'call_...'
    """
    out: list[OutCall] = []
    for i, (name, args) in enumerate(calls):
        seed = f"{len(conv.messages)}:{i}:{name}:{json.dumps(dict(args), sort_keys=True)}"
        digest = hashlib.sha256(seed.encode()).hexdigest()[:20]
        out.append(OutCall(id=f"call_{digest}", name=name, arguments=dict(args)))
    return tuple(out)
