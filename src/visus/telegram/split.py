"""Split an agent's text into Telegram messages without breaking words or markdown.

Telegram takes at most 4096 characters per message (counted in UTF-16 code units,
as its entity offsets are) and 1024 per caption. :func:`split_text` cuts longer
text at the best place that fits: a blank line, else a line break, else between
words; never inside an inline span (`` `code` ``, ``**bold**``, ``[link](url)``)
unless the span alone is longer than a message, and never through a word unless
the word alone is. A fenced code block that must be cut is closed at the end of
one message and reopened (with its language) at the start of the next, so every
message holds balanced fences.

Example:
    >>> split_text("alpha beta gamma delta", limit=16)
    ['alpha beta', 'gamma delta']
    >>> split_text("```py\\na = 1\\nb = 2\\n```", limit=16)
    ['```py\\na = 1\\n```', '```py\\nb = 2\\n```']
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

from visus import limits

__all__ = ["split_text", "tg_len"]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_INLINE = (
    r"`[^`\n]+`|\*\*[^\n]+?\*\*|__[^\n]+?__|~~[^\n]+?~~"
    r"|\[[^\]\n]*\]\([^)\n]*\)|\*[^*\s][^*\n]*\*|_[^_\s][^_\n]*_"
)
#: A unit of prose: inline spans and non-space characters glued together, then spaces.
_UNIT = re.compile(rf"(?:{_INLINE}|\S)+\s*|\s+")
_WORD = re.compile(r"\S+\s*|\s+")


def tg_len(text: str) -> int:
    """Length as Telegram counts it: UTF-16 code units (an emoji may count two).

    Example:
        >>> tg_len("ab"), tg_len("😀")
        (2, 2)
    """
    return len(text.encode("utf-16-le")) // 2


@dataclass(frozen=True, slots=True)
class _Atom:
    text: str
    #: The fence open after this atom (its opening line), or "" outside fences.
    fence_after: str
    #: A blank line outside any fence: the preferred place to cut.
    paragraph: bool = False


def _fence_marker(opener: str) -> str:
    m = _FENCE.match(opener)
    return m.group(1) if m else "```"


def _atoms(text: str) -> list[_Atom]:
    atoms: list[_Atom] = []
    fence = ""
    for line in text.splitlines(keepends=True):
        m = _FENCE.match(line.rstrip("\n"))
        if fence:
            marker = _fence_marker(fence)
            closes = m and m.group(1)[0] == marker[0] and len(m.group(1)) >= len(marker)
            if closes and m and not m.group(2).strip():
                fence = ""
        elif m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
            fence = line.rstrip("\n").lstrip() + "\n"
        atoms.append(_Atom(line, fence, paragraph=not fence and not line.strip()))
    return atoms


def _pieces(atom: _Atom, budget: int, *, inside: bool) -> list[_Atom]:
    """An atom too long for one message, cut into units that each fit ``budget``."""
    units = _WORD.findall(atom.text) if inside else _UNIT.findall(atom.text)
    out: list[str] = []
    for unit in units:
        if tg_len(unit) <= budget:
            out.append(unit)
            continue
        for word in _WORD.findall(unit):
            while tg_len(word) > budget:
                # A word longer than a message: a hard cut is the only way left.
                cut = budget
                while cut > 1 and tg_len(word[:cut]) > budget:
                    cut -= 1
                out.append(word[:cut])
                word = word[cut:]
            if word:
                out.append(word)
    return [_Atom(p, atom.fence_after) for p in out]


def _says_something(chunk: str) -> bool:
    """False for a chunk that would render as nothing: whitespace and fence lines only
    (an empty code block; Telegram refuses such a message, and it tells nobody anything)."""
    return any(line.strip() and not _FENCE.match(line) for line in chunk.splitlines())


def split_text(text: str, limit: int = limits.TELEGRAM_MAX_TEXT_CHARS) -> list[str]:
    """Cut ``text`` into messages of at most ``limit`` UTF-16 units (see module doc).

    Whitespace at a cut outside code is dropped; empty text, and a part that would
    render as nothing (an empty code block), give no message.
    """
    if limit < 16:
        raise ValueError("limit must be at least 16 characters")
    if not _says_something(text):
        return []
    if tg_len(text) <= limit:
        return [text]
    m = _Messages(limit)
    chunks: list[str] = []
    queue = deque(_atoms(text))
    cur: list[_Atom] = []
    fence_before = ""  # the fence open at the start of cur (reopened there)
    while queue:
        atom = queue.popleft()
        if m.size([*cur, atom], fence_before, atom.fence_after) <= limit:
            cur.append(atom)
            continue
        if not cur:
            # Alone it does not fit: cut it into smaller units and try again.
            room = limit - m.size([], fence_before, atom.fence_after)
            queue.extendleft(reversed(_pieces(atom, max(room, 2), inside=bool(atom.fence_after))))
            continue
        keep = m.keep(cur, fence_before)
        queue.appendleft(atom)
        queue.extendleft(reversed(cur[keep:]))
        chunk = m.flush(cur[:keep], fence_before)
        fence_before = cur[keep - 1].fence_after
        if _says_something(chunk):
            chunks.append(chunk)
        cur = []
        if not fence_before:
            # Outside code the next message starts at its first visible character.
            while queue and not queue[0].text.strip() and not queue[0].fence_after:
                queue.popleft()
    if cur:
        last = m.flush(cur, fence_before)
        if _says_something(last):
            chunks.append(last)
    return chunks


@dataclass(frozen=True, slots=True)
class _Messages:
    """One message as it is sent: the code fence open at its start reopened, the one
    open at its end closed, and its length in UTF-16 units."""

    limit: int

    def opener(self, fence: str) -> str:
        # An absurdly long info string is not worth repeating: reopen with the bare marker.
        return fence if tg_len(fence) <= self.limit // 2 else _fence_marker(fence) + "\n"

    def size(self, atoms: list[_Atom], fence_before: str, fence_after: str) -> int:
        head = self.opener(fence_before) if fence_before else ""
        body = head + "".join(a.text for a in atoms)
        closer = len(_fence_marker(fence_after)) + 1 if fence_after else 0
        return tg_len(body) + closer

    def flush(self, atoms: list[_Atom], start_fence: str) -> str:
        fence_after = atoms[-1].fence_after if atoms else start_fence
        body = (self.opener(start_fence) if start_fence else "") + "".join(a.text for a in atoms)
        if fence_after:
            return body + ("" if body.endswith("\n") else "\n") + _fence_marker(fence_after)
        return body.rstrip()

    def keep(self, cur: list[_Atom], fence_before: str) -> int:
        """How many atoms of a full message ``cur`` it keeps: up to a blank line in its
        second half rather than up to its last line break."""
        for i in range(len(cur) - 1, 0, -1):
            if cur[i].paragraph and self.size(cur[:i], fence_before, cur[i - 1].fence_after) >= (
                self.limit // 2
            ):
                return i
        return len(cur)
