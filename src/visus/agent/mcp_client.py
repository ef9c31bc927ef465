"""Mounted MCP servers: another program's tools as the agent's own, ``NAME__TOOL``.

An :class:`McpServerSpec` names a server: a stdio command (``command``, ``args``,
``env``) or a streamable-HTTP ``url`` (with ``headers``). :class:`McpMounts` keeps one
long-lived client session per server (the official ``mcp`` SDK's ``Client``), started
on the agent's first turn in the agent's own event loop and closed by
``Agent.aclose``. Each server tool becomes a :class:`~visus.agent.tools.Tool` named
``NAME__TOOL`` with the server's JSON schema; its result maps into the record:

- text content -> text parts; ``structuredContent`` alone -> its JSON as text;
- image content -> fitted to the model, stored as a blob, an image part (re-viewable
  by ``view("sha256:...")`` once retention elides it);
- embedded resources -> their text (a text/JSON/XML blob decoded), or an image part
  for an image blob, or a note;
  resource links -> a note, or for an image the resource read and shown;
- ``isError`` -> an error tool result.

Failure is always a tool error or a startup warning, never a crash: a server that
does not start is skipped with a warning (in the first turn's ``notes`` and the
log); a crash, a hang past ``timeout`` (``limits.MCP_CLIENT_CALL_SECONDS``) or a
malformed or oversized answer becomes ``error: ...`` the model reads. A stdio
server's stderr goes to ``<log_dir>/mcp-NAME.log``, never the user's terminal.

Example:
    >>> spec = McpServerSpec.parse("everything=npx -y @modelcontextprotocol/server-everything")
    >>> spec.name, spec.command, spec.args
    ('everything', 'npx', ('-y', '@modelcontextprotocol/server-everything'))
    >>> McpServerSpec.parse("docs=https://example.com/mcp").url
    'https://example.com/mcp'
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import os
import re
import shlex
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from visus import limits
from visus.agent.changed import with_changes
from visus.agent.tools import Tool, ToolContext, ToolOutcome
from visus.errors import ConfigError, InvalidInputError, McpServerError, MediaError
from visus.media import fit
from visus.net import CheckedURL, acheck_url
from visus.paths import private_dir
from visus.record.messages import ImagePart, Part, PerceptionOrigin, TextPart, ToolSpec
from visus.telemetry import seams

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import CallToolResult, ContentBlock

    from visus.config import McpServerEntry

__all__ = ["McpMounts", "McpServerSpec", "expand_env", "server_environment"]

log = logging.getLogger(__name__)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")
#: Provider tool names: OpenAI and Bedrock take ``[A-Za-z0-9_-]{1,64}``.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_DESCRIPTION = 1024
_APPEND_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    """One MCP server to mount: a stdio ``command`` or a streamable-HTTP ``url``."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float = limits.MCP_CLIENT_CALL_SECONDS
    #: Named by a remote client (a tether create request): the URL must pass
    #: :func:`visus.net.acheck_url` (https, public addresses) before it is connected,
    #: and is connected at the addresses checked (:mod:`visus.agent.pinned_http`).
    public_only: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name) or "__" in self.name:
            raise InvalidInputError(
                f"MCP server name {self.name!r}: use letters, digits, '-' or '_' (at most 32, "
                "no '__')"
            )
        if (self.command is None) == (self.url is None):
            raise InvalidInputError(f"MCP server {self.name!r}: give a command or a URL")
        if self.url is not None and not self.url.startswith(("https://", "http://")):
            raise InvalidInputError(f"MCP server {self.name!r}: {self.url!r} is not an http URL")
        if self.timeout <= 0:
            raise InvalidInputError(f"MCP server {self.name!r}: timeout must be positive")

    @classmethod
    def parse(cls, flag: str) -> McpServerSpec:
        """``NAME=COMMAND ARGS...`` (split like a shell) or ``NAME=https://...``."""
        name, sep, rest = flag.partition("=")
        rest = rest.strip()
        if not sep or not rest:
            raise InvalidInputError(f"--mcp {flag!r}: expected NAME=COMMAND ARGS... or NAME=URL")
        if rest.startswith(("https://", "http://")):
            return cls(name=name.strip(), url=rest)
        try:
            words = shlex.split(rest)
        except ValueError as e:
            raise InvalidInputError(f"--mcp {flag!r}: {e}") from e
        return cls(name=name.strip(), command=words[0], args=tuple(words[1:]))

    @classmethod
    def from_settings(
        cls, entry: McpServerEntry, environ: Mapping[str, str] | None = None
    ) -> McpServerSpec:
        """A ``[[mcp.servers]]`` entry of ``visus.toml``, its ``headers`` and ``env``
        values with each ``${NAME}`` read from the environment (``environ``, default
        ``os.environ``), once, here: a config names a secret instead of holding it."""
        where = f"[[mcp.servers]] {entry.name!r}"
        return cls(
            name=entry.name,
            command=entry.command,
            args=tuple(entry.args),
            env=expand_env(entry.env, f"{where} env", environ),
            url=entry.url,
            headers=expand_env(entry.headers, f"{where} headers", environ),
            timeout=entry.timeout_seconds,
        )

    def describe(self) -> str:
        if self.url is not None:
            return self.url
        return shlex.join([self.command or "", *self.args])


#: What a process needs from visus's environment to start and read its text, besides
#: the MCP SDK's own list (``HOME``, ``LOGNAME``, ``PATH``, ``SHELL``, ``TERM``,
#: ``USER``): the locale and where temporary files go.
_START_VARIABLES = ("LANG", "LC_ALL", "LC_CTYPE", "TMPDIR")


def server_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables a stdio MCP server gets on top of the SDK's safe defaults: the
    locale and ``TMPDIR``, then what the operator listed (``env``). Never the rest of
    visus's environment: a server configured with ``env`` got all of it, provider keys
    included.

    Example:
        >>> server_environment({"DOCS_TOKEN": "t"})["DOCS_TOKEN"]
        't'
        >>> set(server_environment({})) <= {"LANG", "LC_ALL", "LC_CTYPE", "TMPDIR"}
        True
    """
    started = {k: os.environ[k] for k in _START_VARIABLES if k in os.environ}
    return {**started, **env}


#: ``${NAME}`` in a ``[[mcp.servers]]`` header or env value: an environment variable.
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env(
    values: Mapping[str, str], where: str, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``values`` with each ``${NAME}`` replaced by the environment variable ``NAME``;
    one that is not set is a :class:`~visus.errors.ConfigError` naming it.

    Example:
        >>> env = {"DOCS_TOKEN": "s3cret"}
        >>> expand_env({"Authorization": "Bearer ${DOCS_TOKEN}"}, "docs headers", env)
        {'Authorization': 'Bearer s3cret'}
        >>> expand_env({"Authorization": "Bearer ${NOPE}"}, "docs headers", env)
        Traceback (most recent call last):
        ...
        visus.errors.ConfigError: docs headers.Authorization: ${NOPE} is not set in the environment
    """
    env = os.environ if environ is None else environ

    def one(key: str, value: str) -> str:
        def lookup(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in env:
                raise ConfigError(f"{where}.{key}: ${{{name}}} is not set in the environment")
            return env[name]

        return _ENV_REF.sub(lookup, value)

    return {key: one(key, value) for key, value in values.items()}


class _Connection:
    """One server's client session, owned by one background task.

    The SDK's transports hold cancel scopes that must be entered and left by the same
    task, so a task of its own opens the client, reports ready and waits for ``close``;
    tool calls from any task of the same loop go through the open session.
    """

    def __init__(self, spec: McpServerSpec, log_dir: Path | None) -> None:
        self.spec = spec
        self.log_dir = log_dir
        self.client: Client | None = None
        self.tools: list[Any] = []
        self.error: str | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._errlog: TextIO | None = None
        #: The last HTTP error status the server answered (streamable HTTP): the SDK
        #: turns a 401 or 403 into "Server returned an error response" and drops it.
        self.http_error: str | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"mcp-{self.spec.name}")
        try:
            await asyncio.wait_for(self._ready.wait(), limits.MCP_CLIENT_START_SECONDS)
        except TimeoutError:
            self.error = f"did not start within {limits.MCP_CLIENT_START_SECONDS:g} s"
            await self.aclose()

    def _transport(self, checked: CheckedURL | None) -> Any:
        """The SDK transport; an HTTP one connects only to ``checked``'s addresses when
        the URL was checked (a client's), so the name is not resolved a second time."""
        from mcp.client.stdio import StdioServerParameters, stdio_client

        spec = self.spec
        if spec.url is not None:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            from visus.agent.pinned_http import pinned_client

            async def note_status(response: httpx2.Response) -> None:
                # POSTs only: a 405 to the SDK's optional GET stream is no failure.
                if response.status_code >= 400 and response.request.method == "POST":
                    self.http_error = f"HTTP {response.status_code} {response.reason_phrase}"

            hooks = {"response": [note_status]}
            if checked is not None:
                http = pinned_client(
                    checked, headers=spec.headers, timeout=spec.timeout, event_hooks=hooks
                )
            else:
                http = httpx2.AsyncClient(
                    headers=dict(spec.headers), timeout=spec.timeout, event_hooks=hooks
                )
            return _owning(http, streamable_http_client(spec.url, http_client=http))
        params = StdioServerParameters(
            command=spec.command or "", args=list(spec.args), env=server_environment(spec.env)
        )
        self._errlog = self._open_log()
        return stdio_client(params, errlog=self._errlog)

    def _open_log(self) -> TextIO:
        if self.log_dir is None:
            return open(os.devnull, "w")
        private_dir(self.log_dir)
        # The owner's only: a server's stderr may echo what its tools were given.
        fd = os.open(self.log_dir / f"mcp-{self.spec.name}.log", _APPEND_FLAGS, 0o600)
        return open(fd, "a", encoding="utf-8")

    async def _run(self) -> None:
        from mcp import Client

        try:
            checked = None
            if self.spec.public_only and self.spec.url is not None:
                checked = await acheck_url(self.spec.url)
            async with Client(self._transport(checked), mode="legacy") as client:
                self.tools = await _list_tools(client)
                self.client = client
                self._ready.set()
                await self._stop.wait()
        except Exception as e:  # a server that cannot start is a warning, not a crash
            self.error = self._with_status(_why(e))
        finally:
            self.client = None
            if self.error is None and not self._stop.is_set():
                self.error = "the server closed the connection"
            self._ready.set()
            if self._errlog is not None:
                self._errlog.close()

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> CallToolResult:
        client = self.client
        if client is None:
            raise McpServerError(
                f"MCP server {self.spec.name!r} is not running ({self.error or 'stopped'})"
            )
        self.http_error = None
        try:
            return await asyncio.wait_for(
                client.call_tool(tool, dict(arguments)), timeout=self.spec.timeout
            )
        except TimeoutError as e:
            raise McpServerError(
                f"MCP server {self.spec.name!r} did not answer {tool} within "
                f"{self.spec.timeout:g} s"
            ) from e
        except Exception as e:  # crash, protocol error, malformed reply
            if _closed(e):  # the server is gone: say so now and on every later call
                self.error = f"it stopped during {tool} (exit or closed connection)"
                self.client = None
                self._stop.set()
                raise McpServerError(f"MCP server {self.spec.name!r} {self.error}") from e
            raise McpServerError(
                f"MCP server {self.spec.name!r} failed {tool}: {self._with_status(_why(e))}"
            ) from e

    def _with_status(self, why: str) -> str:
        """``why`` with the HTTP status the server answered last, if it was an error."""
        status, self.http_error = self.http_error, None
        if status is None:
            return why
        hint = " (check the headers, e.g. Authorization)" if status[5:8] in ("401", "403") else ""
        return f"{why}: the server answered {status}{hint}"

    async def aclose(self) -> None:
        self._stop.set()
        task = self._task
        if task is None or task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), limits.MCP_CLIENT_START_SECONDS)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


@contextlib.asynccontextmanager
async def _owning(http: Any, transport: Any) -> AsyncIterator[Any]:
    """``transport``'s streams, closing ``http`` after it: the SDK leaves a client it
    was handed open (its connections, an SSE stream, would outlive the session)."""
    async with http, transport as streams:
        yield streams


async def _list_tools(client: Client) -> list[Any]:
    tools: list[Any] = []
    cursor: str | None = None
    for _ in range(limits.MCP_CLIENT_MAX_TOOLS):  # a paginator that never ends cannot hang
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor or len(tools) >= limits.MCP_CLIENT_MAX_TOOLS:
            break
    return tools[: limits.MCP_CLIENT_MAX_TOOLS]


def _closed(e: BaseException) -> bool:
    """Whether ``e`` says the connection to the server is gone for good."""
    import anyio
    from mcp.shared.exceptions import MCPError
    from mcp.types import CONNECTION_CLOSED

    if isinstance(e, MCPError):
        return e.error.code == CONNECTION_CLOSED
    return isinstance(e, anyio.ClosedResourceError | anyio.BrokenResourceError | EOFError)


def _why(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(_why(x) for x in e.exceptions)
    if isinstance(e, FileNotFoundError):
        return f"command not found: {e.filename or e}"
    text = str(e).strip()
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class McpMounts:
    """The MCP servers one agent mounts; started once, on the agent's first turn.

    Example:
        >>> mounts = McpMounts([McpServerSpec.parse("e=npx server-everything")])
        >>> [s.name for s in mounts.specs]
        ['e']
    """

    def __init__(self, specs: Iterable[McpServerSpec], *, log_dir: Path | None = None) -> None:
        self.specs = list(specs)
        names = [s.name for s in self.specs]
        if len(set(names)) != len(names):
            raise InvalidInputError(f"MCP server names must be unique: {names}")
        self.log_dir = log_dir
        self._connections: list[_Connection] = []
        self._started = False
        self._lock: asyncio.Lock | None = None

    async def start(self, add: Any) -> list[str]:
        """Connect every server (concurrently) and ``add`` a Tool per server tool.

        Returns the warnings (servers that did not start, tools skipped), once: later
        calls return ``[]``.
        """
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._started:
                return []
            self._started = True
            self._connections = [_Connection(s, self.log_dir) for s in self.specs]
            await asyncio.gather(*(c.start() for c in self._connections))
            warnings: list[str] = []
            for conn in self._connections:
                if conn.client is None:
                    warnings.append(
                        f"MCP server {conn.spec.name!r} ({conn.spec.describe()}) did not start: "
                        f"{conn.error}; its tools are not available"
                    )
                    continue
                for tool in conn.tools:
                    made = _tool(conn, tool)
                    if isinstance(made, str):
                        warnings.append(made)
                    else:
                        add(made)
            for w in warnings:
                log.warning("%s", w)
            return warnings

    async def aclose(self) -> None:
        """Close every client session (and stop the stdio servers)."""
        await asyncio.gather(*(c.aclose() for c in self._connections))


def _tool(conn: _Connection, tool: Any) -> Tool | str:
    name = f"{conn.spec.name}__{tool.name}"
    if not _TOOL_NAME.fullmatch(name):
        return (
            f"MCP tool {tool.name!r} of {conn.spec.name!r} skipped: {name!r} is not a valid "
            "tool name"
        )
    schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
    schema = {"type": "object", "properties": {}, **schema}
    description = (tool.description or tool.title or f"{tool.name} from {conn.spec.name}").strip()
    description = f"[MCP {conn.spec.name}] {description}"[:_MAX_DESCRIPTION]
    remote = tool.name

    async def run(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        result = await conn.call(remote, args)
        return await result_outcome(result, ctx, conn=conn, tool=name)

    # The server's own hint: a read-only tool may run again when a turn is resumed.
    read_only = getattr(tool.annotations, "readOnlyHint", None) is True
    spec = ToolSpec(name=name, description=description, parameters=schema)
    return Tool(spec, run, read_only=read_only)


async def result_outcome(
    result: CallToolResult, ctx: ToolContext, *, conn: _Connection | None, tool: str
) -> ToolOutcome:
    """An MCP tool result as record parts (text, fitted images as blobs, notes)."""
    parts: list[Part] = []
    budget = _Budget()
    for block in result.content[: limits.MCP_CLIENT_MAX_IMAGES * 8]:
        parts.extend(await _block_parts(block, ctx, conn, budget, tool))
    if len(result.content) > limits.MCP_CLIENT_MAX_IMAGES * 8:
        parts.append(TextPart(f"[{len(result.content)} content items; the rest omitted]"))
    if not result.content and result.structured_content is not None:
        parts.append(TextPart(budget.text(json.dumps(result.structured_content, default=str))))
    if not parts:
        parts.append(TextPart("(the tool returned no content)"))
    return ToolOutcome(tuple(parts), is_error=bool(result.is_error))


@dataclass
class _Budget:
    chars: int = 0
    images: int = 0

    def text(self, text: str) -> str:
        room = limits.MCP_CLIENT_MAX_TEXT_CHARS - self.chars
        if room <= 0:
            return "[text omitted: the result is over MCP_CLIENT_MAX_TEXT_CHARS]"
        self.chars += min(len(text), room)
        if len(text) > room:
            return f"{text[:room]}… [clipped {len(text) - room} chars]"
        return text


async def _block_parts(
    block: ContentBlock, ctx: ToolContext, conn: _Connection | None, budget: _Budget, tool: str
) -> list[Part]:
    kind = getattr(block, "type", None)
    if kind == "text":
        return [TextPart(budget.text(str(getattr(block, "text", ""))))]
    # Images are fitted (CPU) and stored (the blob store may be a database): off the loop.
    if kind == "image":
        data, mime = getattr(block, "data", ""), getattr(block, "mime_type", "")
        return [await asyncio.to_thread(_image_part, data, mime, ctx, budget)]
    if kind == "audio":
        return [
            TextPart(
                f"[audio ({getattr(block, 'mime_type', '?')}) omitted: not shown to the model]"
            )
        ]
    if kind == "resource":
        resource = getattr(block, "resource", None)
        return [await asyncio.to_thread(_resource_part, resource, ctx, budget)]
    if kind == "resource_link":
        return [await _link_part(block, ctx, conn, budget)]
    return [TextPart(f"[{kind or 'unknown'} content from {tool} omitted]")]


def _image_part(data: object, mime: object, ctx: ToolContext, budget: _Budget) -> Part:
    if budget.images >= limits.MCP_CLIENT_MAX_IMAGES:
        return TextPart(
            f"[image omitted: over MCP_CLIENT_MAX_IMAGES ({limits.MCP_CLIENT_MAX_IMAGES})]"
        )
    if not isinstance(data, str | bytes):
        return TextPart("[image omitted: no data]")
    size = len(data) * 3 // 4  # checked before decoding: an oversized answer costs nothing
    if size > limits.MCP_CLIENT_MAX_IMAGE_BYTES:
        return TextPart(
            f"[image omitted: about {size} bytes, over MCP_CLIENT_MAX_IMAGE_BYTES "
            f"({limits.MCP_CLIENT_MAX_IMAGE_BYTES})]"
        )
    try:
        # Line-wrapped base64 (MIME style, 76 columns) is still base64: strip the breaks.
        text = data if isinstance(data, bytes) else "".join(data.split())
        raw = text if isinstance(text, bytes) else base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return TextPart(f"[image omitted: its data ({mime}) is not valid base64]")
    return _stored_image(raw, str(mime), ctx, budget)


def _stored_image(raw: bytes, mime: str, ctx: ToolContext, budget: _Budget) -> Part:
    if not ctx.model.vision:
        return TextPart(f"[image ({mime}, {len(raw)} bytes) omitted: {ctx.model.name} cannot see]")
    try:
        # A PNG with a damaged colour profile or note is repaired by media itself.
        fitted = fit(raw, ctx.model.profile())
    except MediaError as e:
        return TextPart(f"[image ({mime}) omitted: {e}]")
    budget.images += 1
    seams.fitted((fitted.width, fitted.height), (fitted.source_width, fitted.source_height))
    digest = ctx.blobs.put(fitted.data, fitted.media_type)
    image = ImagePart(
        digest=digest,
        media_type=fitted.media_type,
        size=fitted.size,
        width=fitted.width,
        height=fitted.height,
        origin=PerceptionOrigin(source=f"sha256:{digest}"),
    )
    # A browser tool's next screenshot: only what changed, while the last one is live.
    return with_changes(image, fitted.data, ctx.record, ctx.blobs)


def _textual(mime: str) -> bool:
    """Whether a resource of media type ``mime`` is text (text/*, JSON, XML, YAML)."""
    kind = mime.split(";", 1)[0].strip().lower()
    return kind.startswith("text/") or kind.endswith(("/json", "+json", "/xml", "+xml", "yaml"))


def _resource_part(resource: object, ctx: ToolContext, budget: _Budget) -> Part:
    uri = str(getattr(resource, "uri", "?"))
    mime = getattr(resource, "mime_type", None) or ""
    text = getattr(resource, "text", None)
    if isinstance(text, str):
        return TextPart(budget.text(f"[resource {uri}]\n{text}"))
    blob = getattr(resource, "blob", None)
    if isinstance(blob, str) and mime.startswith("image/"):
        return _image_part(blob, mime, ctx, budget)
    if isinstance(blob, str) and _textual(mime):
        # Servers send text files as base64 blobs too (server-everything's blob
        # resources are text/plain): the model reads them as it reads text resources.
        try:
            decoded = base64.b64decode("".join(blob.split()), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
            return TextPart(f"[resource {uri} ({mime}) not shown: not base64 of UTF-8 text]")
        return TextPart(budget.text(f"[resource {uri}]\n{decoded}"))
    size = len(blob) * 3 // 4 if isinstance(blob, str) else 0
    return TextPart(f"[resource {uri} ({mime or 'binary'}, about {size} bytes) not shown]")


async def _link_part(
    block: Any, ctx: ToolContext, conn: _Connection | None, budget: _Budget
) -> Part:
    uri, mime = str(block.uri), block.mime_type or ""
    note = f"[resource link: {block.name} {uri}" + (f" ({mime})" if mime else "") + "]"
    if not mime.startswith("image/") or conn is None or conn.client is None:
        return TextPart(note)
    try:
        read = await asyncio.wait_for(conn.client.read_resource(uri), timeout=conn.spec.timeout)
    except Exception as e:
        return TextPart(f"{note} (could not be read: {_why(e)})")
    for contents in read.contents:
        blob = getattr(contents, "blob", None)
        if isinstance(blob, str):
            return await asyncio.to_thread(_image_part, blob, mime, ctx, budget)
    return TextPart(note)
