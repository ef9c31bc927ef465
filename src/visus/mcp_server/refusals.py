"""Every MCP tool's failure in one shape: an ``isError`` result whose text is visus's
JSON refusal ``{"ok": false, "reason", "message", "field"?}``.

``view`` answers its own refusals that way (:mod:`visus.mcp_server.view`). Everything
else goes through :class:`RefusingServer`, the SDK's ``MCPServer`` with ``call_tool``
answering: arguments that fail a tool's schema (a required one missing, a wrong
type; the SDK's answer was pydantic's multi-line dump with a link to its docs), an
argument the tool does not take, an unknown tool, a tool's :class:`Refused`, and a
crash (its text stays in the server's log). Every MCP server visus ships is one:
``visus mcp``, ``visus serve``'s ``/mcp`` and ``visus proxy``'s ``/mcp``.

Example:
    >>> refusal_result("not_found", "no instance 'i-x'").content[0].text
    '{"ok": false, "reason": "not_found", "message": "no instance \\'i-x\\'"}'
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, InputRequiredResult, TextContent
from pydantic import ValidationError

from visus import limits
from visus.errors import (
    AnalyzeError,
    BlockedURLError,
    BusyError,
    InvalidInputError,
    LimitError,
    NotFoundError,
    PolicyError,
    ReachError,
    TooLargeError,
    UndecodableError,
    UnsupportedTypeError,
    VisusError,
)
from visus.telemetry import seams
from visus.telemetry.names import ERROR_TYPE

__all__ = ["Refused", "RefusingServer", "path_too_long", "reason_of", "refusal_result"]

log = logging.getLogger(__name__)

#: The server's lifespan state, as the SDK's ``MCPServer`` is generic over it.
_State = TypeVar("_State")

#: Longest repr of a client's value a message quotes (a hostile one can be megabytes).
_SHOWN = 60
#: Schema errors a message names at most (the rest are counted).
_NAMED_ERRORS = 3

#: A visus error's class -> the refusal reason, first match wins (subclasses first).
_REASONS: tuple[tuple[type[VisusError], str], ...] = (
    (NotFoundError, "not_found"),
    (ReachError, "outside_reach"),
    (BlockedURLError, "outside_reach"),
    (PolicyError, "forbidden"),
    (BusyError, "busy"),
    (TooLargeError, "too_large"),
    (LimitError, "too_large"),
    (UndecodableError, "undecodable"),
    (UnsupportedTypeError, "unsupported_type"),
    (InvalidInputError, "invalid_input"),
)


class Refused(ToolError):
    """A tool's refusal: ``reason`` (lower-case, as ``view``'s) and the message.

    Example:
        >>> e = Refused("invalid_input", "images: at most 4", field="images")
        >>> e.reason, str(e), e.field
        ('invalid_input', 'images: at most 4', 'images')
    """

    def __init__(self, reason: str, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.field = field


def reason_of(e: VisusError) -> str:
    """The refusal reason for a visus error: ``view``'s words where they fit, an
    analyze error's code in lower case, else ``failed``.

    Example:
        >>> reason_of(NotFoundError("x")), reason_of(AnalyzeError("URL_BLOCKED", "x"))
        ('not_found', 'url_blocked')
    """
    if isinstance(e, AnalyzeError):
        return e.reason
    for kind, reason in _REASONS:
        if isinstance(e, kind):
            return reason
    return "failed"


def refusal_result(reason: str, message: str, field: str | None = None) -> CallToolResult:
    """The ``isError`` result holding one JSON refusal."""
    body: dict[str, Any] = {"ok": False, "reason": reason, "message": message}
    if field:
        body["field"] = field
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(body))], is_error=True)


def path_too_long(length: int) -> str:
    """The message for a path past ``MCP_MAX_PATH_CHARS`` (which does not quote it).

    Example:
        >>> path_too_long(100_000)
        'path: 100000 characters, longer than any path (MCP_MAX_PATH_CHARS, 4096)'
    """
    bound = limits.MCP_MAX_PATH_CHARS
    return f"path: {length} characters, longer than any path (MCP_MAX_PATH_CHARS, {bound})"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _argument_errors(tool: str, exc: ValidationError) -> CallToolResult:
    """A schema failure as one short message naming each argument at fault.

    Example:
        >>> from pydantic import BaseModel
        >>> class A(BaseModel):
        ...     instance: str
        ...     wait_ms: int = 0
        >>> try:
        ...     A.model_validate({"wait_ms": "soon"})
        ... except ValidationError as e:
        ...     print(json.loads(_argument_errors("tether_read", e).content[0].text)["message"])
        tether_read: instance is required; wait_ms: Input should be a valid integer, unable to parse string as an integer (got 'soon')
    """  # noqa: E501
    errors = exc.errors(include_url=False)
    said: list[str] = []
    for err in errors[:_NAMED_ERRORS]:
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        if err["type"] == "missing":
            said.append(f"{where} is required")
        else:
            said.append(f"{where}: {err['msg']} (got {_shown(err.get('input'))})")
    if len(errors) > _NAMED_ERRORS:
        said.append(f"{len(errors) - _NAMED_ERRORS} more")
    first = ".".join(str(p) for p in errors[0]["loc"]) if errors else None
    return refusal_result("invalid_input", f"{tool}: " + "; ".join(said), first)


class RefusingServer(MCPServer[_State], Generic[_State]):
    """``MCPServer`` whose every failed call is a JSON refusal (see the module)."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Any = None
    ) -> CallToolResult | InputRequiredResult:
        """The tool's result, or a refusal: an unknown tool ``not_found``, an unknown
        or malformed argument ``invalid_input`` naming it, a tool's :class:`Refused`
        its own reason, a crash ``internal_error``."""
        listed = {t.name: t.input_schema for t in await self.list_tools()}
        if name not in listed:
            names = ", ".join(sorted(listed))
            return refusal_result("not_found", f"no tool named {_shown(name)} (tools: {names})")
        unknown = _unknown_arguments(name, arguments, listed[name])
        if unknown is not None:
            return unknown
        with seams.tool_call(name, None, arguments) as traced:
            result = await self._answer(name, arguments, context)
            if isinstance(result, CallToolResult) and result.is_error:
                traced.set({ERROR_TYPE: "tool_error"})
            return result

    async def _answer(
        self, name: str, arguments: dict[str, Any], context: Any
    ) -> CallToolResult | InputRequiredResult:
        """The SDK's call of a known tool, its failures as refusals."""
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            log.exception("MCP tool %r failed unexpectedly", name)
            message = f"{name} failed unexpectedly; the server's log has the details"
            return refusal_result("internal_error", message)
        except ToolError as e:
            cause = e.__cause__
            if isinstance(cause, ValidationError):
                return _argument_errors(name, cause)
            if isinstance(cause, Refused):
                return refusal_result(cause.reason, cause.message, cause.field)
            return refusal_result("failed", str(cause or e))


def _unknown_arguments(
    tool: str, arguments: Mapping[str, Any], schema: Mapping[str, Any]
) -> CallToolResult | None:
    """A refusal naming the arguments the tool does not take (a misspelt ``session_id``
    would otherwise be dropped in silence), or None."""
    taken = schema.get("properties", {})
    unknown = sorted(str(k) for k in arguments if k not in taken)
    if not unknown:
        return None
    names = ", ".join(map(_shown, unknown[:_NAMED_ERRORS]))
    takes = ", ".join(sorted(taken)) or "none"
    message = f"{tool}: unknown argument {names}; it takes {takes}"
    return refusal_result("invalid_input", message, unknown[0][:_SHOWN])
