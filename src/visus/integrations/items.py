"""Images in OpenAI-style items: what one request carries of them, data URLs, and a
session that stores them once.

The Agents SDK keeps a conversation as Responses input items, whose images are
``input_image`` parts holding a ``data:`` URL. :func:`request_input` is the input one
request carries (old tool images as descriptors, live ones fitted, hoisted to a user
message on Chat Completions: :class:`~visus.integrations.window.Window` on these
items) and :func:`held_items` the images a ``view("sha256:...")`` of the conversation
may name. :class:`VisionSession` wraps any of the SDK's ``Session`` s (it asks only
what the ``Session`` protocol has) so each image is stored once in visus's blob store;
the helpers read and write those URLs. No framework is imported here:
:mod:`visus.integrations.openai_agents` is the SDK's glue and hands its items and
sessions to this module.

Example:
    >>> url = data_url("image/png", b"PNG")
    >>> url, inline(url), media_type_of(url)
    ('data:image/png;base64,UE5H', b'PNG', 'image/png')
    >>> import tempfile
    >>> from visus.agent.options import VisionOptions
    >>> core = VisionCore(VisionOptions.of([tempfile.mkdtemp()], data=tempfile.mkdtemp()))
    >>> shot = {"type": "input_image", "image_url": url}
    >>> output = {"type": "function_call_output", "call_id": "c1", "output": [shot]}
    >>> [h.turn for h in held_items(core, [{"role": "user", "content": "hi"}, output])]
    [1]
"""

from __future__ import annotations

import base64
import binascii
import copy
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from visus.integrations.core import NO_VIEW, HeldImage, ViewCall, VisionCore, image_in_text
from visus.integrations.window import RequestImages, Window, held_in, split_images, wire_of
from visus.models import ModelSpec
from visus.record.blobs import BlobStore
from visus.retention import sealed_reasoning

__all__ = [
    "VisionSession",
    "data_url",
    "decoded",
    "held_items",
    "inline",
    "media_type_of",
    "request_input",
]

Item = dict[str, Any]

_BLOB_REF = "visus-blob:"


class VisionSession:
    """An Agents SDK ``Session`` (``inner``, any of them) storing each image once in
    visus's blob store.

    Items are written to ``inner`` with every ``input_image`` data URL replaced by
    ``visus-blob:sha256:<hex>`` (the bytes go to ``blobs``) and restored on read, so a
    50-image session is small on disk. A reference whose blob is gone reads back as a
    text note instead of failing the load.

    Example:
        >>> from agents import SQLiteSession
        >>> from visus.record.blobs import MemoryBlobStore
        >>> s = VisionSession(SQLiteSession("demo"), MemoryBlobStore())
        >>> s.session_id
        'demo'
    """

    def __init__(self, inner: Any, blobs: BlobStore) -> None:
        self.inner = inner
        self.blobs = blobs
        self.session_id = inner.session_id
        self.session_settings = getattr(inner, "session_settings", None)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return [self._restore(i) for i in await self.inner.get_items(limit)]

    async def add_items(self, items: list[Any]) -> None:
        await self.inner.add_items([self._store(i) for i in items])

    async def pop_item(self) -> Any:
        item = await self.inner.pop_item()
        return None if item is None else self._restore(item)

    async def clear_session(self) -> None:
        await self.inner.clear_session()

    def _store(self, item: Any) -> Any:
        return _map_images(item, self._put)

    def _restore(self, item: Any) -> Any:
        return _map_images(item, self._get)

    def _put(self, part: Item) -> Item:
        url = part.get("image_url")
        if not isinstance(url, str):
            return part
        data = inline(url)
        if data is None:  # a web URL, or a data URL that is not base64: kept as it is
            return part
        digest = self.blobs.put(data, media_type_of(url))
        return {**part, "image_url": f"{_BLOB_REF}sha256:{digest}"}

    def _get(self, part: Item) -> Item:
        url = part.get("image_url")
        if not isinstance(url, str) or not url.startswith(_BLOB_REF):
            return part
        digest = url.removeprefix(_BLOB_REF).removeprefix("sha256:")
        try:
            data = self.blobs.get(digest)
        except Exception:  # missing or corrupt: a note, never a failed load
            return {"type": "input_text", "text": f"[image sha256:{digest} is no longer stored]"}
        return {**part, "image_url": data_url(self.blobs.media_type(digest) or "image/png", data)}


def data_url(media_type: str, data: bytes) -> str:
    """``data`` as a base64 ``data:`` URL."""
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def media_type_of(url: str) -> str:
    """The media type a ``data:`` URL names (``image/png`` when it names none)."""
    return url[5:].split(";", 1)[0].split(",", 1)[0] or "image/png"


def inline(url: str) -> bytes | None:
    """The bytes of a base64 ``data:`` URL; None for a web URL or any other data URL."""
    head = url.partition(",")[0]
    if not (url.startswith("data:") and head.endswith(";base64")):
        return None
    return decoded(url) or None


def decoded(url: str) -> bytes:
    """The bytes of a base64 ``data:`` URL (empty when they are not base64)."""
    try:
        return base64.b64decode(url.split(",", 1)[1], validate=True)
    except (IndexError, binascii.Error, ValueError):
        return b""


def _map_images(item: Any, fn: Any) -> Any:
    """``item`` with ``fn`` applied to every input_image part (a copy; ``item`` untouched)."""
    if not isinstance(item, dict):
        return item
    changed = False
    out = dict(item)
    for key in ("output", "content"):
        value = item.get(key)
        if isinstance(value, list):
            mapped = [
                fn(c) if isinstance(c, dict) and c.get("type") == "input_image" else c
                for c in value
            ]
            if any(a is not b for a, b in zip(mapped, value, strict=True)):
                out[key] = mapped
                changed = True
    return out if changed else copy.copy(item)


# --- what a request carries -----------------------------------------------------------


def held_items(core: VisionCore, items: Iterable[Any]) -> list[HeldImage]:
    """The images ``items`` hold (tool outputs and user messages), with their turns and
    the call to ``core``'s ``view`` that made them."""
    items = [_with_image_text(i) for i in items]
    calls = _calls(items)
    return held_in(items, _is_user, lambda i: _held_images(core, i, calls), core.memo.digest)


def request_input(
    core: VisionCore, items: Sequence[Item], model: ModelSpec, *, hoist: bool
) -> tuple[list[Item], RequestImages]:
    """The input one request to ``model`` carries (``items`` are not changed), and its
    counts: tool images of turns before the live window become descriptors, within it
    the count window decides; with ``hoist`` the live ones move to one user message
    after each run of tool outputs (Chat Completions)."""
    prepared = [_with_image_text(item) for item in items]
    wire = wire_of(model.provider, chat=hoist)
    images = functools.partial(_tool_images, core)
    window = Window.of(core, model, wire, prepared, _is_user, images, _reasoned)
    calls = _calls(prepared)

    def rewrite(item: Item, turn: int) -> tuple[Item, list[Item]] | None:
        images = _images(item) if _is_output(item) else []
        if not images:
            return None
        view = _view_args(core, calls.get(item.get("call_id"), {}))
        return _output(item, images, window, turn, view, hoist=hoist)

    out = window.rewritten(prepared, rewrite, result=_is_output, user=_user)
    if model.preserved_thinking and not hoist:  # unhoisted: positions are the same
        out = _fresh_reasoning(out, window)
    return out, window.request(hoisted=hoist)


def _held_images(
    core: VisionCore, item: Any, calls: Mapping[Any, Item]
) -> list[tuple[bytes | None, ViewCall]]:
    """The images a tool output or user message holds, with the view that made them."""
    if _is_output(item):
        view, content = _view_args(core, calls.get(item.get("call_id"), {})), item.get("output")
    elif _is_user(item):
        view, content = NO_VIEW, item.get("content")
    else:
        return []
    return [
        (_inline(core, c["image_url"]), view)
        for c in (content if isinstance(content, list) else ())
        if isinstance(c, dict)
        and c.get("type") == "input_image"
        and isinstance(c.get("image_url"), str)
    ]


def _view_args(core: VisionCore, call: Mapping[str, Any]) -> ViewCall:
    """The arguments of a call to ``core``'s ``view`` (else none)."""
    if call.get("name") != "view" or "view" not in core.registry.names():
        return NO_VIEW
    return _call_args(call)


def _output(
    item: Item, images: Sequence[_Image], window: Window, turn: int, view: ViewCall, *, hoist: bool
) -> tuple[Item, list[Item]]:
    """One tool output with images as sent (each live one fitted, the others as
    notes), and what it hoists into the next user message."""
    split = split_images(
        images,
        window.fates(turn, len(images)),
        window.tally,
        part=lambda i: i.part,
        live=lambda i: {**i.part, "image_url": _live(i.url, window)},
        note=lambda i, repeat: window.note(
            _found(window.core, i.url), i.url, turn, view, repeat=repeat
        ),
        text=_text,
    )
    texts = [c["text"] for c in item["output"] if c.get("type") == "input_text"]
    output, hoisted = split.content(
        texts, item["output"], item.get("call_id"), hoist=hoist, text=_text, hoisted=_hoisted
    )
    return {**item, "output": output}, hoisted


def _live(url: str, window: Window) -> str:
    """The URL a live image is sent as: a data URL fitted to the request's model (a
    view's already is, unless another model than the one that asked gets it)."""
    found = _found(window.core, url)
    fitted = window.fitted(found)
    if fitted is None or found is None or fitted.data is found[0]:
        return url  # a web URL (the provider fetches it), not base64, or fitted already
    return data_url(fitted.media_type, fitted.data)


def _fresh_reasoning(items: list[Item], window: Window) -> list[Item]:
    """``items`` without the reasoning items an eviction invalidates, from the evicting
    request on (:meth:`~visus.integrations.window.Window.stale`; the provider drops them
    anyway), and the calls of those replies without their item ids (the API refuses an
    item id without its reasoning item), as visus's agent sends them: what each later
    reply is made over stays the same, so its reasoning is never dropped."""
    replies = [n for n, i in enumerate(items) if _is_reply(i)]
    reasoned = {n for n in replies if items[n].get("type") == "reasoning"}
    stale = window.stale(len(items), replies, reasoned, invalidated=True)
    out: list[Item] = []
    bare = False  # in a reply whose reasoning was left out
    for n, item in enumerate(items):
        if n in stale:
            bare = True
            continue
        bare = bare and _is_reply(item) and item.get("type") != "reasoning"
        if bare and item.get("type") == "function_call" and "id" in item:
            item = {k: v for k, v in item.items() if k != "id"}
        out.append(item)
    return out


def _hoisted(image: _Image, sent: Item) -> Item:
    """A live image as the user message it is hoisted to carries it."""
    detail = image.part.get("detail") or "auto"
    return {"type": "input_image", "image_url": sent["image_url"], "detail": detail}


def _text(text: str) -> Item:
    return {"type": "input_text", "text": text}


def _user(content: list[Item]) -> Item:
    return {"role": "user", "content": content}


def _inline(core: VisionCore, url: str) -> bytes | None:
    """:func:`inline`, decoded once per URL (``core``'s memo: a request carries the
    history's images again and again)."""
    return core.memo.decoded(url, inline)


def _found(core: VisionCore, url: str) -> tuple[bytes, str] | None:
    """The bytes and media type of a base64 data URL (None for any other URL)."""
    data = _inline(core, url)
    return None if data is None else (data, media_type_of(url))


def _tool_images(core: VisionCore, item: Any) -> list[tuple[str, bytes | None]]:
    """A tool output's images as the plan tells them apart (the digest of a data URL's
    bytes, else the URL), with their bytes."""
    out: list[tuple[str, bytes | None]] = []
    for image in _images(item) if _is_output(item) else ():
        data = _inline(core, image.url)
        out.append((image.url if data is None else core.memo.digest(data), data))
    return out


@dataclass(frozen=True, slots=True)
class _Image:
    """An ``input_image`` of a tool output (``part``) and its URL."""

    part: Item
    url: str


def _calls(items: Sequence[Any]) -> dict[Any, Item]:
    return {
        i.get("call_id"): i
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call"
    }


def _images(item: Item) -> list[_Image]:
    """Every image (a URL, not a file id) in a function_call_output."""
    output = item.get("output")
    if not isinstance(output, list):
        return []
    return [
        _Image(c, c["image_url"])
        for c in output
        if isinstance(c, dict)
        and c.get("type") == "input_image"
        and isinstance(c.get("image_url"), str)
    ]


def _is_output(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "function_call_output"


def _with_image_text(item: Any) -> Any:
    """A tool output whose text is one image data URL, as the image it means."""
    output = item.get("output") if _is_output(item) else None
    if isinstance(output, str) and image_in_text(output) is not None:
        return {**item, "output": [{"type": "input_image", "image_url": output.strip()}]}
    return item


def _reasoned(item: Any) -> int:
    """The reasoning a reasoning item stands for, as its ``encrypted_content`` holds
    it (:func:`~visus.retention.sealed_reasoning`: no usage rides on an item)."""
    if not isinstance(item, dict) or item.get("type") != "reasoning":
        return 0
    return sealed_reasoning(item.get("encrypted_content"))


def _is_reply(item: Any) -> bool:
    """An item a model's reply made (reasoning, a call, its message)."""
    if not isinstance(item, dict):
        return False
    kind = item.get("type")
    return kind in ("reasoning", "function_call") or (
        kind == "message" and item.get("role") == "assistant"
    )


def _is_user(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and item.get("role") == "user"
        and item.get("type", "message") == "message"
    )


def _call_args(call: Mapping[str, Any]) -> ViewCall:
    try:
        args = json.loads(call.get("arguments") or "{}")
    except (json.JSONDecodeError, TypeError):
        return NO_VIEW
    return ViewCall.of(args) if isinstance(args, dict) else NO_VIEW
