"""The tool registry and the built-in tools: read, view, edit, send_image.

A tool is a value (:class:`Tool`) pairing the :class:`ToolSpec` the model sees with
an async function that takes decoded JSON arguments and a :class:`ToolContext` and
returns a :class:`ToolOutcome` (parts for the record). Bad input never escapes as an
exception: a tool raises :class:`~visus.errors.VisusError` (a bad argument, a missing
file) and :meth:`ToolRegistry.call` answers with the error outcome the model reads.

Example:
    >>> reg = ToolRegistry.builtin()
    >>> sorted(reg.names())[:3]
    ['edit', 'read', 'send_image']
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import stat
import tempfile
from collections import OrderedDict
from collections.abc import (
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    MutableMapping,
    Sequence,
)
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from visus import limits
from visus.agent import pinned_folder
from visus.agent.changed import with_changes
from visus.agent.pinned_folder import PinnedFolder
from visus.errors import (
    InvalidInputError,
    NetError,
    ReachError,
    UnsupportedTypeError,
    VisusError,
)
from visus.media import load, offload, probe
from visus.media.types import Fitted, Profile, Region
from visus.models import ModelSpec
from visus.models.allowed import AllowedModels
from visus.net import afetch
from visus.perception import (
    Perception,
    Reach,
    Refusal,
    as_region,
    fetch_refusal,
    is_digest_ref,
    read,
    refusal_from,
    view,
    view_digest,
)
from visus.record.blobs import BlobStore
from visus.record.messages import (
    DocumentPart,
    ImagePart,
    Message,
    Part,
    PerceptionOrigin,
    TextPart,
    ToolSpec,
    Usage,
)
from visus.telemetry import seams

if TYPE_CHECKING:
    from visus.config import VisusConfig

__all__ = [
    "TOOL_USAGE_KEY",
    "MemoryResultCache",
    "OutboundImage",
    "ResultCache",
    "Tool",
    "ToolContext",
    "ToolOutcome",
    "ToolRegistry",
    "perception_parts",
    "short_digest",
]


#: What ``send_image`` fits outgoing images to: tether's per-image bound and formats.
OUTBOUND_PROFILE = Profile(
    max_edge=limits.OUTBOUND_MAX_EDGE,
    max_pixels=limits.OUTBOUND_MAX_EDGE**2,
    max_bytes=limits.TETHER_MAX_IMAGE_BYTES,
    media_types=limits.TETHER_MEDIA_TYPES,
)

#: Kept for callers that named the field by string; it is ``ToolContext.tool_usage``.
TOOL_USAGE_KEY = "tool_usage"


class ResultCache(Protocol):
    """Where a tool remembers answers it paid for (``vision_analyze``): JSON-able
    mappings by hex key. ``visus.analyze.cache`` has memory and file stores."""

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: Mapping[str, Any]) -> None: ...


class MemoryResultCache:
    """The agent's default :class:`ResultCache`: the last ``size`` answers, in memory.

    Example:
        >>> c = MemoryResultCache(size=1)
        >>> c.put("a", {"text": "x"}); c.put("b", {"text": "y"}); c.get("a") is None
        True
    """

    def __init__(self, size: int = limits.ANALYZE_CACHE_MAX_ENTRIES) -> None:
        self._size = size
        self._items: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def get(self, key: str) -> dict[str, Any] | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return None if value is None else dict(value)

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        self._items[key] = dict(value)
        self._items.move_to_end(key)
        while len(self._items) > self._size:
            self._items.popitem(last=False)


@dataclass(frozen=True, slots=True)
class OutboundImage:
    """An image the agent sends out of the turn (e.g. to tether's ``assistant.done``)."""

    media_type: str
    data: bytes
    source: str = ""


@dataclass(slots=True)
class ToolContext:
    """What a tool may touch during one turn.

    ``read_digests`` maps a resolved path to the sha256 of its content when the
    ``read`` tool last returned it: ``edit`` requires the file to be unchanged since.
    A ``view`` never records here (seeing is not reading). ``record`` is the
    session's messages so far: ``view("sha256:...")`` reaches only their images.
    """

    reach: Reach
    model: ModelSpec
    blobs: BlobStore
    session_id: str = ""
    turn: int = 1
    read_digests: MutableMapping[str, str] = field(default_factory=dict)
    outbox: list[OutboundImage] = field(default_factory=list)
    #: What tools spent on models themselves (vision_analyze); the loop bills it.
    tool_usage: list[Usage] = field(default_factory=list)
    #: The agent's configuration (``build_agent(config=...)``); None: load visus.toml.
    config: VisusConfig | None = None
    #: The agent's cache of analyze answers (kept across turns); None: no caching.
    result_cache: ResultCache | None = None
    #: Let URL tools fetch plain http from loopback (tests, local setups).
    allow_loopback_http: bool = False
    #: The models a tool may be asked for (vision_analyze's ``model``); None: any.
    models: AllowedModels | None = None
    record: Sequence[Message] = ()

    def record_digests(self) -> Iterator[str]:
        """The digest of every image and document in this session's record."""
        for message in self.record:
            if message.kind == "assistant":
                continue
            for part in message.parts:
                if isinstance(part, ImagePart | DocumentPart):
                    yield part.digest


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    parts: tuple[Part, ...]
    is_error: bool = False

    @staticmethod
    def text(text: str, *, is_error: bool = False) -> ToolOutcome:
        return ToolOutcome((TextPart(text),), is_error)

    @staticmethod
    def refused(r: Refusal) -> ToolOutcome:
        """A perception refusal as the error outcome the model reads."""
        return ToolOutcome.text(f"refused ({r.reason}): {r.message}", is_error=True)


ToolFn = Callable[[Mapping[str, Any], ToolContext], Awaitable[ToolOutcome]]


@dataclass(frozen=True, slots=True)
class Tool:
    spec: ToolSpec
    run: ToolFn
    #: The tool only reads (view, read, analyze, send_image...): running a call again
    #: changes nothing outside the turn. A turn another replica finishes re-runs such a
    #: call when its result was never recorded, and refuses to re-run any other.
    read_only: bool = False

    @property
    def name(self) -> str:
        return self.spec.name


class ToolRegistry:
    """Tools by name, in the order they were added (the order the model sees)."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.add(t)

    def add(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(t.spec for t in self._tools.values())

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def only(self, names: Iterable[str]) -> ToolRegistry:
        wanted = set(names)
        return ToolRegistry(t for n, t in self._tools.items() if n in wanted)

    async def call(self, name: str, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            return ToolOutcome.text(
                f"error: no tool named {name!r} (tools: {known})", is_error=True
            )
        try:
            return await tool.run(args, ctx)
        except VisusError as e:
            return ToolOutcome.text(f"error: {e}", is_error=True)
        except OSError as e:  # the file system said no (permissions, a vanished file)
            return ToolOutcome.text(f"error: {e.strerror or e}", is_error=True)

    @staticmethod
    def builtin() -> ToolRegistry:
        return ToolRegistry([READ, VIEW, EDIT, SEND_IMAGE])


# --- helpers -----------------------------------------------------------------------


def _str_arg(args: Mapping[str, Any], key: str) -> str:
    value = args.get(key)
    if value is None:
        raise _ArgError(f"missing required argument {key!r}")
    if not isinstance(value, str):
        raise _ArgError(f"argument {key!r} must be a string")
    return value


def _region_arg(args: Mapping[str, Any]) -> Region | None:
    try:
        return as_region(args.get("region"))
    except InvalidInputError as e:
        raise _ArgError(str(e)) from None


def _int_arg(args: Mapping[str, Any], key: str) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _ArgError(f"argument {key!r} must be an integer")
    return value


class _ArgError(VisusError):
    """A tool argument of the wrong shape; :meth:`ToolRegistry.call` reports it to the
    model as an error result."""


def perception_parts(
    p: Perception, ctx: ToolContext, *, source: str, tool: str = "view", page: int | None = None
) -> tuple[Part, ...]:
    """Store a perception's pixels and return the parts a tool result carries: the
    perception's own line (source size, region, what was sent, how to zoom) and the image,
    whose origin is the call that brings the same view back."""
    digest = ctx.blobs.put(p.data, p.media_type)
    region = p.region
    shown = (p.source_width, p.source_height) if region is None else (region.width, region.height)
    seams.fitted((p.width, p.height), shown)
    image = ImagePart(
        digest=digest,
        media_type=p.media_type,
        size=len(p.data),
        width=p.width,
        height=p.height,
        origin=PerceptionOrigin(
            source=source,
            tool=tool,
            page=page,
            region=None if region is None else (region.x0, region.y0, region.x1, region.y1),
        ),
    )
    image = with_changes(image, p.data, ctx.record, ctx.blobs)
    # The digest names these very pixels (a path may show other ones later), and it is
    # the only digest the result names: once the image leaves, its descriptor names the
    # same one, so a reader cannot take another screen's digest for this one's.
    return (TextPart(f"{p.describe(source)}; {short_digest(digest)}"), image)


def short_digest(digest: str) -> str:
    """``sha256:`` and the first hex digits descriptors print too
    (``limits.DESCRIPTOR_DIGEST_CHARS``): what view text names an image by.

    Example:
        >>> short_digest("ab" * 32)
        'sha256:abababababababab'
    """
    return f"sha256:{digest[: limits.DESCRIPTOR_DIGEST_CHARS]}"


# --- read ----------------------------------------------------------------------------


async def _read(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
    path = _str_arg(args, "path")
    offset = _int_arg(args, "offset") or 0
    limit = _int_arg(args, "limit")
    result = read(path, reach=ctx.reach, offset=offset, limit=limit)
    if isinstance(result, Refusal):
        return ToolOutcome.refused(result)
    ctx.read_digests[str(result.path)] = result.content_digest
    return ToolOutcome.text(result.for_model())


READ = Tool(
    ToolSpec(
        name="read",
        description=(
            "Read a text file as text (with line numbers). Refuses images and binary files: "
            "use view to see those."
        ),
        parameters={
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path inside the allowed roots"},
                "offset": {"type": "integer", "minimum": 0, "description": "First line, 0-based"},
                "limit": {"type": "integer", "minimum": 1, "description": "Lines to return"},
            },
            "required": ["path"],
        },
    ),
    _read,
    read_only=True,
)


# --- view ----------------------------------------------------------------------------


async def _view(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
    path = _str_arg(args, "path")
    page = _int_arg(args, "page")
    offset = _int_arg(args, "offset")
    limit = _int_arg(args, "limit")
    region = _region_arg(args)
    source: str | bytes = path
    name: str | None = None
    if is_digest_ref(path):
        # The blob store may be a database: its reads and writes go off the loop (and
        # the decode with them, on media's own threads).
        again = await offload(
            view_digest,
            path,
            known=list(ctx.record_digests()),
            load=ctx.blobs.get,
            reach=ctx.reach,
            model=ctx.model,
            page=page,
            region=region,
        )
        if isinstance(again, Refusal):
            return ToolOutcome.refused(again)
        parts = await asyncio.to_thread(
            perception_parts, again, ctx, source=again.source, page=page
        )
        return ToolOutcome(parts)
    if path.startswith(("https://", "http://")):
        fetched = await _fetch_for_view(path, ctx)
        if isinstance(fetched, Refusal):
            return ToolOutcome.refused(fetched)
        source, name = fetched, path.rsplit("/", 1)[-1] or None
    # A render waits on its worker process (up to limits.RENDER_TIME_BUDGET_SECONDS):
    # never on the event loop, which other sessions and streams share, nor on its
    # default executor, which the rest of a server needs (media has threads of its own).
    result = await offload(
        view,
        source,
        reach=ctx.reach,
        model=ctx.model,
        page=page,
        offset=offset,
        limit=limit,
        name=name,
        region=region,
    )
    if isinstance(result, Refusal):
        return ToolOutcome.refused(result)
    return ToolOutcome(
        await asyncio.to_thread(perception_parts, result, ctx, source=path, page=page)
    )


async def _fetch_for_view(url: str, ctx: ToolContext) -> bytes | Refusal:
    """A URL's bytes through the SSRF gate (net.py), or the refusal the model reads.

    ``ctx.allow_loopback_http`` lets tests and local setups fetch plain http
    from loopback; nothing else gets past the gate. A reach without URLs (the
    operator's ``fetch_urls = false``) fetches nothing: ``outside_reach``.
    """
    try:
        ctx.reach.check_url(url)
    except ReachError as e:
        return Refusal("outside_reach", str(e), source=url)
    try:
        fetched = await afetch(
            url,
            max_bytes=limits.MAX_SOURCE_BYTES,
            allow_loopback_http=ctx.allow_loopback_http,
        )
    except NetError as e:
        return fetch_refusal(url, e)
    return fetched.data


#: The ``region`` argument of every surface's ``view`` (JSON Schema).
REGION_PARAMETER: dict[str, Any] = {
    "type": "array",
    "items": {"type": "integer"},
    "minItems": 4,
    "maxItems": 4,
    "description": (
        "Zoom: [x0, y0, x1, y1], the part to show, in the source's own pixels (a PDF "
        "page's points) as the result of a view states them; x1, y1 exclusive"
    ),
}

VIEW = Tool(
    ToolSpec(
        name="view",
        description=(
            "See a file (or an https URL) as an image: photos and screenshots, SVG "
            "(rendered), PDF pages, and text or code (rendered as a screenshot). Returns "
            'pixels, not text. "sha256:<hex>" brings back an image of this conversation '
            "(pasted, viewed or returned by a tool) that was elided. The result states the "
            "source's size; region=[x0, y0, x1, y1] in those coordinates zooms in, showing "
            "that part at up to full resolution (small text a large image shrank)."
        ),
        parameters={
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": (
                        "File path inside the allowed roots, an https URL, or sha256:<hex> "
                        "of an image in this conversation"
                    ),
                },
                "page": {"type": "integer", "minimum": 1, "description": "PDF page, 1-based"},
                "offset": {"type": "integer", "minimum": 0, "description": "Text: first line"},
                "limit": {"type": "integer", "minimum": 1, "description": "Text: lines"},
                "region": REGION_PARAMETER,
            },
            "required": ["path"],
        },
    ),
    _view,
    read_only=True,
)


# --- edit ----------------------------------------------------------------------------


async def _edit(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
    path = _str_arg(args, "path")
    old = _str_arg(args, "old_string")
    new = _str_arg(args, "new_string")
    try:
        resolved = ctx.reach.resolve(path)
    except VisusError as e:
        return ToolOutcome.text(f"refused: {e}", is_error=True)
    key = str(resolved)
    seen = ctx.read_digests.get(key)
    if seen is None:
        return ToolOutcome.text(
            f"refused: read {path!r} with the read tool before editing it "
            "(viewing it as an image does not count)",
            is_error=True,
        )
    try:
        with _folder_of(resolved, ctx.reach) as folder:
            data = folder.read(resolved.name)
            if hashlib.sha256(data).hexdigest() != seen:
                return ToolOutcome.text(
                    f"refused: {path!r} changed since you last read it; read it again first",
                    is_error=True,
                )
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                return ToolOutcome.text(f"refused: {path!r} is not UTF-8 text", is_error=True)
            count = text.count(old) if old else 0
            if count != 1:
                what = "not found" if count == 0 else f"found {count} times; give more context"
                return ToolOutcome.text(f"error: old_string {what} in {path!r}", is_error=True)
            updated = text.replace(old, new, 1).encode("utf-8")
            folder.replace(resolved.name, updated)
    except VisusError as e:
        return ToolOutcome.text(f"refused: {e}", is_error=True)
    ctx.read_digests[key] = hashlib.sha256(updated).hexdigest()
    return ToolOutcome.text(f"edited {path!r}: replaced 1 occurrence")


def _folder_of(path: Path, reach: Reach) -> contextlib.AbstractContextManager[_Folder]:
    """``path``'s folder held by descriptor (:mod:`visus.agent.pinned_folder`), so a
    folder swapped for a symlink after the reach check cannot move the write; by name
    where the OS has no ``dir_fd`` (Windows, where symlinks need an administrator)."""
    if pinned_folder.SUPPORTED:
        return PinnedFolder.of(path, reach)
    return contextlib.nullcontext(_NamedFolder(path.parent))


class _Folder(Protocol):
    def read(self, name: str) -> bytes: ...
    def replace(self, name: str, data: bytes) -> None: ...


@dataclass(frozen=True, slots=True)
class _NamedFolder:
    """A folder by its path: reads and writes by name (where no ``dir_fd`` exists)."""

    path: Path

    def read(self, name: str) -> bytes:
        return (self.path / name).read_bytes()

    def replace(self, name: str, data: bytes) -> None:
        """Replace ``name`` through a fresh temporary file beside it (``mkstemp``:
        created exclusively, never a planted name), with its permissions."""
        target = self.path / name
        mode = stat.S_IMODE(target.stat().st_mode)
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=f".{name}.", suffix=".visus-tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), mode)
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


EDIT = Tool(
    ToolSpec(
        name="edit",
        description=(
            "Replace exactly one occurrence of old_string with new_string in a text file. "
            "The file must have been read with the read tool since it last changed."
        ),
        parameters={
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "old_string": {"type": "string"},
                "new_string": {"type": "string"},
            },
            "required": ["path", "old_string", "new_string"],
        },
    ),
    _edit,
)


# --- send_image ------------------------------------------------------------------------


#: What send_image sends: image files (decoded, or an SVG drawn), never a text file or a
#: document rendered into a picture of itself.
_SENDABLE = frozenset({"raster", "svg"})


def _outbound(data: bytes, path: str, render: bool) -> Fitted:
    kind = probe(data).kind
    if kind not in _SENDABLE:
        raise UnsupportedTypeError(
            f"{path!r} is {kind}, not an image file: send_image sends images only "
            "(view shows it to you)"
        )
    return load(data, profile=OUTBOUND_PROFILE, render=render, name=path)


async def _send_image(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
    path = _str_arg(args, "path")
    # Fitted for what leaves the agent (tether's per-image bound), not for the model.
    # Its refusals (missing, outside reach, not an image) read as view's do.
    try:
        data = ctx.reach.read_bytes(ctx.reach.resolve(path))
        fitted = await offload(_outbound, data, path, ctx.reach.render)
    except VisusError as e:
        return ToolOutcome.refused(refusal_from(e, path, tool="send"))
    ctx.outbox.append(OutboundImage(fitted.media_type, fitted.data, source=path))
    # The record keeps what was sent (a surface re-showing the conversation needs it);
    # it is re-viewable from its path, so retention may elide it like a view.
    image = ImagePart(
        digest=await asyncio.to_thread(ctx.blobs.put, fitted.data, fitted.media_type),
        media_type=fitted.media_type,
        size=fitted.size,
        width=fitted.width,
        height=fitted.height,
        origin=PerceptionOrigin(source=path),
    )
    note = TextPart(
        f"queued {path!r} ({fitted.media_type} {fitted.width}x{fitted.height}) "
        "to send with your reply"
    )
    return ToolOutcome((note, image))


SEND_IMAGE = Tool(
    ToolSpec(
        name="send_image",
        description=(
            "Attach an image file (png, jpeg, gif, webp, svg...) to your reply so the user "
            "receives it. Text files and documents are not sent."
        ),
        parameters={
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    ),
    _send_image,
    read_only=True,
)
