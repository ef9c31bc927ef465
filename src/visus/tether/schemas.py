"""The tether API's HTTP shapes: pydantic models and the ingress frame's JSON Schema.

They exist for the OpenAPI spec (``/openapi.json``) and response validation; the
ingress body itself is checked by :func:`visus.tether.frames.decode_frame`.

Example:
    >>> [one["properties"]["payload"]["required"] for one in FRAME_IN_SCHEMA["oneOf"]]
    [['text'], ['target']]
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from visus import limits

__all__ = [
    "CANCEL_IN_SCHEMA",
    "FORBIDDEN",
    "FRAME_IN_SCHEMA",
    "MESSAGE_IN_SCHEMA",
    "SESSION_PATTERN",
    "Accepted",
    "ErrorBody",
    "ErrorDetail",
    "FrameOut",
    "InstanceCreate",
    "InstanceList",
    "InstanceOut",
    "PollOut",
]

#: The validation error type of a field a client may never give (answered 403).
FORBIDDEN = "forbidden"

_IMAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["media_type", "data"],
    "properties": {
        "media_type": {"type": "string", "enum": sorted(limits.TETHER_MEDIA_TYPES)},
        "data": {
            "type": "string",
            "description": "standard base64 (RFC 4648), padding optional, no data-URI prefix",
            "minLength": 2,
            "pattern": r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}(?:==)?|[A-Za-z0-9+/]{3}=?)?$",
        },
    },
}
_ID_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$",
    "maxLength": limits.TETHER_MAX_ID_CHARS,
}
#: JSON Schema of a ``turn.cancel`` frame: stop the turn answering ``payload.target``.
CANCEL_IN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "payload"],
    "properties": {
        "v": {"type": "integer", "enum": [1]},
        "type": {"type": "string", "enum": ["turn.cancel"]},
        "session": _ID_SCHEMA,
        "msg_id": _ID_SCHEMA,
        "payload": {"type": "object", "required": ["target"], "properties": {"target": _ID_SCHEMA}},
    },
}
#: JSON Schema of a ``user.message`` frame, as published in the OpenAPI spec.
MESSAGE_IN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "payload"],
    "properties": {
        "v": {"type": "integer", "enum": [1]},
        "type": {"type": "string", "enum": ["user.message"]},
        "session": {
            "type": "string",
            "pattern": r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$",
            "maxLength": limits.TETHER_MAX_ID_CHARS,
        },
        "msg_id": {
            "type": "string",
            "pattern": r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$",
            "maxLength": limits.TETHER_MAX_ID_CHARS,
        },
        "ts": {"type": "string"},
        "payload": {
            "type": "object",
            "required": ["text"],
            "properties": {
                "text": {"type": "string"},
                "images": {
                    "type": "array",
                    "items": _IMAGE_SCHEMA,
                    "maxItems": limits.TETHER_MAX_IMAGES_PER_MESSAGE,
                },
                "user": {"type": ["object", "null"]},
            },
        },
    },
}


#: What ingress takes: a message, or the stop of one.
FRAME_IN_SCHEMA: dict[str, Any] = {"oneOf": [MESSAGE_IN_SCHEMA, CANCEL_IN_SCHEMA]}


#: What a create request can never give for an MCP server: a program to start, or
#: secrets to keep. The operator configures such servers; a request names them.
_OPERATOR_ONLY = ("command", "args", "env", "headers")


class McpServerIn(BaseModel):
    """An MCP server the instance's agent mounts (tools ``NAME__TOOL``): one the
    operator configured, by ``name``, or (when the operator allows it) an https ``url``."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
    url: str | None = Field(
        None,
        description="streamable-HTTP endpoint of a server of the client's own (only when "
        "the server's operator set [mcp] allow_client_urls)",
    )

    @model_validator(mode="before")
    @classmethod
    def _operator_only(cls, data: Any) -> Any:
        if isinstance(data, dict):
            given = [k for k in _OPERATOR_ONLY if k in data]
            if given:
                raise PydanticCustomError(
                    FORBIDDEN,
                    "a create request cannot give {given}: name an MCP server the "
                    "operator configured (visus serve --mcp, [[mcp.servers]])",
                    {"given": ", ".join(given)},
                )
        return data


#: A session (or message) id as a query parameter: what frames.py takes in a frame.
SESSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$"


class InstanceCreate(BaseModel):
    # A misspelt field ("root") is refused, not dropped: dropped, it would give the
    # instance every root the operator allows instead of the one the client meant.
    model_config = ConfigDict(extra="forbid")
    # Bounded so a request cannot make the server hold, store and echo megabytes.
    model: str = Field(
        min_length=1, max_length=200, pattern=r"\S", description="catalog id of the model"
    )
    tools: list[Annotated[str, Field(max_length=200)]] | None = Field(
        None, max_length=64, description="tool names; null: the agent's defaults"
    )
    # No NUL: no path holds one (the policy's resolve raised ValueError, a 500).
    roots: list[Annotated[str, Field(pattern="^/[^\x00]*$", max_length=4096)]] | None = Field(
        None,
        max_length=64,
        description="absolute folders the tools may reach, each inside a root the server "
        "allows (null: all of those)",
    )
    mcp_servers: list[McpServerIn] | None = Field(
        None,
        max_length=16,
        description="MCP servers to mount as tools NAME__TOOL (null: every one the server's "
        "operator configured)",
    )


class InstanceOut(BaseModel):
    id: str
    model: str
    tools: list[str] | None
    roots: list[str] = Field(
        description="the folders the instance's tools reach: those its create request "
        "named, else every root the server's operator allows"
    )
    created: str
    last_seq: int
    frames: int
    pending: int


class InstanceList(BaseModel):
    instances: list[InstanceOut]


class Accepted(BaseModel):
    seq: int
    msg_id: str
    session: str


class FrameOut(BaseModel):
    v: int
    type: str
    ts: str
    session: str
    seq: int
    msg_id: str
    #: The msg_id of the user.message this frame answers (server frames only).
    reply_to: str | None = None
    payload: dict[str, Any]


class PollOut(BaseModel):
    frames: list[FrameOut]
    next_seq: int
    gap: bool
    #: More frames wait after next_seq (the answer stopped at limit or max_bytes).
    more: bool = False


class ErrorDetail(BaseModel):
    code: str
    message: str
    field: str | None = None
    limit: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail
