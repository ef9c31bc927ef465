"""The agent's Markdown as Telegram HTML (``parse_mode="HTML"``).

Only tags Telegram accepts are produced: ``<b> <i> <s> <code> <pre> <a href>``;
everything else is escaped text. Fenced code becomes ``<pre><code
class="language-x">``, headings bold, list bullets ``•``. The converter works line
by line on text that :func:`~visus.telegram.split.split_text` already cut into
whole blocks, so each message converts on its own. Markdown that nests oddly can
still give HTML Telegram refuses; the sender then falls back to the plain text.

Example:
    >>> to_html("**Total:** 3 < 4 and `x<y`")
    '<b>Total:</b> 3 &lt; 4 and <code>x&lt;y</code>'
    >>> to_html("```py\\nprint(1)\\n```")
    '<pre><code class="language-py">print(1)</code></pre>'
"""

from __future__ import annotations

import html
import re

__all__ = ["to_html"]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_ITALIC = re.compile(
    r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])"
    r"|(?<![\w_])_(?=[^\s_])(.+?)(?<=[^\s_])_(?![\w_])"
)
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+")


def _esc(text: str) -> str:
    return html.escape(text, quote=False)


def _prose(text: str) -> str:
    """Inline Markdown of one piece of text outside code spans."""
    links: list[str] = []

    def link(m: re.Match[str]) -> str:
        links.append(f'<a href="{html.escape(m.group(2))}">{_inline(m.group(1))}</a>')
        return f"\x00{len(links) - 1}\x00"

    out = _LINK.sub(link, text)
    out = _esc(out)
    out = _BOLD.sub(lambda m: f"<b>{m.group(1) or m.group(2)}</b>", out)
    out = _STRIKE.sub(lambda m: f"<s>{m.group(1)}</s>", out)
    out = _ITALIC.sub(lambda m: f"<i>{m.group(1) or m.group(2)}</i>", out)
    return re.sub("\x00(\\d+)\x00", lambda m: links[int(m.group(1))], out)


def _inline(line: str) -> str:
    parts: list[str] = []
    pos = 0
    for m in _CODE_SPAN.finditer(line):
        parts.append(_prose(line[pos : m.start()]))
        parts.append(f"<code>{_esc(m.group(2).strip() or m.group(2))}</code>")
        pos = m.end()
    parts.append(_prose(line[pos:]))
    return "".join(parts)


def _line(line: str) -> str:
    heading = _HEADING.match(line)
    if heading:
        return f"<b>{_inline(heading.group(1))}</b>"
    bullet = _BULLET.match(line)
    if bullet:
        return f"{bullet.group(1)}• {_inline(line[bullet.end() :])}"
    return _inline(line)


def to_html(markdown: str) -> str:
    """Telegram HTML for ``markdown`` (see the module doc)."""
    out: list[str] = []
    code: list[str] | None = None
    marker, lang = "", ""
    for line in markdown.split("\n"):
        if code is None:
            m = _FENCE.match(line)
            if m:
                code, marker, lang = [], m.group(1), m.group(2)
                continue
            out.append(_line(line))
            continue
        stripped = line.strip()
        if stripped and set(stripped) == {marker[0]} and len(stripped) >= len(marker):
            out.append(_pre(code, lang))
            code = None
            continue
        code.append(line)
    if code is not None:  # an unclosed fence still shows as code
        out.append(_pre(code, lang))
    return "\n".join(out)


def _pre(lines: list[str], lang: str) -> str:
    body = _esc("\n".join(lines))
    if lang:
        return f'<pre><code class="language-{_esc(lang)}">{body}</code></pre>'
    return f"<pre>{body}</pre>"
