"""Gemini generateContent through google-genai and raw HTTP."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors, types

from .conftest import Grid, answer_json, assert_grid_seen

VIEW = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="view",
            description="look",
            parameters=types.Schema(
                type=types.Type.OBJECT, properties={"path": types.Schema(type=types.Type.STRING)}
            ),
        )
    ]
)


_clients: list[genai.Client] = []


def _client(url: str) -> genai.Client:
    # A genai.Client closes its HTTP client when collected, even while a call made
    # through ``client.models`` is still running; keep every client alive.
    client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=url))
    _clients.append(client)
    return client


def _png(grid: Grid) -> types.Part:
    return types.Part.from_bytes(data=grid.png, mime_type="image/png")


def test_sdk_sees_a_3x3_grid(base_url: str, grid3: Grid) -> None:
    r = _client(base_url).models.generate_content(
        model="gemini-2.5-flash", contents=[_png(grid3), "what is written?"]
    )
    assert_grid_seen(r.text or "", grid3)
    assert r.usage_metadata is not None
    # Gemini 2.x: 900x390 is past 384 px, so 768 px tiles: 2 x 1 tiles at 258, + 4 text tokens.
    assert r.usage_metadata.prompt_token_count == 2 * 258 + 4


def test_sdk_streaming(base_url: str, grid2: Grid) -> None:
    chunks = list(
        _client(base_url).models.generate_content_stream(
            model="gemini-2.5-flash", contents=[_png(grid2)]
        )
    )
    assert len(chunks) > 2
    assert_grid_seen("".join(c.text or "" for c in chunks), grid2)
    assert chunks[-1].usage_metadata is not None


def test_function_call_then_images_after_the_response(base_url: str, grid2: Grid) -> None:
    client = _client(base_url)
    config = types.GenerateContentConfig(
        tools=[VIEW], automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)
    )
    ask = types.Content(role="user", parts=[types.Part(text='call view {"path": "g.png"}')])
    first = client.models.generate_content(model="gemini-2.5-flash", contents=[ask], config=config)
    calls = first.function_calls or []
    assert [(c.name, c.args) for c in calls] == [("view", {"path": "g.png"})]
    call_turn = first.candidates[0].content  # type: ignore[index]
    assert call_turn is not None
    result = types.Content(
        role="user",
        parts=[
            types.Part(
                function_response=types.FunctionResponse(
                    id=calls[0].id, name="view", response={"output": "g.png, image follows"}
                )
            ),
            _png(grid2),
        ],
    )
    second = client.models.generate_content(
        model="gemini-2.5-flash", contents=[ask, call_turn, result], config=config
    )
    assert not second.function_calls
    assert_grid_seen(second.text or "", grid2)


def _post(url: str, body: dict[str, Any], model: str = "gemini-2.5-flash") -> httpx.Response:
    return httpx.post(
        f"{url}/v1beta/models/{model}:generateContent",
        headers={"x-goog-api-key": "k"},
        json=body,
        timeout=60,
    )


def test_strictness(base_url: str, grid2: Grid) -> None:
    image = {"inlineData": {"mimeType": "image/png", "data": grid2.b64}}
    in_model = _post(
        base_url,
        {
            "contents": [
                {"role": "user", "parts": [{"text": "hi"}]},
                {"role": "model", "parts": [image]},
            ]
        },
    )
    assert in_model.status_code == 400
    assert in_model.json()["error"]["status"] == "INVALID_ARGUMENT"
    gif = _post(
        base_url,
        {
            "contents": [
                {
                    "role": "user",
                    "parts": [{"inlineData": {"mimeType": "image/gif", "data": grid2.b64}}],
                }
            ]
        },
    )
    assert gif.json()["error"]["message"] == "Unsupported MIME type: image/gif"
    bad = _post(
        base_url,
        {"contents": [{"parts": [{"inlineData": {"mimeType": "image/png", "data": "!!!"}}]}]},
    )
    assert "Base64 decoding failed" in bad.json()["error"]["message"]
    orphan = _post(
        base_url,
        {
            "contents": [
                {"role": "user", "parts": [{"functionResponse": {"name": "view", "response": {}}}]}
            ]
        },
    )
    assert (
        "function response turn comes immediately after a function call turn"
        in (orphan.json()["error"]["message"])
    )
    nested = {"functionResponse": {"name": "view", "response": {}, "parts": [image]}}
    contents = [
        {"role": "user", "parts": [{"text": "x"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "view", "args": {}}}]},
        {"role": "user", "parts": [nested]},
    ]
    # Images inside functionResponse.parts: Gemini 3 only.
    assert _post(base_url, {"contents": contents}).status_code == 400
    gemini3 = _post(base_url, {"contents": contents}, model="gemini-3-flash-preview")
    assert gemini3.status_code == 200
    assert _post(base_url, {"contents": contents}, model="reference").status_code == 200
    assert (
        len(answer_json(gemini3.json()["candidates"][0]["content"]["parts"][0]["text"])["images"])
        == 1
    )
    no_key = httpx.post(
        f"{base_url}/v1beta/models/gemini-2.5-flash:generateContent",
        json={"contents": [{"parts": [{"text": "hi"}]}]},
    )
    assert no_key.status_code == 403
    assert no_key.json()["error"]["status"] == "PERMISSION_DENIED"
    by_query = httpx.post(
        f"{base_url}/v1beta/models/gemini-2.5-flash:generateContent?key=k",
        json={"contents": [{"parts": [{"text": "hi"}]}]},
    )
    assert by_query.status_code == 200


def test_stringified_image_overflows_the_context(small_url: str, grid2: Grid) -> None:
    with pytest.raises(errors.ClientError) as info:
        _client(small_url).models.generate_content(
            model="gemini-2.5-flash", contents=["look: " + grid2.b64]
        )
    assert info.value.code == 400
    assert info.value.status == "INVALID_ARGUMENT"
    assert "exceeds the maximum number of tokens allowed (2000)" in (info.value.message or "")


def test_streamed_function_calls(base_url: str) -> None:
    config = types.GenerateContentConfig(
        tools=[VIEW], automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)
    )
    chunks = list(
        _client(base_url).models.generate_content_stream(
            model="gemini-2.5-flash", contents='call view {"path": "a"}', config=config
        )
    )
    calls = [c for chunk in chunks for c in chunk.function_calls or []]
    assert [(c.name, c.args) for c in calls] == [("view", {"path": "a"})]
    assert chunks[-1].candidates is not None
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
