"""The protocol modules on their own: which shapes they recognise and what they change."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

from visus.cli import app as cli_app
from visus.proxy import anthropic, openai_chat, openai_responses
from visus.proxy.edit import UNKNOWN_MODEL, Edit, ImageNote
from visus.proxy.rejection import explain
from visus.proxy.stringified import ImagePiece, TextPiece, parse
from visus.retention import RetentionPolicy
from visus.wire.anthropic import RULES as ANTHROPIC
from visus.wire.openai_chat import HOIST_INTRO

from .conftest import grid

G = grid(1, 2, 61)
URL = G.data_url

SHAPES = [
    {"type": "media", "data": G.b64, "mediaType": "image/png"},  # AI SDK v5/v6
    {"type": "image-data", "data": G.b64, "mediaType": "image/png"},  # AI SDK v6
    {"type": "image", "data": G.b64, "mimeType": "image/png"},  # MCP, AI SDK v4
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": G.b64}},
    {"type": "image_url", "image_url": {"url": URL}},
    {"type": "input_image", "image_url": URL},
    {"type": "content", "value": [{"type": "media", "data": G.b64, "mediaType": "image/png"}]},
    {"content": [{"type": "image", "data": G.b64, "mimeType": "image/png"}], "isError": False},
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: str(s.get("type", "mcp")))
def test_stringified_shapes_become_images(shape: dict[str, Any]) -> None:
    pieces = parse(json.dumps([{"type": "text", "text": "here"}, shape]))
    assert pieces is not None
    assert pieces[0] == TextPiece("here")
    assert pieces[-1] == ImagePiece("image/png", G.b64)


@pytest.mark.parametrize(
    "text", ['{"data": "abc"}', "plain text with data", '[{"type": "text", "text": "data"}]', "{"]
)
def test_text_without_images_stays_text(text: str) -> None:
    assert parse(text) is None


def test_a_data_url_inside_other_text_stays_text() -> None:
    # HTML with an inline image is a document the model may edit, not an image.
    assert parse(f'<img src="{URL}">') is None
    assert parse("data:image/png;base64,not base64!") is None
    assert parse(f"  {URL}\n") == [ImagePiece("image/png", G.b64)]


def test_a_refusal_without_a_position_names_the_only_image() -> None:
    notes = [ImageNote("input[2].output[0]", "input[2].output[0] (image/png 640x240)")]
    body = {"error": {"message": "You uploaded an unsupported image.", "param": None}}
    explained = explain(body, notes)
    assert explained is not None
    assert explained["error"]["message"] == (
        "visus proxy: the provider refused image input[2].output[0] (image/png 640x240): "
        "You uploaded an unsupported image."
    )


def test_unknown_model_gets_the_conservative_profile() -> None:
    edit = Edit.for_model("my-local-vlm", ANTHROPIC, image_count=1)
    assert edit.spec is UNKNOWN_MODEL
    assert edit.profile.max_edge == 1568
    assert Edit.for_model("claude-sonnet-4-6", ANTHROPIC, image_count=1).spec.name != "unknown"


def test_anthropic_many_image_rule_tightens_a_large_model() -> None:
    # The reference model takes 2576 px; over 20 images Anthropic allows 2000.
    assert Edit.for_model("reference", ANTHROPIC, image_count=20).profile.max_edge == 2576
    assert Edit.for_model("reference", ANTHROPIC, image_count=21).profile.max_edge == 2000


def _image_block() -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": G.b64}}


def test_anthropic_retention_elides_old_turns_keeping_cache_control() -> None:
    old = {**_image_block(), "cache_control": {"type": "ephemeral"}}
    body: dict[str, Any] = {
        "model": "claude-sonnet-4-6",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "one"}, old]},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "view", "input": {"path": "a.png"}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [_image_block()]}
                ],
            },
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "text": "two"}, _image_block()]},
        ],
    }
    edit = anthropic.rewrite(body, policy=RetentionPolicy(live_turns=1))
    assert edit.elided == 2
    first = body["messages"][0]["content"][1]
    assert first["type"] == "text"
    assert first["cache_control"] == {"type": "ephemeral"}
    # Its size and digest (a pasted image: no call to offer, no view the client has).
    assert re.fullmatch(
        r"\[image elided: 600x130 sha256:[0-9a-f]{12}, left out by visus proxy\]", first["text"]
    )
    # A tool image of a view call (a client with visus's view): re-view offered.
    inner = body["messages"][2]["content"][0]["content"][0]
    assert inner["text"].startswith('[image elided: call view("sha256:')
    assert body["messages"][4]["content"][1]["type"] == "image"  # the live turn keeps it


def test_chat_hoists_a_run_of_tool_images_after_the_run() -> None:
    calls = [
        {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "shot", "arguments": f'{{"i": {i}}}'},
        }
        for i in (1, 2)
    ]
    body: dict[str, Any] = {
        "model": "gpt-4.1",
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": calls},
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": [{"type": "image_url", "image_url": {"url": URL}}],
            },
            {"role": "tool", "tool_call_id": "c2", "content": "no image"},
        ],
    }
    edit = openai_chat.rewrite(body, policy=None)
    assert edit.hoisted == 1
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "tool", "tool", "user"]  # tool messages adjacent
    assert body["messages"][2]["content"] == (
        '[image: shot({"i": 1}), 600x130; shown in the user message after these tool results]'
    )
    hoisted = body["messages"][4]["content"]
    assert hoisted[0] == {"type": "text", "text": HOIST_INTRO}
    assert hoisted[1]["text"] == '[image from tool call c1: shot({"i": 1}), 600x130]'
    assert hoisted[2] == {"type": "image_url", "image_url": {"url": URL}}


def test_responses_fits_an_oversized_function_output_image() -> None:
    big = grid(1, 2, 62, edge=3000)
    body: dict[str, Any] = {
        "model": "gpt-4.1",
        "input": [
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": [{"type": "input_image", "image_url": big.data_url}],
            }
        ],
    }
    edit = openai_responses.rewrite(body, policy=None)
    assert edit.fitted == 1
    assert body["input"][0]["output"][0]["image_url"].startswith("data:image/")
    assert len(body["input"][0]["output"][0]["image_url"]) < len(big.data_url)


def _screen(width: int, height: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (30, 90, 200)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def test_a_screenshot_the_model_takes_as_it_is_goes_as_its_own_bytes() -> None:
    # 1600x1000 costs gpt-4.1 the same tokens as its 1586x991 fit: no re-encoding.
    shot = _screen(1600, 1000)
    body: dict[str, Any] = {
        "model": "gpt-4.1",
        "input": [
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": [{"type": "input_image", "image_url": shot}],
            }
        ],
    }
    edit = openai_responses.rewrite(body, policy=None)
    assert edit.fitted == 0
    assert body["input"][0]["output"][0]["image_url"] == shot
    # Past what the model takes as it is (4.2 MP), it is still fitted.
    body["input"][0]["output"][0]["image_url"] = _screen(2048, 2100)
    assert openai_responses.rewrite(body, policy=None).fitted == 1


def test_cli_needs_an_upstream_and_a_token_beyond_loopback(tmp_path: Path) -> None:
    (tmp_path / "visus.toml").write_text("")
    runner = CliRunner(env={"VISUS_CONFIG": str(tmp_path / "visus.toml")})
    missing = runner.invoke(cli_app, ["proxy"])
    assert missing.exit_code == 2
    assert "no upstream" in missing.output
    open_bind = runner.invoke(
        cli_app, ["proxy", "--upstream", "https://api.openai.com", "--host", "0.0.0.0"]
    )
    assert open_bind.exit_code == 2
    assert "without a token" in open_bind.output


def test_cli_names_a_port_out_of_range(tmp_path: Path) -> None:
    (tmp_path / "visus.toml").write_text("")
    runner = CliRunner(env={"VISUS_CONFIG": str(tmp_path / "visus.toml")})
    result = runner.invoke(cli_app, ["proxy", "--upstream", "https://x.example", "--port", "70000"])
    assert result.exit_code == 2, result.output  # a usage error, not an OverflowError
    assert "--port" in result.output


def test_cli_reads_the_proxy_section_of_visus_toml(tmp_path: Path) -> None:
    (tmp_path / "visus.toml").write_text(
        '[proxy]\nupstream = "https://api.anthropic.com"\nhost = "0.0.0.0"\n'
    )
    runner = CliRunner(env={"VISUS_CONFIG": str(tmp_path / "visus.toml")})
    result = runner.invoke(cli_app, ["proxy"])
    # Past the upstream check (it came from the file), stopped by the token rule.
    assert result.exit_code == 2
    assert "without a token" in result.output


def _shots(n: int) -> list[str]:
    return [grid(1, 1, 200 + i).data_url for i in range(n)]


def test_live_images_on_the_chat_wire_keeps_the_newest_in_order() -> None:
    shots = _shots(6)
    messages: list[Any] = [{"role": "user", "content": "go"}]
    for i, url in enumerate(shots):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "shot", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        content = [{"type": "image_url", "image_url": {"url": url}}]
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": content})
    body: dict[str, Any] = {"model": "gpt-4.1", "messages": messages}
    edit = openai_chat.rewrite(body, policy=None, live_images=2, chunk=2)
    assert edit.elided == 4  # 6 - 2, in batches of 2
    sent = [
        part["image_url"]["url"]
        for m in body["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for part in m["content"]
        if part.get("type") == "image_url"
    ]
    assert sent == shots[4:]
    tool_texts = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    assert all(t.startswith("[image elided: ") for t in tool_texts[:4])
    assert all(t.endswith("call the tool again for a fresh one]") for t in tool_texts[:4])


def test_live_images_on_the_responses_wire() -> None:
    shots = _shots(5)
    items: list[Any] = [{"role": "user", "content": "go"}]
    for i, url in enumerate(shots):
        items.append(
            {"type": "function_call", "call_id": f"c{i}", "name": "shot", "arguments": "{}"}
        )
        output = [{"type": "input_image", "image_url": url}]
        items.append({"type": "function_call_output", "call_id": f"c{i}", "output": output})
    body: dict[str, Any] = {"model": "gpt-4.1", "input": items}
    edit = openai_responses.rewrite(body, policy=None, live_images=3)
    kinds = [
        it["output"][0]["type"] for it in body["input"] if it.get("type") == "function_call_output"
    ]
    # Without a chunk the window leaves whole: at the 4th image the oldest 3 went.
    assert kinds == ["input_text"] * 3 + ["input_image"] * 2
    assert edit.elided == 3
