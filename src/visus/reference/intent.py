"""The reference model as a small agent: which tool calls a plain-words message asks for.

A real model reads "look at chart.png" and calls ``view``; the reference model does the
same, deterministically, so the web chat and ``visus run`` behave as they will with a
real model:

* a file named in the user's latest message (``chart.png``, ``docs/notes.txt``,
  ``'my file.pdf'``), an ``https://`` URL or a ``sha256:`` digest becomes a call: images,
  PDFs and URLs go to ``view`` (``page N`` in the message picks the page), other files to
  ``read``; files the user attached to the session (the web chat names them in
  ``[attached to this session: ...]``) go to ``view_attachment``/``read_attachment``;
  asked to *send* an image ("send me logo.png"), it calls ``send_image``;
* a question about an image ("what did it say?") when the latest image has left the
  context (an ``[image elided: ...]`` note) calls what the note says brings it back;
* a tool result that says to call another tool (``read`` of an image answers "Call
  view('x.png') to see it") is followed, once per file and turn.

Only offered tools are called. A message that carries images of its own is about those
images, and makes no calls.

Example:
    >>> from visus.reference.conversation import Conversation, InMessage
    >>> conv = Conversation((InMessage("user", ("what's on page 3 of report.pdf?",)),),
    ...                     tools=("read", "view"))
    >>> plan(conv)
    [('view', {'path': 'report.pdf', 'page': 3})]
"""

from __future__ import annotations

import json
import mimetypes
import re
from typing import Any

from visus.reference.conversation import Conversation, InMessage, after_tools, latest_user

__all__ = ["elided_note", "named_files", "plan"]

#: The most calls one message makes (a pasted list of fifty paths is not fifty views).
MAX_CALLS = 8

_URL = re.compile(r"https?://[^\s\"'<>()\[\]`]+")
_DIGEST = re.compile(r"\bsha256:[0-9a-f]{12,64}\b")
_QUOTED = re.compile(r"[\"'`]([^\"'`\n]{1,200}?\.[A-Za-z][A-Za-z0-9]{0,5})[\"'`]")
_BARE = re.compile(
    r"(?<![\w/.~:@-])((?:~/|/|\./)?(?:[\w.-]+/)*[\w-]+(?:\.[\w-]+)*\.([A-Za-z][A-Za-z0-9]{0,5}))(?![\w/])"
)
_PAGE = re.compile(r"\bpage\s+(\d{1,5})\b", re.IGNORECASE)
_VIEW_WORDS = re.compile(r"\b(view|screenshot|render|as an image)\b", re.IGNORECASE)
_SEND_WORDS = re.compile(r"\bsend\b", re.IGNORECASE)
_ATTACHED = re.compile(r"\[attached to this session: ([^\]\n]*)\]")
_ATTACHED_NAME = re.compile(r"\s*(.+?) \([^()]*, \d+ bytes\)\s*(?:,|$)")
#: What a descriptor or a refusal says to call: ``call view("a.png")``,
#: ``Call view('r.pdf', page=N)``, ``call view_attachment("x.pdf")``.
_CALL_HINT = re.compile(
    r"\b[Cc]all ([A-Za-z_]\w*)\((\"(?:[^\"\\]|\\.)*\"|'[^'\n]*')(?:, page=(\d+|N))?\)"
)
_ELIDED = re.compile(r"\[(?:image|document) elided: [^\]\n]*\]")
#: Words of a question about something seen ("what did it say?", "which colour?"); a
#: bare "and now?" is not one, and is answered from what the request holds.
_ABOUT_AN_IMAGE = re.compile(
    r"\b(image|picture|photo|screenshot|chart|page|it|this|that|colou?rs?|text|words?"
    r"|say|says|said|written|see|saw|show|shows|shown|look|looks)\b",
    re.IGNORECASE,
)

Call = tuple[str, dict[str, Any]]


def plan(conv: Conversation) -> list[Call]:
    """The tool calls the latest message asks for in plain words (empty: answer now)."""
    if not conv.tools:
        return []
    if after_tools(conv):
        return _follow_hints(conv)
    at = latest_user(conv)
    if at is None or at != len(conv.messages) - 1 or conv.messages[at].images:
        return []
    text = "\n".join(conv.messages[at].texts)
    calls = _calls_for(text, conv) or _another_page(text, conv, at)
    if calls:
        return calls[:MAX_CALLS]
    note = elided_note(conv)
    if note is not None and _ABOUT_AN_IMAGE.search(text):
        return _hint_calls(note, conv.tools)[:1]
    return []


def named_files(text: str) -> list[str]:
    """Files, URLs and digests ``text`` names, in order, each once.

    Example:
        >>> named_files("compare chart.png with 'Q3 plan.pdf', e.g. via https://x.org/a.svg")
        ['https://x.org/a.svg', 'Q3 plan.pdf', 'chart.png']
    """
    found: list[str] = []
    rest = text
    for pattern in (_URL, _DIGEST):
        found += [m.group(0).rstrip(".,;:!?") for m in pattern.finditer(rest)]
        rest = pattern.sub(" ", rest)
    for m in _QUOTED.finditer(rest):
        found.append(m.group(1))
    rest = _QUOTED.sub(" ", rest)
    found += [m.group(1) for m in _BARE.finditer(rest) if _looks_like_file(m.group(1), m.group(2))]
    return list(dict.fromkeys(found))


def _looks_like_file(name: str, ext: str) -> bool:
    """A path-like token, a name with a known type, or ``stem.ext`` with a short
    lowercase extension (not ``e.g``, ``gpt-4.1`` or ``Mr.Smith``)."""
    if "/" in name or mimetypes.guess_type(name)[0] is not None:
        return True
    stem = name[: -len(ext) - 1]
    return ext.islower() and ext.isalpha() and 2 <= len(ext) <= 5 and len(stem) >= 2


def _attached(conv: Conversation) -> set[str]:
    """Names the web chat said were attached to this session."""
    names: set[str] = set()
    for m in conv.messages:
        if m.role != "user":
            continue
        for note in _ATTACHED.findall("\n".join(m.texts)):
            names.update(n.group(1) for n in _ATTACHED_NAME.finditer(note))
    return names


def _calls_for(text: str, conv: Conversation) -> list[Call]:
    names = named_files(text)
    attached = _attached(conv)
    pages = [int(p) for p in _PAGE.findall(text)]
    as_image = bool(_VIEW_WORDS.search(text))
    send = bool(_SEND_WORDS.search(text)) and "send_image" in conv.tools
    calls: list[Call] = []
    for name in names:
        if send and _is_image(name) and name not in attached:
            calls.append(("send_image", {"path": name}))
            continue
        call = _call_for(name, conv.tools, attached=name in attached, as_image=as_image)
        if call is None:
            continue
        tool, args = call
        if tool in ("view", "view_attachment") and pages and len(names) == 1:
            args["page"] = pages[0]
        calls.append(call)
    return calls


def _is_image(name: str) -> bool:
    return (mimetypes.guess_type(name)[0] or "").startswith("image/")


def _call_for(
    name: str, offered: tuple[str, ...], *, attached: bool, as_image: bool
) -> Call | None:
    kind = mimetypes.guess_type(name)[0] or ""
    pixels = (
        as_image
        or kind.startswith(("image/", "video/"))
        or kind == "application/pdf"
        or name.startswith(("https://", "http://", "sha256:"))
    )
    view, read, key = ("view", "read", "path")
    if attached and "view_attachment" in offered:
        view, read, key = ("view_attachment", "read_attachment", "filename")
    order = (view,) if pixels else (read, view)  # read cannot open pixels
    tool = next((t for t in order if t in offered), None)
    return (tool, {key: name}) if tool is not None else None


def elided_note(conv: Conversation) -> str | None:
    """The ``[image elided: ...]`` note when the most recent image the model was shown
    has left the context (no live image after it), else None."""
    latest: str | None = None
    for m in conv.messages:
        if m.images:
            latest = None
        if m.role != "assistant":
            notes = _ELIDED.findall("\n".join(m.texts))
            if notes:
                latest = notes[-1]
    return latest


def _another_page(text: str, conv: Conversation, at: int) -> list[Call]:
    """ "and page 2?" names no file: it asks for another page of the document the
    latest page view before this message showed (``view`` or ``view_attachment``)."""
    pages = _PAGE.findall(text)
    if len(pages) != 1:
        return []
    for name, args in reversed(_parsed_calls(conv.messages[:at])):
        if name not in ("view", "view_attachment") or name not in conv.tools:
            continue
        key = "filename" if name == "view_attachment" else "path"
        target = args.get(key)
        if not isinstance(target, str):
            continue
        if "page" in args or mimetypes.guess_type(target)[0] == "application/pdf":
            return [(name, {key: target, "page": int(pages[0])})]
    return []


def _parsed_calls(messages: tuple[InMessage, ...]) -> list[Call]:
    """Every tool call ``messages`` made, in order, with its arguments parsed (calls
    whose arguments are not a JSON object are left out)."""
    out: list[Call] = []
    for m in messages:
        for c in m.tool_calls:
            try:
                args = json.loads(c.arguments or "{}")
            except json.JSONDecodeError:
                continue
            if isinstance(args, dict):
                out.append((c.name, args))
    return out


def _hint_calls(text: str, offered: tuple[str, ...]) -> list[Call]:
    calls: list[Call] = []
    for m in _CALL_HINT.finditer(text):
        tool, quoted, page = m.group(1), m.group(2), m.group(3)
        if tool not in offered:
            continue
        try:
            target = json.loads(quoted) if quoted.startswith('"') else quoted[1:-1]
        except json.JSONDecodeError:
            continue
        key = "filename" if tool.endswith("_attachment") else "path"
        args: dict[str, Any] = {key: target}
        if page is not None and page.isdigit():
            args["page"] = int(page)
        calls.append((tool, args))
    return calls


def _turn_calls(conv: Conversation, start: int) -> set[tuple[str, str]]:
    """(tool, json of its arguments) of every call made since ``start``."""
    return {(n, json.dumps(a, sort_keys=True)) for n, a in _parsed_calls(conv.messages[start:])}


def _targets(conv: Conversation, start: int) -> set[str]:
    """What the user's message at ``start`` names and what this turn's calls opened."""
    named = set(named_files("\n".join(conv.messages[start].texts)))
    for _, args in _parsed_calls(conv.messages[start:]):
        named.update(v for k, v in args.items() if k in ("path", "filename") and isinstance(v, str))
    return named


def _follow_hints(conv: Conversation) -> list[Call]:
    """Calls this turn's latest tool results say to make, not made yet this turn.

    Only a hint about what the user asked for is followed (``read`` of an image says to
    view that image): a file's own text that quotes a call (a README's
    ``view("sha256:...")``) is something the file says, not something the user asked.
    """
    start = latest_user(conv)
    if start is None:
        return []
    made = _turn_calls(conv, start)
    asked = _targets(conv, start)
    last_results: list[InMessage] = []
    for m in reversed(conv.messages):
        if m.role == "assistant":
            break
        if m.role == "tool":
            last_results.append(m)
    text = "\n".join(t for m in reversed(last_results) for t in m.texts)
    hints = [
        c
        for c in _hint_calls(text, conv.tools)
        if (c[0], json.dumps(c[1], sort_keys=True)) not in made
        and str(c[1].get("path", c[1].get("filename"))) in asked
    ]
    return list({json.dumps(c, sort_keys=True): c for c in hints}.values())[:MAX_CALLS]
