"""The record: neutral messages, the content-addressed blob store and the session log."""

from __future__ import annotations

from visus.record.blobs import BlobStore, FileBlobStore, MemoryBlobStore
from visus.record.codec import message_from_dict, message_to_dict
from visus.record.messages import (
    AssistantMessage,
    AttachmentOrigin,
    DocumentPart,
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
from visus.record.sessions import LoadedSession, SessionInfo, SessionStore

__all__ = [
    "AssistantMessage",
    "AttachmentOrigin",
    "BlobStore",
    "DocumentPart",
    "FileBlobStore",
    "ImagePart",
    "LoadedSession",
    "MemoryBlobStore",
    "Message",
    "ModelRequest",
    "Origin",
    "Part",
    "PerceptionOrigin",
    "SessionInfo",
    "SessionStore",
    "TextPart",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "message_from_dict",
    "message_to_dict",
]
