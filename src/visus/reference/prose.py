"""What the reference model says: short, deterministic prose about what it saw.

The answer is about what the user's latest message is about:

* after tool calls, this turn's results: each image (named by the call that brought it:
  ``chart.png``, ``report.pdf page 3``), each text read (its first lines), each refusal;
* a message carrying images: those images;
* otherwise the image the question is about: ``the first image``, ``image 2``, or the
  latest one; with no image at all it says so, and what it is.

An image is described by its words, where they are and their ink colour, grouped into
phrases (``"Revenue Q3" (top left, navy)``), then the dominant colours of its regions.
With ``json_block`` the answer ends in one fenced ``json`` block listing every image of
the request (``{"images": [...], "descriptors": [...]}``): what tests and scripts read.

Example:
    >>> position(0.1, 0.9), position(0.5, 0.5)
    ('bottom left', 'centre')
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from visus.reference.conversation import Conversation, InImage, InMessage, after_tools, latest_user
from visus.reference.intent import elided_note
from visus.reference.vision import REGION_NAMES, SeenImage, SeenWord

__all__ = ["Focus", "focus", "observation", "position", "render"]

#: Words spelled out per image; the JSON block lists every word. Keeps an answer
#: readable in a chat bubble or a Telegram caption.
PROSE_WORDS = 8
_OTHER_COLOURS = 1  # colours named besides the main one; more are counted
_QUOTE_LINES = 4
_QUOTE_CHARS = 240
_DESCRIPTOR = re.compile(r"\[image elided: [^\]\n]*\]")
_HOISTED_LABEL = re.compile(r"\[(?:image|document) from tool call (\S+): ")
_READ_LINE = re.compile(r"^\s*\d+\t")
_READ_FOOTER = re.compile(r"^\[lines \d+-\d+ of (\d+)")
_ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5}
_WHICH = re.compile(
    r"\b(?:(first|second|third|fourth|fifth|last) (?:image|picture|photo|screenshot|page)"
    r"|(?:image|picture|photo) (\d{1,3}))\b",
    re.IGNORECASE,
)

#: The no-image answer: what the model is, and how to give it something to see.
NOTHING_SEEN = (
    "I see no images in this request. I am visus's offline reference model: I read the "
    "words and colours of images and nothing else. Drop or paste an image, or name a file "
    "(look at chart.png, read notes.txt, page 2 of report.pdf)."
)


def position(x: float, y: float) -> str:
    """Where a point (0..1 of the image) is, in words: one of nine regions."""
    col = min(int(x * 3), 2)
    row = min(int(y * 3), 2)
    return REGION_NAMES[row * 3 + col].replace("-", " ")


def _phrases(words: Sequence[SeenWord]) -> list[str]:
    """Runs of words in the same region and ink, as ``"w1 w2" (region, colour)``."""
    out: list[str] = []
    run: list[SeenWord] = []

    def flush() -> None:
        if run:
            text = " ".join(w.text for w in run)
            out.append(f'"{text}" ({position(run[0].x, run[0].y)}, {run[0].color})')
            run.clear()

    for w in words:
        if run and (position(w.x, w.y), w.color) != (position(run[0].x, run[0].y), run[0].color):
            flush()
        run.append(w)
    flush()
    return out


def _colours(seen: SeenImage) -> str:
    """Dominant colours of the nine regions, short: ``blue everywhere``, or the main
    colour then where the others are: ``mostly white; blue at bottom-left, bottom``."""
    by_colour: dict[str, list[str]] = {}
    for r in seen.regions:
        by_colour.setdefault(r.color, []).append(r.name)
    ranked = sorted(by_colour.items(), key=lambda kv: -len(kv[1]))
    if not ranked:
        return ""
    if len(ranked) == 1:
        return f"{ranked[0][0]} everywhere"
    parts = [f"mostly {ranked[0][0]}"]
    parts += [f"{c} at {', '.join(names)}" for c, names in ranked[1 : 1 + _OTHER_COLOURS]]
    if len(ranked) > 1 + _OTHER_COLOURS:
        parts.append(f"{len(ranked) - 1 - _OTHER_COLOURS} more colours")
    return "; ".join(parts)


def describe(label: str, seen: SeenImage | None, im: InImage) -> str:
    """One sentence about one image: its words (grouped), then its colours."""
    if seen is None:
        return f"{label} ({im.width}x{im.height}) could not be decoded."
    shown = seen.words[:PROSE_WORDS]
    said = ", ".join(_phrases(shown))
    if len(seen.words) > len(shown):
        said += f" and {len(seen.words) - len(shown)} more words"
    text = f"shows {said}" if said else "has no text I can read"
    colours = _colours(seen)
    tail = f"; colours: {colours}." if colours else "."
    return f"{label} ({seen.width}x{seen.height}) {text}{tail}"


@dataclass(frozen=True, slots=True)
class Focus:
    """What an answer is about: prose lines and the images (with labels) they describe."""

    lines: tuple[str, ...]
    images: tuple[tuple[str, InImage], ...] = ()


def _call_target(name: str, arguments: str) -> str:
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        args = {}
    if not isinstance(args, dict):
        return name
    target = args.get("path") or args.get("filename") or args.get("url") or name
    page = args.get("page")
    return f"{target} page {page}" if isinstance(page, int) else str(target)


def _labels(conv: Conversation) -> list[str]:
    """A label for every image of the request, in order: the call that brought it
    (``chart.png``, ``report.pdf page 2``) or ``your image``."""
    targets: dict[str, str] = {}
    labels: list[str] = []
    run: list[str] = []  # targets of the latest run of tool results, in order
    previous: InMessage | None = None
    for m in conv.messages:
        for c in m.tool_calls:
            targets[c.id] = _call_target(c.name, c.arguments)
        hoisted = m.role == "user" and previous is not None and previous.role == "tool"
        if m.role == "tool":
            run = run if previous is not None and previous.role == "tool" else []
            run.append(targets.get(m.tool_call_id or "", ""))
        # A hoisted message labels each image with its call; else the run's calls in order.
        ids = _HOISTED_LABEL.findall("\n".join(m.texts)) if hoisted else []
        named = [targets.get(i, "") for i in ids] if ids else run
        for i, im in enumerate(m.images):
            page = re.search(r"/page (\d+)$", im.where)
            if m.role == "tool":
                label = targets.get(m.tool_call_id or "", "")
            elif hoisted:
                label = named[i] if len(named) == len(m.images) else ""
            else:
                label = "your image"
            label = label or f"image {len(labels) + 1}"
            if page and " page " not in label:
                label += f" page {page.group(1)}"
            labels.append(label)
        previous = m
    return labels


def _numbered(images: Sequence[tuple[str, InImage]]) -> list[tuple[str, InImage]]:
    """Labels made unique (``Image 1``, ``Image 2`` when they repeat), first letter up."""
    names = [label for label, _ in images]
    out: list[tuple[str, InImage]] = []
    for i, (label, im) in enumerate(images):
        if names.count(label) > 1:
            label = f"Image {i + 1}" if label == "your image" else f"{label} (image {i + 1})"
        if label.startswith(("image ", "your image")):
            label = label[:1].upper() + label[1:]
        out.append((label, im))
    return out


def _quote(target: str, text: str) -> str:
    """What a read returned, shortly: its first lines, without line numbers."""
    lines = text.splitlines()
    total = next((int(m.group(1)) for ln in lines if (m := _READ_FOOTER.match(ln))), None)
    body = [_READ_LINE.sub("", ln) for ln in lines if not _READ_FOOTER.match(ln)]
    body = [ln.strip() for ln in body if ln.strip()]
    if not body:
        return f"{target} is empty."
    shown = " / ".join(body[:_QUOTE_LINES])
    if len(shown) > _QUOTE_CHARS:
        shown = shown[: _QUOTE_CHARS - 1].rstrip() + "…"
    count = total if total is not None else len(body)
    more = f" ({count} lines)" if count > _QUOTE_LINES else ""
    return f'{target} says: "{shown}"{more}'


#: What the Chat Completions, Responses and Ollama wires put before a failed tool's
#: result (they have no error flag): the refusal follows it.
_TOOL_ERROR = "[tool error] "


def _results(conv: Conversation, start: int) -> Focus:
    """This turn's tool results: refusals and texts in call order, then its images."""
    labels = _labels(conv)
    before = sum(len(m.images) for m in conv.messages[: start + 1])
    turn = conv.messages[start + 1 :]
    images = [im for m in turn for im in m.images]
    named = labels[before : before + len(images)]
    results = {m.tool_call_id: m for m in turn if m.role == "tool"}
    lines: list[str] = []
    for call in (c for m in turn for c in m.tool_calls):
        result = results.get(call.id)
        if result is None:
            continue
        target = _call_target(call.name, call.arguments)
        text = "\n".join(result.texts).strip().removeprefix(_TOOL_ERROR)
        if text.startswith(("refused", "error")):
            reason = text.split(": ", 1)[-1]
            lines.append(f"I could not {call.name.replace('_', ' ')} {target}: {reason}")
        elif result.images or any(n.startswith(target) for n in named):
            continue  # described below
        elif call.name.startswith("read") or "\t" in text:
            lines.append(_quote(target, text))
        elif "view" in call.name:  # an image dropped on the way says so
            lines.append(f"I see no images in what {call.name} returned for {target}.")
        elif text:
            lines.append(f"{call.name}: {text.splitlines()[0][:_QUOTE_CHARS]}")
    return Focus(tuple(lines), tuple(zip(named, images, strict=True)))


def _earlier(conv: Conversation, text: str) -> Focus:
    """The image a question is about: the one it names by position, else the latest."""
    images = [im for m in conv.messages for im in m.images]
    labels = _labels(conv)
    note = elided_note(conv)
    if not images and note is None:
        return Focus((NOTHING_SEEN,))
    which = _WHICH.search(text)
    if images and which:
        word, number = which.group(1), which.group(2)
        n = (
            len(images)
            if (word or "").lower() == "last"
            else (_ORDINALS.get((word or "").lower()) or int(number or 0))
        )
        if 1 <= n <= len(images):
            return Focus((), ((labels[n - 1], images[n - 1]),))
        return Focus((f"There are {len(images)} images here; there is no image {n}.",))
    if note is not None:
        return Focus((f"That image has left my context: {note}",))
    return Focus((), ((labels[-1], images[-1]),))


def focus(conv: Conversation) -> Focus:
    """What the answer to ``conv`` is about (see the module docstring)."""
    at = latest_user(conv)
    if after_tools(conv) and at is not None:
        return _results(conv, at)
    if at is not None and conv.messages[at].images:
        own = conv.messages[at].images
        label = "The image" if len(own) == 1 else "Image"
        return Focus(
            (),
            tuple((label if len(own) == 1 else f"{label} {i + 1}", im) for i, im in enumerate(own)),
        )
    text = "\n".join(conv.messages[at].texts) if at is not None else ""
    return _earlier(conv, text)


def render(found: Focus, seen: Sequence[SeenImage | None]) -> str:
    """The prose of ``found``, each image described from what was ``seen`` in it."""
    lines = list(found.lines)
    for (label, im), s in zip(_numbered(found.images), seen, strict=True):
        lines.append(describe(label, s, im))
    return "\n".join(lines) or "Done."


def observation(conv: Conversation, seen_of: Any) -> dict[str, Any]:
    """The JSON block's value: every image of the request (in order) and every
    ``[image elided: ...]`` note the model was shown. ``seen_of(data)`` perceives."""
    images: list[dict[str, Any]] = []
    descriptors: list[str] = []
    for m in conv.messages:
        # Only what the model was shown counts: its own earlier answers quote the
        # descriptors they saw, and re-quoting them would snowball turn after turn.
        if m.role != "assistant":
            for t in m.texts:
                descriptors.extend(_DESCRIPTOR.findall(t))
        for im in m.images:
            seen: SeenImage | None = seen_of(im.data)
            entry: dict[str, Any] = {
                "index": len(images) + 1,
                "width": seen.width if seen else im.width,
                "height": seen.height if seen else im.height,
                "words": [
                    {"text": w.text, "x": w.x, "y": w.y, "color": w.color, "hex": w.hex}
                    for w in (seen.words if seen else ())
                ],
                "where": im.where,
            }
            images.append(entry)
    return {"images": images, "descriptors": descriptors}
