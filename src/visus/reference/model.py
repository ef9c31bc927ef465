"""The reference "model": deterministic answers from what a request really carries.

The server parses each wire into a neutral :class:`Conversation` (roles, text,
images as decoded bytes with where they came from, tool calls and results, the
offered tool names); :func:`respond` answers it:

* If the last message is a user message that does not follow tool results and
  holds lines ``call <tool> <json-args>`` naming offered tools, the answer is
  those tool calls (several lines make parallel calls; ids are derived from the
  request, so the same request always gets the same ids).
  A line ``say <text>`` beside them is text the answer writes before its calls,
  as real models often do.
* A line ``each <tool> [<json-args>, ...]`` drives a long loop: the model calls the
  tool once per step with the next arguments of the list (counting its own calls since
  that user message), then answers as below. ``each view [{"path": "s1.png"}, ...]``
  is a screen agent taking 40 screenshots in one turn.
* Otherwise it acts as a small agent on plain words (:mod:`visus.reference.intent`):
  "look at chart.png", "read notes.txt", "what's on page 3 of report.pdf" call the
  offered tool that opens each file; a question about an image that has left the
  context calls what its ``[image elided: ...]`` note says.
* A line ``wait <seconds>`` in the last user message delays the answer (at most
  :data:`MAX_WAIT_SECONDS`): tests use it to see a turn in flight and stop it.
* Otherwise the answer is short prose about what the message is about
  (:mod:`visus.reference.prose`): this turn's tool results, the images the message
  carries, or the earlier image a question is about; with a JSON Schema in the
  message, one valid JSON value (:mod:`visus.reference.structured`). With
  ``json_block`` (``visus reference serve --json``, ``VISUS_REFERENCE_JSON=1``) the
  answer ends in one fenced ``json`` block ``{"images": [...], "descriptors": [...]}``
  listing every image of the request and the ``[image elided: ...]`` notes found in any
  text: what tests read.

Only image parts are perceived: base64 pasted into text is just text, counted at
four characters a token, which is how a stringified image overflows the context.
A native PDF document part is perceived page by page: the wire parsers turn it into
one rendered image per page (:func:`document_pages`, ``where`` ending in
``/page N``), so pages are OCRed, described and counted like images (a page costs
what an image of its rendered size costs under the provider's formula; the PDF's
own text layer is not counted separately).

Example:
    >>> conv = Conversation(messages=(InMessage(role="user", texts=("call view {}",)),),
    ...                     tools=("view",))
    >>> [c.name for c in respond(conv).tool_calls]
    ['view']
    >>> loop = Conversation(messages=(InMessage(role="user",
    ...     texts=('each view [{"path": "a.png"}, {"path": "b.png"}]',)),), tools=("view",))
    >>> [dict(c.arguments) for c in respond(loop).tool_calls]
    [{'path': 'a.png'}]
    >>> respond(Conversation((InMessage("user", ("look at chart.png",)),), tools=("view",))
    ...         ).tool_calls[0].arguments
    {'path': 'chart.png'}
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from visus import limits
from visus.errors import InvalidInputError, MediaError, VisusError
from visus.reference import intent, prose, structured
from visus.reference.conversation import (
    NEUTRAL_ROLES,
    Conversation,
    InCall,
    InImage,
    InMessage,
    OutCall,
    Reply,
    Role,
    after_tools,
    call_ids,
    latest_user,
)
from visus.reference.vision import SeenImage, perceive

__all__ = [
    "NEUTRAL_ROLES",
    "Conversation",
    "InCall",
    "InImage",
    "InMessage",
    "OutCall",
    "Reply",
    "Role",
    "count_tokens",
    "document_pages",
    "perceive_cached",
    "requested_wait",
    "respond",
    "text_tokens",
]

_CALL_LINE = re.compile(r"^\s*call\s+([A-Za-z_][\w.\-]*)(?:\s+(.*?))?\s*$")
_CACHE_SIZE = 64


_cache: OrderedDict[str, SeenImage | None] = OrderedDict()
_cache_lock = threading.Lock()


def perceive_cached(data: bytes) -> SeenImage | None:
    """:func:`perceive` with a small LRU by content hash; ``None`` if it cannot be decoded.

    An agent loop resends the same images on every step; OCR runs once per image.
    """
    key = hashlib.sha256(data).hexdigest()
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    try:
        seen: SeenImage | None = perceive(data)
    except MediaError:
        seen = None
    with _cache_lock:
        _cache[key] = seen
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return seen


_pages: OrderedDict[str, tuple[InImage, ...]] = OrderedDict()


def document_pages(data: bytes, where: str, *, max_pages: int | None = None) -> tuple[InImage, ...]:
    """A PDF's pages rendered as images (PNG), ``where`` of each ``"<where>/page N"``.

    Raises :class:`~visus.errors.InvalidInputError` when ``data`` is not a PDF we can
    open, or has more than ``max_pages`` pages (the wire turns either into its
    provider's 400). Rendered pages are cached by content, like OCR results.

    Example:
        >>> document_pages(b"not a pdf", "messages.0.content.1")
        Traceback (most recent call last):
        ...
        visus.errors.InvalidInputError: messages.0.content.1: the document is not a valid PDF
    """
    from visus import media  # heavy (pypdfium2, Pillow); only documents need it
    from visus.media.types import Profile

    key = hashlib.sha256(data).hexdigest()
    with _cache_lock:
        hit = _pages.get(key)
    if hit is None:
        try:
            kind = media.probe(data)
        except VisusError as e:
            raise InvalidInputError(f"{where}: the document is not a valid PDF") from e
        if kind.kind != "pdf":
            raise InvalidInputError(f"{where}: the document is not a valid PDF")
        count = kind.page_count or 1
        if max_pages is not None and count > max_pages:
            raise InvalidInputError(f"{where}: the PDF has {count} pages; at most {max_pages}")
        edge = limits.REFERENCE_PDF_PAGE_EDGE
        profile = Profile(
            max_edge=edge,
            max_pixels=edge * edge,
            max_bytes=limits.OPENAI_MAX_IMAGE_BYTES,
            media_types=frozenset({"image/png"}),
        )
        rendered: list[InImage] = []
        for n in range(1, count + 1):
            try:
                page = media.load(data, profile=profile, page=n)
            except VisusError as e:
                raise InvalidInputError(f"{where}: page {n} of the PDF cannot be read") from e
            rendered.append(InImage(page.data, page.width, page.height, where=f"/page {n}"))
        hit = tuple(rendered)
        with _cache_lock:
            _pages[key] = hit
            while len(_pages) > _CACHE_SIZE:
                _pages.popitem(last=False)
    if max_pages is not None and len(hit) > max_pages:
        raise InvalidInputError(f"{where}: the PDF has {len(hit)} pages; at most {max_pages}")
    return tuple(
        InImage(p.data, p.width, p.height, where=f"{where}{p.where}", detail=p.detail) for p in hit
    )


def text_tokens(text: str) -> int:
    """Text costs one token per four characters, rounded up."""
    return math.ceil(len(text) / 4)


def count_tokens(conv: Conversation, image_cost: Callable[[InImage], int]) -> int:
    """Prompt tokens: all text (messages, call arguments, tool definitions) plus images."""
    chars = len(conv.tool_text)
    images = 0
    for m in conv.messages:
        chars += sum(len(t) for t in m.texts)
        chars += sum(len(c.name) + len(c.arguments) for c in m.tool_calls)
        images += sum(image_cost(im) for im in m.images)
    return math.ceil(chars / 4) + images


def _call_lines(text: str, offered: tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    calls: list[tuple[str, dict[str, Any]]] = []
    for line in text.splitlines():
        match = _CALL_LINE.match(line)
        if not match or match.group(1) not in offered:
            continue
        raw = match.group(2) or "{}"
        try:
            args = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(args, dict):
            calls.append((match.group(1), args))
    return calls


_EACH_LINE = re.compile(r"^\s*each\s+([A-Za-z_][\w.\-]*)\s+(\[.*\])\s*$", re.MULTILINE)


def _loop_call(conv: Conversation) -> tuple[OutCall, ...]:
    """The next call of an ``each <tool> [args, ...]`` line: one per step, in order."""
    at = latest_user(conv)
    if at is None:
        return ()
    match = _EACH_LINE.search("\n".join(conv.messages[at].texts))
    if match is None or match.group(1) not in conv.tools:
        return ()
    try:
        steps = json.loads(match.group(2))
    except json.JSONDecodeError:
        return ()
    done = sum(1 for m in conv.messages[at + 1 :] if m.role == "assistant" and m.tool_calls)
    if not isinstance(steps, list) or done >= len(steps) or not isinstance(steps[done], dict):
        return ()
    seed = f"each:{at}:{done}:{json.dumps(steps[done], sort_keys=True)}"
    digest = hashlib.sha256(seed.encode()).hexdigest()[:20]
    return (OutCall(id=f"call_{digest}", name=match.group(1), arguments=steps[done]),)


def _tool_calls(conv: Conversation) -> tuple[OutCall, ...]:
    """The next step of an ``each`` loop, or the ``call`` lines of the user's latest
    message when it is the last one."""
    if not conv.messages or not conv.tools:
        return ()
    looping = _loop_call(conv)
    if looping:
        return looping
    if after_tools(conv):
        return ()
    last = conv.messages[-1]
    if last.role != "user":
        return ()
    return call_ids(conv, _call_lines("\n".join(last.texts), conv.tools))


#: The longest ``wait <seconds>`` line honoured.
MAX_WAIT_SECONDS = 60.0
_WAIT_LINE = re.compile(r"^\s*wait\s+(\d+(?:\.\d+)?)\s*$", re.MULTILINE)


def requested_wait(conv: Conversation) -> float:
    """Seconds the last user message asks the answer to wait (``wait 2.5``), else 0."""
    if not conv.messages or conv.messages[-1].role != "user":
        return 0.0
    match = _WAIT_LINE.search("\n".join(conv.messages[-1].texts))
    return min(float(match.group(1)), MAX_WAIT_SECONDS) if match else 0.0


_SAY_LINE = re.compile(r"^\s*say\s+(.+?)\s*$", re.MULTILINE)


def _said(conv: Conversation) -> str:
    """The ``say <text>`` lines of the last user message, joined by spaces."""
    return " ".join(_SAY_LINE.findall("\n".join(conv.messages[-1].texts)))


def _answer_text(conv: Conversation, json_block: bool) -> str:
    """Prose about what the latest message is about (or a schema's value), plus the
    JSON block when asked for."""
    found = prose.focus(conv)
    seen = [perceive_cached(im.data) for _, im in found.images]
    text = prose.render(found, seen)
    at = latest_user(conv)
    schema = (
        structured.requested_schema("\n".join(conv.messages[at].texts)) if at is not None else None
    )
    observed = prose.observation(conv, perceive_cached) if json_block or schema else {}
    if schema is not None:
        text = structured.answer(schema, [s for s in seen if s is not None], observed)
    if json_block:
        text += "\n\n```json\n" + json.dumps(observed, ensure_ascii=False) + "\n```"
    return text


def respond(conv: Conversation, *, input_tokens: int = 0, json_block: bool = False) -> Reply:
    """Answer ``conv``: tool calls when asked for (``call`` lines or plain words), else
    prose about what the message is about (with ``json_block``, and the JSON block).

    ``input_tokens`` (from :func:`count_tokens`) is passed through to the reply.
    """
    calls = _tool_calls(conv)
    said = _said(conv) if calls else ""
    if not calls:
        calls = call_ids(conv, intent.plan(conv))
    if calls:
        out_chars = len(said) + sum(len(c.name) + len(json.dumps(dict(c.arguments))) for c in calls)
        return Reply(
            text=said,
            tool_calls=calls,
            input_tokens=input_tokens,
            output_tokens=max(1, math.ceil(out_chars / 4)),
        )
    text = _answer_text(conv, json_block)
    return Reply(text=text, input_tokens=input_tokens, output_tokens=text_tokens(text))
