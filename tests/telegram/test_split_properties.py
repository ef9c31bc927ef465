"""Property: however markdown is cut, every message says something once rendered
(never empty, never a bare fence), fits Telegram's limit, and has balanced fences."""

from __future__ import annotations

import html
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from visus.telegram.markdown import to_html
from visus.telegram.split import split_text, tg_len

_WORDS = st.sampled_from(
    ["word", "longerword", "**bold**", "`code`", "_it_", "x" * 30, "😀", "<", "&", "a.b"]
)
_PROSE = st.lists(_WORDS, min_size=1, max_size=120).map(" ".join)
# a code line longer than a message (minified JSON) is what made fence-only messages
_CODE_LINE = st.sampled_from(['  "k": 1,', "x = 1", "", "    deep()", "}", "y" * 50, "z" * 300])
_FENCE = st.builds(
    lambda lang, lines: f"```{lang}\n" + "\n".join(lines) + "\n```",
    st.sampled_from(["", "json", "py"]),
    st.lists(_CODE_LINE, min_size=0, max_size=60),
)
_MARKDOWN = st.lists(st.one_of(_PROSE, _FENCE, st.just("")), min_size=1, max_size=8).map(
    "\n\n".join
)


def _visible(markup: str) -> str:
    """The text a reader sees: tags stripped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", markup)).strip()


def _fences_balanced(chunk: str) -> bool:
    opened = 0
    for line in chunk.splitlines():
        if re.match(r"^ {0,3}```", line):
            opened ^= 1
    return opened == 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_MARKDOWN, st.sampled_from([64, 100, 257, 4096]))
def test_every_chunk_says_something_fits_and_balances_its_fences(text: str, limit: int) -> None:
    for chunk in split_text(text, limit=limit):
        assert tg_len(chunk) <= limit
        assert _visible(to_html(chunk)), repr(chunk)
        assert _fences_balanced(chunk), repr(chunk)


def test_a_long_prose_part_then_a_long_fence_sends_no_fence_only_message() -> None:
    # the shape seen live: long prose, then a fenced block whose line is longer than
    # a message (it sent "```json\n```" on its own)
    text = "word " * 700 + '\n\n```json\n{"data": "' + "y" * 5000 + '"}\n```'
    chunks = split_text(text)
    for chunk in chunks:
        assert _visible(to_html(chunk)), repr(chunk)
    assert "".join(chunks).count("y") == 5000  # nothing lost
