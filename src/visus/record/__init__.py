"""The record: neutral messages, the content-addressed blob store and the session log."""

from __future__ import annotations

from visus.record.messages import (
    AssistantMessage,
    AttachmentOrigin,
    ImagePart,
    Message,
    ModelRequest,
    Origin,
    Part,
    PerceptionOrigin,
    TextPart,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
)

__all__ = [
    "AssistantMessage",
    "AttachmentOrigin",
    "ImagePart",
    "Message",
    "ModelRequest",
    "Origin",
    "Part",
    "PerceptionOrigin",
    "TextPart",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "Usage",
    "UserMessage",
]
