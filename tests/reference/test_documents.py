"""PDF documents on the reference server: read where the real APIs take them, refused
where they do not, and perceived page by page (OCR of each rendered page)."""

from __future__ import annotations

import base64
import functools
import io
from typing import Any

import httpx
import pytest
from PIL import Image, ImageDraw, ImageFont

from visus import limits
from visus.errors import InvalidInputError
from visus.reference.model import document_pages

from .conftest import answer_json

WORDS = ("HARBOR", "LANTERN")


@functools.cache
def _font() -> ImageFont.FreeTypeFont:
    from visus.media import font_path

    return ImageFont.truetype(font_path("DejaVuSans.ttf"), 72)


def _page(word: str) -> Image.Image:
    im = Image.new("RGB", (640, 240), "white")
    ImageDraw.Draw(im).text((60, 70), word, fill="black", font=_font())
    return im


def pdf_of(words: tuple[str, ...]) -> bytes:
    """One page per word (Pillow writes the PDF; pypdfium2 renders it back)."""
    pages = [_page(w) for w in words]
    buf = io.BytesIO()
    pages[0].save(buf, "PDF", save_all=True, append_images=pages[1:], resolution=72)
    return buf.getvalue()


@pytest.fixture(scope="module")
def pdf_b64() -> str:
    return base64.b64encode(pdf_of(WORDS)).decode()


def _strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return [node] if isinstance(node, str) and "```json" in node else []


def _pages_seen(reply: Any) -> list[tuple[list[str], str]]:
    (text,) = _strings(reply)
    block = answer_json(text)
    return [([w["text"] for w in im["words"]], im["where"]) for im in block["images"]]


def _assert_two_pages(reply: Any, where_prefix: str) -> None:
    seen = _pages_seen(reply)
    assert [words for words, _ in seen] == [["HARBOR"], ["LANTERN"]]
    assert [where for _, where in seen] == [f"{where_prefix}/page 1", f"{where_prefix}/page 2"]


def _post(url: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
    return httpx.post(url + path, json=body, headers=headers, timeout=120)


OPENAI = {"authorization": "Bearer k"}
ANTHROPIC = {"x-api-key": "k", "anthropic-version": "2023-06-01"}


def test_document_pages_refuses_what_is_not_a_pdf() -> None:
    with pytest.raises(InvalidInputError, match="not a valid PDF"):
        document_pages(b"%PDF-nonsense", "here")
    with pytest.raises(InvalidInputError, match="at most 1"):
        document_pages(pdf_of(WORDS), "here", max_pages=1)


def test_chat_file_part_in_user_message_is_read(base_url: str, pdf_b64: str) -> None:
    file = {"filename": "w.pdf", "file_data": f"data:application/pdf;base64,{pdf_b64}"}
    body = {
        "model": "gpt-4.1",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "read"}, {"type": "file", "file": file}],
            }
        ],
    }
    r = _post(base_url, "/v1/chat/completions", body, OPENAI)
    assert r.status_code == 200, r.text
    _assert_two_pages(r.json(), "messages[0] (user) part 1")
    # a page costs tokens like an image: far more than the few words of text
    assert r.json()["usage"]["prompt_tokens"] > 1000


def test_chat_file_part_in_tool_message_is_refused(base_url: str, pdf_b64: str) -> None:
    file = {"filename": "w.pdf", "file_data": f"data:application/pdf;base64,{pdf_b64}"}
    body = {
        "model": "gpt-4.1",
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "file", "file": file}]},
        ],
    }
    r = _post(base_url, "/v1/chat/completions", body, OPENAI)
    assert r.status_code == 400
    assert "Invalid value: 'file'" in r.json()["error"]["message"]


def test_chat_file_needs_a_filename_and_a_pdf(base_url: str, pdf_b64: str) -> None:
    def send(file: dict[str, Any]) -> httpx.Response:
        content = [{"type": "file", "file": file}]
        body = {"model": "gpt-4.1", "messages": [{"role": "user", "content": content}]}
        return _post(base_url, "/v1/chat/completions", body, OPENAI)

    r = send({"file_data": f"data:application/pdf;base64,{pdf_b64}"})
    assert r.status_code == 400
    assert "filename" in r.json()["error"]["message"]
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
    r = send({"filename": "x.pdf", "file_data": f"data:image/png;base64,{png}"})
    assert r.status_code == 400
    assert "application/pdf" in r.json()["error"]["message"]
    junk = base64.b64encode(b"not a pdf at all").decode()
    r = send({"filename": "x.pdf", "file_data": f"data:application/pdf;base64,{junk}"})
    assert r.status_code == 400
    assert "not a valid PDF" in r.json()["error"]["message"]


def test_responses_input_file_in_function_output(base_url: str, pdf_b64: str) -> None:
    item = {
        "type": "input_file",
        "filename": "w.pdf",
        "file_data": f"data:application/pdf;base64,{pdf_b64}",
    }
    body = {
        "model": "gpt-4.1",
        "input": [
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": [item]},
        ],
    }
    r = _post(base_url, "/v1/responses", body, OPENAI)
    assert r.status_code == 200, r.text
    _assert_two_pages(r.json(), "input[2] (tool) part 0")
    body["input"] = [{"role": "assistant", "content": [item]}]
    r = _post(base_url, "/v1/responses", body, OPENAI)
    assert r.status_code == 400


def test_anthropic_document_in_tool_result(base_url: str, pdf_b64: str) -> None:
    doc = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": pdf_b64},
    }
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [doc]}],
            },
        ],
    }
    r = _post(base_url, "/v1/messages", body, ANTHROPIC)
    assert r.status_code == 200, r.text
    _assert_two_pages(r.json(), "messages.2.content.0.content.0")
    bad = {**doc, "source": {**doc["source"], "media_type": "image/png"}}
    body["messages"] = [{"role": "user", "content": [bad]}]
    r = _post(base_url, "/v1/messages", body, ANTHROPIC)
    assert r.status_code == 400
    assert "application/pdf" in r.text


def test_anthropic_page_cap(base_url: str) -> None:
    many = base64.b64encode(pdf_of(("A",) * (limits.ANTHROPIC_MAX_PDF_PAGES + 1))).decode()
    doc = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": many},
    }
    # 100 pages on a 200k-context model (600 on the 1M-context ones, such as sonnet-4-6).
    body = {
        "model": "claude-haiku-4-5",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": [doc]}],
    }
    r = _post(base_url, "/v1/messages", body, ANTHROPIC)
    assert r.status_code == 400
    assert f"maximum of {limits.ANTHROPIC_MAX_PDF_PAGES} PDF pages" in r.text
    wide = _post(base_url, "/v1/messages", {**body, "model": "claude-sonnet-4-6"}, ANTHROPIC)
    assert wide.status_code == 200


def test_gemini_inline_pdf_in_user_turn(base_url: str, pdf_b64: str) -> None:
    body = {
        "contents": [
            {
                "role": "user",
                "parts": [{"inlineData": {"mimeType": "application/pdf", "data": pdf_b64}}],
            }
        ]
    }
    r = _post(
        base_url,
        "/v1beta/models/gemini-2.5-flash:generateContent",
        body,
        {"x-goog-api-key": "k"},
    )
    assert r.status_code == 200, r.text
    _assert_two_pages(r.json(), "contents[0].parts[0].inline_data")


def test_bedrock_document_names_are_checked(base_url: str, pdf_b64: str) -> None:
    def send(name: str) -> httpx.Response:
        doc = {"document": {"format": "pdf", "name": name, "source": {"bytes": pdf_b64}}}
        body = {"messages": [{"role": "user", "content": [doc]}]}
        return _post(
            base_url,
            "/model/anthropic.claude-test/converse",
            body,
            {"authorization": "AWS4-HMAC-SHA256 Credential=test"},
        )

    ok = send("Q3 report (v2)")
    assert ok.status_code == 200, ok.text
    _assert_two_pages(ok.json(), "messages.0.content.0.document")
    for bad in ("report.pdf", "a  b", "under_score"):
        r = send(bad)
        assert r.status_code == 400, bad
        assert "name" in r.json()["message"]
