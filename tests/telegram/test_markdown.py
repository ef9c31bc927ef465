"""Markdown -> Telegram HTML: the tags Telegram takes, escaping, code, and the
plain-text fallback when the markup is refused."""

from __future__ import annotations

from fastapi import FastAPI
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.telegram.conftest import CHAT, Script, bridge, until
from tests.telegram.fake_bot import FakeBotAPI, parse_entities, text_update
from visus.telegram.markdown import to_html


def test_inline_markup() -> None:
    assert to_html("**bold** and __also__, *it* and _it_, ~~gone~~") == (
        "<b>bold</b> and <b>also</b>, <i>it</i> and <i>it</i>, <s>gone</s>"
    )
    assert to_html("see [the docs](https://example.org/a?b=1&c=2)") == (
        'see <a href="https://example.org/a?b=1&amp;c=2">the docs</a>'
    )


def test_text_is_escaped_and_identifiers_stay_plain() -> None:
    assert to_html("a < b && c > d") == "a &lt; b &amp;&amp; c &gt; d"
    assert to_html("snake_case_name = 2*3*4") == "snake_case_name = 2*3*4"
    assert to_html("`<b>not bold</b>`") == "<code>&lt;b&gt;not bold&lt;/b&gt;</code>"


def test_headings_bullets_and_code_blocks() -> None:
    md = '# Result\n- first\n* second\n\n```json\n{"a": "<1>"}\n```\nafter'
    assert to_html(md) == (
        "<b>Result</b>\n• first\n• second\n\n"
        '<pre><code class="language-json">{"a": "&lt;1&gt;"}</code></pre>\nafter'
    )
    assert to_html("```\nno language") == "<pre>no language</pre>"  # unclosed: still code


_piece = st.one_of(
    st.text(alphabet="abc <>&\"'", min_size=1, max_size=6),
    st.sampled_from(["**x y**", "_it_", "`a<b`", "~~s~~", "[l](https://e.org/q?a=1&b=2)"]),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_piece, max_size=12).map(" ".join))
def test_property_well_formed_markup_gives_valid_html_with_the_same_words(md: str) -> None:
    out = to_html(md)
    visible, error = parse_entities(out)
    assert error == ""
    for ch in "<>&":  # every special character survives as visible text
        assert visible.count(ch) == md.count(ch) - (
            md.count("https://e.org/q?a=1&b=2") if ch == "&" else 0
        )


async def test_refused_markup_falls_back_to_plain_text(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    script.deltas, script.text = (), "**a _b** c_ and **fine**"  # misnests as HTML
    async with bridge(fake, scripted_app) as b:
        fake.push(text_update(CHAT, "go"))
        await until(lambda: b.gateway.finished(CHAT), what="the reply")
    first, second = fake.sent("sendMessage")
    assert first.params["parse_mode"] == "HTML"  # refused by the (fake) Bot API
    assert "parse_mode" not in second.params
    assert second.params["text"] == "**a _b** c_ and **fine**"
    assert fake.chat_view(CHAT) == ["**a _b** c_ and **fine**"]


async def test_final_markup_is_applied_to_the_streamed_preview(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    script.deltas = ("The **answer** ", "is `42`")
    async with bridge(fake, scripted_app) as b:
        fake.push(text_update(CHAT, "go"))
        await until(lambda: b.gateway.finished(CHAT), what="the reply")
    edits = fake.sent("editMessageText")
    assert edits[-1].params["parse_mode"] == "HTML"
    assert edits[-1].params["text"] == "The <b>answer</b> is <code>42</code>"
    assert fake.chat_view(CHAT) == ["The answer is 42"]
