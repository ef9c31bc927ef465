"""Checked by mypy, not run: each wire's request body (and the tether client's) is a
TypedDict, so a misspelled key is a type error (issue 29).

pyproject.toml's ``[tool.mypy] files`` lists this folder. Every misspelled line carries
``# type: ignore[typeddict-unknown-key]``; under ``strict`` (``warn_unused_ignores``)
an ignore that silences nothing is itself an error, so if a body went back to
``dict[str, Any]`` mypy would fail here. The correctly spelled lines must pass as they
are.
"""

from __future__ import annotations

from visus.analyze._gemini_video import request_body
from visus.tether.client import NewInstance, PollQuery
from visus.wire import anthropic, bedrock, gemini, ollama, openai_chat, openai_responses


def top_level(
    a: anthropic.Request,
    c: openai_chat.Request,
    r: openai_responses.Request,
    g: gemini.Request,
    o: ollama.Request,
    b: bedrock.Request,
) -> None:
    a["max_tokens"] = 1
    a["max_token"] = 1  # type: ignore[typeddict-unknown-key]
    c["prompt_cache_key"] = "k"
    c["prompt_cache_keys"] = "k"  # type: ignore[typeddict-unknown-key]
    r["instructions"] = "x"
    r["instruction"] = "x"  # type: ignore[typeddict-unknown-key]
    g["generationConfig"] = {"maxOutputTokens": 1}
    g["generationConfigs"] = {"maxOutputTokens": 1}  # type: ignore[typeddict-unknown-key]
    o["stream"] = False
    o["streams"] = False  # type: ignore[typeddict-unknown-key]
    b["inferenceConfig"] = {"maxTokens": 1}
    b["inferenceConfiguration"] = {"maxTokens": 1}  # type: ignore[typeddict-unknown-key]


def nested() -> None:
    text: anthropic.TextBlock = {"type": "text", "text": "hi"}
    typo: anthropic.TextBlock = {
        "type": "text",
        "text": "hi",
        "cache_contol": {"type": "ephemeral"},  # type: ignore[typeddict-unknown-key]
    }
    blob: gemini.Blob = {"mimeType": "video/mp4", "data": ""}
    part: gemini.InlineData = {"inlineData": blob}
    snake: gemini.InlineData = {
        "inlineData": blob,
        "media_resolution": {"level": "MEDIA_RESOLUTION_HIGH"},  # type: ignore[typeddict-unknown-key]
    }
    del text, typo, part, snake


def analyze_video_body() -> None:
    body = request_body(b"...", "video/mp4", "What happens?")
    body["contents"][0]["role"] = "user"
    body["content"] = []  # type: ignore[typeddict-unknown-key]


def tether_client_bodies(new: NewInstance, query: PollQuery) -> None:
    new["roots"] = ["/srv"]
    new["root"] = ["/srv"]  # type: ignore[typeddict-unknown-key]
    query["max_bytes"] = 1
    query["max_byte"] = 1  # type: ignore[typeddict-unknown-key]
