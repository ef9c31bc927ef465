"""The message splitter: limits, words, inline spans and code fences."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from visus import limits
from visus.telegram.split import split_text, tg_len

_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _fence_lines(chunk: str) -> list[str]:
    return [ln for ln in chunk.splitlines() if _FENCE_LINE.match(ln)]


def _words_without_fences(text: str) -> list[str]:
    return [w for ln in text.splitlines() if not _FENCE_LINE.match(ln) for w in ln.split()]


def test_short_text_is_one_message_unchanged() -> None:
    text = "  hello\n\nworld  "
    assert split_text(text) == [text]
    assert split_text("   \n ") == []


def test_default_limit_is_telegrams_and_no_word_is_broken() -> None:
    words = [f"word{i:04d}" for i in range(1200)]  # ~10 KB
    text = " ".join(words)
    chunks = split_text(text)
    assert len(chunks) == 3
    assert all(tg_len(c) <= limits.TELEGRAM_MAX_TEXT_CHARS for c in chunks)
    assert [w for c in chunks for w in c.split()] == words
    # Filled close to the limit, not cut early.
    assert tg_len(chunks[0]) > limits.TELEGRAM_MAX_TEXT_CHARS - 10


def test_prefers_a_paragraph_break_in_the_second_half() -> None:
    para1 = "a " * 30  # 60 chars
    para2 = "b " * 30
    text = f"{para1.strip()}\n\n{para2.strip()}"
    chunks = split_text(text, limit=100)
    assert chunks == [para1.strip(), para2.strip()]


def test_emoji_count_as_two_units() -> None:
    text = "😀" * 30
    chunks = split_text(text, limit=20)
    assert all(tg_len(c) <= 20 for c in chunks)
    assert "".join(chunks) == text
    assert len(chunks) == 3


def test_inline_code_and_bold_are_not_cut() -> None:
    text = "plain words here `some inline code span` and **a bold phrase** end"
    for limit in range(40, len(text)):
        chunks = split_text(text, limit=limit)
        for c in chunks:
            assert c.count("`") % 2 == 0, (limit, chunks)
            assert c.count("**") % 2 == 0, (limit, chunks)
        assert " ".join(chunks).split() == text.split()


def test_a_fence_cut_is_closed_and_reopened_with_its_language() -> None:
    code = "\n".join(f"x{i} = {i}" for i in range(40))
    text = f"Here is the code:\n\n```python\n{code}\n```\n\nThat was it."
    chunks = split_text(text, limit=120)
    assert len(chunks) > 2
    for c in chunks:
        assert tg_len(c) <= 120
        assert len(_fence_lines(c)) % 2 == 0, c
    inner = [c for c in chunks if c.startswith("```python\n")]
    assert len(inner) >= 2  # reopened with the language
    assert _words_without_fences("\n".join(chunks)) == _words_without_fences(text)


def test_a_word_longer_than_a_message_is_cut_hard() -> None:
    text = "short " + "x" * 50 + " tail"
    chunks = split_text(text, limit=20)
    assert all(tg_len(c) <= 20 for c in chunks)
    assert "".join(chunks).replace(" ", "") == text.replace(" ", "")


def test_limit_too_small_is_refused() -> None:
    with pytest.raises(ValueError, match="at least"):
        split_text("anything", limit=5)


_plain = st.text(alphabet="abcdefghij*_😀é", min_size=1, max_size=12)
_word = st.one_of(_plain, _plain.map(lambda w: f"`{w}`"))
_line = st.lists(_word, min_size=0, max_size=12).map(" ".join)
_fence = st.builds(
    lambda lang, lines: f"```{lang}\n" + "\n".join(lines) + "\n```",
    st.sampled_from(["", "py", "json"]),
    st.lists(_line, max_size=8),
)
_block = st.one_of(_line, _line, _fence)
_doc = st.lists(_block, min_size=1, max_size=12).map("\n".join)


@settings(max_examples=150, deadline=None)
@given(text=_doc, limit=st.integers(min_value=40, max_value=200))
def test_property_every_chunk_fits_and_fences_balance(text: str, limit: int) -> None:
    chunks = split_text(text, limit=limit)
    assert all(tg_len(c) <= limit for c in chunks)
    assert all(c.strip() for c in chunks)
    for c in chunks:
        assert len(_fence_lines(c)) % 2 == 0, (text, chunks)
    # Nothing lost, nothing invented (besides the fence lines added at cuts).
    assert "".join(_words_without_fences("\n".join(chunks))) == "".join(_words_without_fences(text))


_plain_word = st.text(alphabet="abcdefghijklmnop😀", min_size=1, max_size=15)


@settings(max_examples=150, deadline=None)
@given(
    words=st.lists(_plain_word, min_size=1, max_size=200),
    seps=st.lists(st.sampled_from([" ", "\n", "\n\n", "  "]), min_size=200, max_size=200),
    limit=st.integers(min_value=40, max_value=300),
)
def test_property_words_stay_whole_and_in_order(
    words: list[str], seps: list[str], limit: int
) -> None:
    text = "".join(w + s for w, s in zip(words, seps, strict=False))
    chunks = split_text(text, limit=limit)
    assert all(tg_len(c) <= limit for c in chunks)
    assert [w for c in chunks for w in c.split()] == words
