"""Lowered bodies sent over loopback HTTP to the reference server, wire by wire.

The reference server is as strict as each real service and perceives only real image
parts, so every corpus body must be accepted (200) and every image we placed must be
seen, in order, with its size; descriptors must reach it as text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from visus.reference.server import serve_in_background
from visus.wire import lower

from .corpus import (
    CASES,
    ELIDED_TEXT,
    PDF_VARIANTS,
    VARIANTS,
    CountingStore,
    Variant,
    pdf_document,
    store,
)

_JSON_BLOCK = re.compile(r"```json\n(.*?)\n```", re.S)


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


def _path(v: Variant) -> str:
    return {
        "anthropic": "/v1/messages",
        "openai-chat": "/v1/chat/completions",
        "openai-responses": "/v1/responses",
        "gemini": f"/v1beta/models/{v.spec.name}:generateContent",
        "ollama": "/api/chat",
        "bedrock": f"/model/{v.spec.name}/converse",
    }[v.wire]


_HEADERS = {
    "anthropic": {"x-api-key": "k", "anthropic-version": "2023-06-01"},
    "openai-chat": {"authorization": "Bearer k"},
    "openai-responses": {"authorization": "Bearer k"},
    "gemini": {"x-goog-api-key": "k"},
    "ollama": {},
    "bedrock": {"authorization": "AWS4-HMAC-SHA256 Credential=test"},
}


def _post(base_url: str, v: Variant, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(base_url + _path(v), json=body, headers=_HEADERS[v.wire], timeout=120)


def _answer_block(reply: Any) -> dict[str, Any]:
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str):
            found.extend(_JSON_BLOCK.findall(node))

    walk(reply)
    assert len(found) == 1, reply
    block: dict[str, Any] = json.loads(found[0])
    return block


EXPECTED_SIZES: dict[str, list[list[int]]] = {
    "text_only": [],
    "one_view": [[4, 3]],
    "parallel_views": [[4, 3], [3, 4]],
    "attachment_and_view": [[2, 2], [3, 4]],
    "elided": [[3, 4]],
    "missing_blob": [],
    "error_result": [],
    "system_and_tools": [],
    "mixed_parallel": [[4, 3]],
    "pdf_document": [[4, 3]],  # models without pdf: the documents are notes
}


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
@pytest.mark.parametrize("case", sorted(CASES))
def test_reference_server_accepts_and_sees_every_image(
    base_url: str, case: str, variant: Variant
) -> None:
    body = lower(CASES[case](), wire=variant.wire, model=variant.spec, blobs=store())
    response = _post(base_url, variant, body)
    assert response.status_code == 200, response.text
    block = _answer_block(response.json())
    sizes = [[im["width"], im["height"]] for im in block["images"]]
    assert sizes == EXPECTED_SIZES[case]
    if case == "elided":
        # Gemini tool output is a JSON object; the server reads it as JSON text
        seen = [d.replace('\\"', '"') for d in block["descriptors"]]
        assert ELIDED_TEXT in seen


@pytest.mark.parametrize("variant", PDF_VARIANTS, ids=lambda v: v.name)
def test_reference_server_reads_native_documents_page_by_page(
    base_url: str, variant: Variant
) -> None:
    body = lower(pdf_document(), wire=variant.wire, model=variant.spec, blobs=store())
    response = _post(base_url, variant, body)
    assert response.status_code == 200, response.text
    block = _answer_block(response.json())
    wheres = [im["where"] for im in block["images"]]
    sizes = [[im["width"], im["height"]] for im in block["images"]]
    if variant.wire == "ollama":  # no documents on this wire: only the image is seen
        assert sizes == [[4, 3]]
        return
    # the user's PDF (2 pages), the tool's PDF (2 pages), then the tool's image
    assert sizes[-1] == [4, 3]
    assert len(sizes) == 5
    assert [w.rsplit("/", 1)[-1] for w in wheres[:4]] == ["page 1", "page 2"] * 2


def test_reference_server_rejects_a_tool_message_image(base_url: str) -> None:
    # the control: the same server refuses what our lowering never produces
    body = lower(CASES["one_view"](), wire="openai-chat", model=VARIANTS[1].spec, blobs=store())
    hoisted = body["messages"].pop()
    image = next(p for p in hoisted["content"] if p["type"] == "image_url")
    body["messages"][-1]["content"] = [{"type": "text", "text": "x"}, image]
    response = _post(base_url, VARIANTS[1], body)
    assert response.status_code == 400


def test_many_image_rule_satisfies_the_reference_anthropic_endpoint(base_url: str) -> None:
    import base64
    import io
    from dataclasses import replace

    from PIL import Image

    from visus.record.messages import AssistantMessage, TextPart, UserMessage

    from .corpus import CLAUDE
    from .test_refit import _png, _request

    blobs = CountingStore()
    originals = [_png(2400, 40, seed=i) for i in range(21)]
    request = _request(blobs, [(data, "image/png", 2400, 40) for data in originals])
    # end on a tool-call line: the server validates every image but skips perceiving
    # 21 images (OCR), which would dominate the test's time
    done = AssistantMessage((TextPart("Seen."),), turn=1)
    ask = UserMessage((TextPart('call view {"path": "next.png"}'),), turn=2)
    request = replace(request, messages=(*request.messages, done, ask))
    roomy = replace(CLAUDE, max_edge=8000, max_pixels=8000 * 8000)
    anthropic = VARIANTS[0]
    body = lower(request, wire="anthropic", model=roomy, blobs=blobs)
    response = _post(base_url, anthropic, body)
    assert response.status_code == 200, response.text
    assert response.json()["stop_reason"] == "tool_use"
    blocks = [
        inner
        for message in body["messages"]
        for block in message["content"]
        if block["type"] == "tool_result"
        for inner in block.get("content", [])
        if inner["type"] == "image"
    ]
    assert len(blocks) == 21
    for block in blocks:
        with Image.open(io.BytesIO(base64.b64decode(block["source"]["data"]))) as im:
            assert max(im.size) <= 2000
    # control: the same request with the original 2400 px images is refused
    for block, data in zip(blocks, originals, strict=True):
        block["source"]["data"] = base64.b64encode(data).decode()
    refused = _post(base_url, anthropic, body)
    assert refused.status_code == 400
    assert "many-image" in refused.text
