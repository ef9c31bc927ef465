"""Native PDF documents on every wire: snapshots, the SDKs' types, caps and notes."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from typing import Any

import pytest

from visus import limits
from visus.models.spec import ModelSpec
from visus.record.messages import (
    AttachmentOrigin,
    ModelRequest,
    PerceptionOrigin,
    TextPart,
    UserMessage,
)
from visus.wire import lower
from visus.wire._prepare import WireRules, document_filename, max_document_pages
from visus.wire.bedrock import document_name

from .corpus import (
    BLUE,
    CLAUDE,
    GEMINI_2,
    GEMINI_3,
    GPT,
    PDF_VARIANTS,
    RED,
    TWO_PAGE_PDF,
    VARIANTS,
    Variant,
    document,
    pdf_document,
    store,
)
from .sdk_check import CHECKS, check_bedrock
from .test_conformance import SNAPSHOTS, UPDATE, _dump

PDF_B64 = base64.b64encode(TWO_PAGE_PDF).decode()
PDF_URL = f"data:application/pdf;base64,{PDF_B64}"


def _native(name: str) -> Variant:
    return next(v for v in PDF_VARIANTS if v.name == name)


def _lower(variant: Variant, request: ModelRequest | None = None) -> dict[str, Any]:
    req = request if request is not None else pdf_document()
    return lower(req, wire=variant.wire, model=variant.spec, blobs=store())


def test_native_snapshot() -> None:
    text = _dump({v.name: _lower(v) for v in PDF_VARIANTS})
    path = SNAPSHOTS / "pdf_document_native.json"
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), "pdf_document lowered differently"


@pytest.mark.parametrize("variant", PDF_VARIANTS, ids=lambda v: v.name)
def test_sdk_types_accept_native_documents(variant: Variant) -> None:
    body = _lower(variant)
    if variant.wire == "bedrock":
        check_bedrock(body, model_id=variant.spec.name)
    else:
        CHECKS[variant.wire](body)


def _count(value: Any, needle: str) -> int:
    return json.dumps(value).count(needle)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_models_without_pdf_get_a_note_and_no_bytes(variant: Variant) -> None:
    body = _lower(variant)
    assert _count(body, PDF_B64) == 0
    text = json.dumps(body)
    assert text.count("does not take PDF documents natively") == 2
    assert "Q3 report_final.v2.pdf, 2 pages" in text
    assert "docs/spec.pdf, 2 pages" in text


def test_anthropic_document_blocks_in_user_turn_and_tool_result() -> None:
    body = _lower(_native("anthropic"))
    first, _, results = body["messages"]
    doc = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF_B64},
    }
    assert first["content"][1] == {**doc, "title": "Q3 report_final.v2.pdf"}
    tool_result = results["content"][0]
    assert tool_result["type"] == "tool_result"
    assert tool_result["tool_use_id"] == "call_d"
    assert tool_result["content"][1] == {**doc, "title": "spec.pdf"}


def test_openai_chat_file_parts_only_in_user_messages() -> None:
    body = _lower(_native("openai-chat"))
    msgs = body["messages"]
    assert msgs[0]["content"][1] == {
        "type": "file",
        "file": {"filename": "Q3 report_final.v2.pdf", "file_data": PDF_URL},
    }
    tools = [m for m in msgs if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["call_d", "call_i"]
    assert all(isinstance(m["content"], str) for m in tools)
    assert '[document: fetch_pdf("docs/spec.pdf"), spec.pdf, 2 pages;' in tools[0]["content"]
    hoisted = msgs[-1]
    assert hoisted["role"] == "user"
    kinds = [p["type"] for p in hoisted["content"]]
    assert kinds == ["text", "text", "file", "text", "image_url"]
    assert hoisted["content"][0]["text"].startswith("Images and documents returned")
    assert "document from tool call call_d" in hoisted["content"][1]["text"]


def test_openai_responses_input_file_in_output() -> None:
    body = _lower(_native("openai-responses"))
    items = body["input"]
    assert items[0]["content"][1] == {
        "type": "input_file",
        "filename": "Q3 report_final.v2.pdf",
        "file_data": PDF_URL,
    }
    out = next(i for i in items if i.get("call_id") == "call_d" and "output" in i)
    assert out["output"][1] == {"type": "input_file", "filename": "spec.pdf", "file_data": PDF_URL}


def test_gemini_3_in_function_response_parts_gemini_2_hoisted() -> None:
    inline = {"inlineData": {"mimeType": "application/pdf", "data": PDF_B64}}
    g3 = _lower(_native("gemini-3"))["contents"]
    assert g3[0]["parts"][1] == inline
    fr = g3[2]["parts"][0]["functionResponse"]
    assert fr["name"] == "fetch_pdf"
    assert fr["parts"] == [inline]
    g2 = _lower(_native("gemini-2"))["contents"]
    responses, last = g2[2]["parts"], g2[3]["parts"]  # 2.x: the document in its own content
    assert "parts" not in responses[0]["functionResponse"]
    assert "[document: " in responses[0]["functionResponse"]["response"]["output"]
    assert inline in last[1:]
    assert any("document from tool call call_d" in p.get("text", "") for p in last)


def test_bedrock_document_blocks_native_and_hoisted() -> None:
    native = _lower(_native("bedrock-native"))["messages"]
    user_doc = native[0]["content"][1]["document"]
    assert user_doc["format"] == "pdf"
    assert user_doc["name"] == "Q3 reportfinalv2"
    assert user_doc["source"]["bytes"] == PDF_B64
    in_result = native[2]["content"][0]["toolResult"]["content"][1]["document"]
    assert in_result["name"] == "spec"
    hoisted = _lower(_native("bedrock-hoisted"))["messages"][2]["content"]
    assert all(
        "document" not in c
        for b in hoisted
        if "toolResult" in b
        for c in b["toolResult"]["content"]
    )
    assert any("document" in b for b in hoisted)


def test_ollama_never_carries_documents_even_on_a_pdf_model() -> None:
    body = _lower(_native("ollama"))
    assert _count(body, PDF_B64) == 0
    assert "this wire carries no application/pdf documents" in json.dumps(body)


def test_bedrock_names_are_sanitised_and_unique() -> None:
    assert document_name("a__b..c  d\t\te.pdf") == "abc d e"
    assert document_name("...pdf") == "document"
    assert document_name("résumé (v2) [final].pdf") == "rsum (v2) [final]"
    assert len(document_name("x" * 500 + ".pdf")) == limits.BEDROCK_MAX_DOCUMENT_NAME_CHARS
    two = ModelRequest(
        messages=(
            UserMessage(
                (document(AttachmentOrigin("a.pdf")), document(AttachmentOrigin("a.pdf"))), turn=1
            ),
        )
    )
    body = lower(two, wire="bedrock", model=_native("bedrock-native").spec, blobs=store())
    names = [b["document"]["name"] for b in body["messages"][0]["content"] if "document" in b]
    assert names == ["a", "a (2)"]


def test_bedrock_document_count_cap_keeps_the_newest() -> None:
    docs = tuple(
        document(AttachmentOrigin(f"d{i}.pdf")) for i in range(limits.BEDROCK_MAX_DOCUMENTS + 2)
    )
    req = ModelRequest(messages=(UserMessage(docs, turn=1),))
    body = lower(req, wire="bedrock", model=_native("bedrock-native").spec, blobs=store())
    content = [b for b in body["messages"][0]["content"] if "cachePoint" not in b]
    assert sum("document" in b for b in content) == limits.BEDROCK_MAX_DOCUMENTS
    assert "over the 5-document limit" in content[0]["text"]
    assert content[-1]["document"]["name"] == f"d{limits.BEDROCK_MAX_DOCUMENTS + 1}"


def _big(pages: int) -> ModelRequest:
    doc = replace(document(AttachmentOrigin("long.pdf")), page_count=pages)
    return ModelRequest(messages=(UserMessage((TextPart("read"), doc), turn=1),))


def test_anthropic_page_cap_depends_on_the_context_window() -> None:
    claude = replace(CLAUDE, pdf=True, context_tokens=200_000)
    body = lower(_big(101), wire="anthropic", model=claude, blobs=store())
    note = body["messages"][0]["content"][1]
    assert note["type"] == "text"
    assert "at most 100 pages" in note["text"]
    ok = lower(_big(100), wire="anthropic", model=claude, blobs=store())
    assert ok["messages"][0]["content"][1]["type"] == "document"
    large = replace(claude, context_tokens=1_000_000)
    assert max_document_pages(large, WireRules(media_types=frozenset(), max_document_pages=1)) == 1
    body = lower(_big(600), wire="anthropic", model=large, blobs=store())
    assert body["messages"][0]["content"][1]["type"] == "document"
    body = lower(_big(601), wire="anthropic", model=large, blobs=store())
    assert "at most 600 pages" in body["messages"][0]["content"][1]["text"]


def test_openai_page_cap() -> None:
    gpt = replace(GPT, pdf=True)
    body = lower(
        _big(limits.OPENAI_MAX_PDF_PAGES + 1), wire="openai-chat", model=gpt, blobs=store()
    )
    assert "at most 100 pages" in json.dumps(body["messages"][0]["content"])


def test_byte_cap_turns_a_document_into_a_note() -> None:
    big = b"%PDF-1.7\n" + b"0" * (limits.BEDROCK_MAX_DOCUMENT_BYTES)
    s = store()
    s.put(big, "application/pdf")
    doc = document(AttachmentOrigin("huge.pdf"), data=big)
    req = ModelRequest(messages=(UserMessage((doc,), turn=1),))
    body = lower(req, wire="bedrock", model=_native("bedrock-native").spec, blobs=s)
    text = body["messages"][0]["content"][0]["text"]
    assert text.startswith("[document not sent: huge.pdf, 2 pages is ")
    assert "MB document limit" in text


def test_missing_document_blob_is_a_note() -> None:
    doc = replace(document(AttachmentOrigin("gone.pdf")), digest="0" * 64)
    req = ModelRequest(messages=(UserMessage((doc,), turn=1),))
    for spec in (replace(GEMINI_3, pdf=True), replace(GEMINI_2, pdf=True)):
        body = lower(req, wire="gemini", model=spec, blobs=store())
        assert body["contents"][0]["parts"] == [
            {"text": f"[document unavailable: blob sha256:{'0' * 64} is missing]"}
        ]


def test_only_sent_documents_are_read() -> None:
    s = store()
    lower(pdf_document(), wire="anthropic", model=CLAUDE, blobs=s)  # pdf=False
    assert document(AttachmentOrigin("x")).digest not in s.reads


def test_document_filename() -> None:
    assert document_filename(PerceptionOrigin("a/b/c.PDF")) == "c.PDF"
    assert document_filename(PerceptionOrigin("C:\\docs\\x")) == "x.pdf"
    assert document_filename(AttachmentOrigin()) == "document.pdf"
    assert document_filename(AttachmentOrigin("notes")) == "notes.pdf"


def test_lowering_with_documents_is_idempotent() -> None:
    for v in PDF_VARIANTS:
        assert _lower(v) == _lower(v)


def test_unused_spec_fields_are_untouched() -> None:
    # Turning pdf on changes documents only: a request without documents lowers the same.
    req = ModelRequest(messages=(UserMessage((TextPart("hi"),), turn=1),))
    for v, n in zip(VARIANTS, PDF_VARIANTS, strict=True):
        spec: ModelSpec = n.spec
        assert lower(req, wire=v.wire, model=v.spec, blobs=store()) == lower(
            req, wire=n.wire, model=spec, blobs=store()
        )


def test_documents_share_the_inline_budget_on_gemini_not_on_openai() -> None:
    # A PDF just under Gemini's inline cap leaves no room for the older of two images,
    # even re-encoded (each then 38 bytes of WebP: bytes before pixels).
    big = b"%PDF-1.7\n" + b"0" * (limits.GEMINI_MAX_INLINE_BYTES - 60)
    s = store()
    s.put(big, "application/pdf")
    doc = document(AttachmentOrigin("big.pdf"), data=big)
    req = ModelRequest(
        messages=(UserMessage((doc, RED, BLUE, TextPart("compare")), turn=1),),
    )
    body = lower(req, wire="gemini", model=replace(GEMINI_3, pdf=True), blobs=s)
    parts = body["contents"][0]["parts"]
    assert parts[0]["inlineData"]["mimeType"] == "application/pdf"
    assert "image budget of one request" in parts[1]["text"]  # red.png, the older image
    # The newest always stays (re-encoded smaller first: bytes before pixels).
    assert parts[2]["inlineData"]["mimeType"] in ("image/png", "image/webp")
    # without the document both images fit
    alone = ModelRequest(messages=(UserMessage((RED, BLUE), turn=1),))
    body = lower(alone, wire="gemini", model=replace(GEMINI_3, pdf=True), blobs=s)
    assert all("inlineData" in p for p in body["contents"][0]["parts"])
    # OpenAI counts files apart from images: nothing is elided
    small = ModelRequest(
        messages=(UserMessage((document(AttachmentOrigin("a.pdf")), RED, BLUE), turn=1),)
    )
    chat = lower(small, wire="openai-chat", model=replace(GPT, pdf=True), blobs=store())
    assert [p["type"] for p in chat["messages"][0]["content"]] == ["file", "image_url", "image_url"]
