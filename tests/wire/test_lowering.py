"""Behaviour of ``lower`` across wires: placement, adjacency, merging, purity, notes."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from typing import Any

import pytest

from visus.errors import IntegrityError, WireError
from visus.models.spec import ModelSpec
from visus.providers import wire_for_provider
from visus.record.messages import (
    AssistantMessage,
    ImagePart,
    ModelRequest,
    TextPart,
    ToolResult,
    UserMessage,
)
from visus.wire import WIRES, lower

from .corpus import (
    BLUE,
    BLUE_PNG,
    CASES,
    CLAUDE,
    ELIDED_TEXT,
    GPT,
    GREEN_ATTACHMENT,
    MISSING_DIGEST,
    RED,
    RED_PNG,
    VARIANTS,
    VIEW_TOOL,
    CountingStore,
    Variant,
    attachment,
    call,
    digest,
    store,
    view_image,
)

VARIANT_IDS = [v.name for v in VARIANTS]


def _lower(request: ModelRequest, v: Variant, blobs: Any = None) -> dict[str, Any]:
    return lower(request, wire=v.wire, model=v.spec, blobs=blobs or store())


def _image_payloads(body: Any) -> list[str]:
    """Every base64 image payload in a body, in document order, on any wire."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "image" and "source" in node:  # anthropic
                found.append(node["source"]["data"])
            elif node.get("type") == "image_url":  # openai chat
                found.append(node["image_url"]["url"].split(",", 1)[1])
            elif node.get("type") == "input_image":  # openai responses
                found.append(node["image_url"].split(",", 1)[1])
            elif "inlineData" in node:  # gemini
                found.append(node["inlineData"]["data"])
            elif "image" in node and isinstance(node["image"], dict):  # bedrock
                found.append(node["image"]["source"]["bytes"])
            if "images" in node:  # ollama
                found.extend(node["images"])
            for key, value in node.items():
                if key not in {"images", "image", "inlineData", "source", "image_url"}:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(body)
    return found


def _strip_images(request: ModelRequest) -> ModelRequest:
    """The same view with every image already turned into a text descriptor."""

    def parts(ps: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(
            TextPart(f"[image elided: {p.digest[:8]}]") if isinstance(p, ImagePart) else p
            for p in ps
        )

    messages = tuple(
        replace(m, parts=parts(m.parts)) if not isinstance(m, AssistantMessage) else m
        for m in request.messages
    )
    return replace(request, messages=messages)


# --- purity and idempotence ---------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_lowering_twice_gives_identical_json(case: str, variant: Variant) -> None:
    request = CASES[case]()
    blobs = store()
    first = json.dumps(lower(request, wire=variant.wire, model=variant.spec, blobs=blobs))
    second = json.dumps(lower(request, wire=variant.wire, model=variant.spec, blobs=blobs))
    assert first == second
    assert request == CASES[case]()  # the view is a value; lowering never changes it


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_no_part_dropped(case: str, variant: Variant) -> None:
    request = CASES[case]()
    body = _lower(request, variant)
    text = json.dumps(body, ensure_ascii=False)
    expected_images = []
    for message in request.messages:
        for part in message.parts:
            if isinstance(part, TextPart):
                escaped = json.dumps(part.text, ensure_ascii=False)[1:-1]
                assert escaped in text, f"text part lost: {part.text!r}"
            elif isinstance(part, ImagePart) and part.digest != MISSING_DIGEST:
                expected_images.append(part.digest)
    payloads = _image_payloads(body)
    assert len(payloads) == len(expected_images)
    for message in request.messages:
        if isinstance(message, AssistantMessage):
            for c in message.tool_calls:
                assert c.id in text or variant.wire == "ollama"  # ollama calls carry no ids
                assert c.name in text


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_already_elided_view_lowers_to_text_and_is_stable(case: str, variant: Variant) -> None:
    flat = _strip_images(CASES[case]())
    body = _lower(flat, variant)
    assert _image_payloads(body) == []
    assert json.dumps(body) == json.dumps(_lower(flat, variant))
    assert _strip_images(flat) == flat  # eliding an elided view changes nothing


def test_keyed_on_shape_not_on_tool_name() -> None:
    request = CASES["one_view"]()
    renamed = replace(
        request,
        messages=tuple(
            replace(m, tool_name="anything_else") if isinstance(m, ToolResult) else m
            for m in request.messages
        ),
    )
    for v in VARIANTS:
        assert len(_image_payloads(_lower(renamed, v))) == 1, v.name
    # and a text part that merely looks like an image stays text
    b64 = "iVBORw0KGgoAAAANSUhEUg=="
    fake = replace(
        request,
        messages=(*request.messages[:2], ToolResult("call_1", "view", (TextPart(b64),))),
    )
    for v in VARIANTS:
        assert _image_payloads(_lower(fake, v)) == [], v.name


# --- where images may go ---------------------------------------------------------------


def _chat(case: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = _lower(CASES[case](), VARIANTS[1])["messages"]
    return messages


@pytest.mark.parametrize("case", sorted(CASES))
def test_openai_chat_images_only_in_user_messages_and_tools_adjacent(case: str) -> None:
    messages = _chat(case)
    for i, m in enumerate(messages):
        if m["role"] != "user":
            assert not _image_payloads(m), f"image in a {m['role']} message"
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            following = messages[i + 1 : i + 1 + len(ids)]
            assert [f["role"] for f in following] == ["tool"] * len(ids)
            assert [f["tool_call_id"] for f in following] == ids
            assert all(isinstance(f["content"], str) for f in following)


def test_openai_chat_parallel_views_hoisted_once_after_the_run() -> None:
    messages = _chat("parallel_views")
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant", "tool", "tool", "user", "assistant", "user"]
    for tool in messages[2:4]:
        assert "shown in the user message after these tool results" in tool["content"]
    hoisted = messages[4]["content"]
    texts = [p["text"] for p in hoisted if p["type"] == "text"]
    assert texts[1].startswith("[image from tool call call_a:")
    assert "red.png" in texts[1]
    assert texts[2].startswith("[image from tool call call_b:")
    assert "blue.png" in texts[2]
    kinds = [p["type"] for p in hoisted]
    assert kinds == ["text", "text", "image_url", "text", "image_url"]
    payloads = _image_payloads(hoisted)
    assert payloads == [_b64(RED_PNG), _b64(BLUE_PNG)]


def test_openai_chat_mixed_run_hoists_only_the_image() -> None:
    messages = _chat("mixed_parallel")
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "user"]
    assert messages[3]["content"] == "1\tbuy milk"
    assert len(_image_payloads(messages[4])) == 1
    assert "call_s" in json.dumps(messages[4])


def test_error_tool_results_are_marked_on_every_wire() -> None:
    request = CASES["error_result"]()
    bodies = {v.name: _lower(request, v) for v in VARIANTS}
    assert bodies["anthropic"]["messages"][2]["content"][0]["is_error"] is True
    assert bodies["openai-chat"]["messages"][2]["content"].startswith("[tool error]")
    assert bodies["openai-responses"]["input"][2]["output"].startswith("[tool error]")
    fr = bodies["gemini-3"]["contents"][2]["parts"][0]["functionResponse"]
    assert "error" in fr["response"]
    assert bodies["ollama"]["messages"][2]["content"].startswith("[tool error]")
    tr = bodies["bedrock-native"]["messages"][2]["content"][0]["toolResult"]
    assert tr["status"] == "error"


def _roles(body: dict[str, Any], key: str) -> list[str]:
    return [m["role"] for m in body[key]]


@pytest.mark.parametrize("case", sorted(CASES))
def test_alternating_wires_alternate(case: str) -> None:
    request = CASES[case]()
    for v in VARIANTS:
        if v.wire == "gemini":
            # What follows a tool run (visus's notes; Gemini 2.x's images) is a user
            # content of its own right after the function responses: the one place two
            # user contents meet.
            contents = _lower(request, v)["contents"]
            roles = [
                c["role"]
                for c, before in zip(contents, [None, *contents], strict=False)
                if before is None
                or c["role"] != "user"
                or not any("functionResponse" in p for p in before["parts"])
            ]
        elif v.wire in {"anthropic", "bedrock"}:
            roles = _roles(_lower(request, v), "messages")
        else:
            continue
        assert roles[0] == "user"
        assert all(a != b for a, b in itertools.pairwise(roles)), (v.name, roles)


def test_tool_results_and_following_user_message_merge_into_one_turn() -> None:
    request = CASES["attachment_and_view"]()
    body = _lower(request, VARIANTS[0])  # anthropic
    last = body["messages"][-1]["content"]
    assert [b["type"] for b in last] == ["tool_result", "text"]
    assert last[0]["content"][0]["type"] == "image"
    # Gemini 2.x: the function responses in one user content, the tool's image in its
    # own user content right after it (the user's next words join that one).
    gem2 = _lower(request, next(v for v in VARIANTS if v.name == "gemini-2"))
    *_, model, responses, media = gem2["contents"]
    assert (model["role"], responses["role"], media["role"]) == ("model", "user", "user")
    assert [next(iter(p)) for p in responses["parts"]] == ["functionResponse"]
    assert [next(iter(p)) for p in media["parts"]] == ["text", "inlineData", "text"]
    assert "call_v" in media["parts"][0]["text"]
    gem3 = _lower(request, next(v for v in VARIANTS if v.name == "gemini-3"))
    parts = gem3["contents"][-1]["parts"]
    assert [next(iter(p)) for p in parts] == ["functionResponse", "text"]
    assert parts[0]["functionResponse"]["parts"][0]["inlineData"]["mimeType"] == "image/png"


def _with_red_live() -> ModelRequest:
    """The "elided" case with turn 1's image still in the record (retention elides it)."""
    request = CASES["elided"]()
    return replace(
        request,
        messages=tuple(
            replace(m, parts=(TextPart("red.png: 4x3 png"), RED)) if m == request.messages[2] else m
            for m in request.messages
        ),
    )


def test_gemini_sends_visus_notes_as_plain_text_after_the_function_responses() -> None:
    """Gemini's ``functionResponse.response`` is JSON: a descriptor there reaches the
    model with its quotes escaped (``view(\\"sha256:...\\")``). visus's notes follow
    the run's function responses as text parts instead, labelled with their call."""
    from visus.retention import RetentionPolicy, model_view

    live_red = _with_red_live()
    view = replace(live_red, messages=model_view(live_red.messages, RetentionPolicy()))
    (descriptor,) = [p.text for p in view.messages[2].parts if "elided" in getattr(p, "text", "")]
    assert 'call view("sha256:' in descriptor
    for name in ("gemini-3", "gemini-2"):
        contents = _lower(view, next(v for v in VARIANTS if v.name == name))["contents"]
        responses, after = contents[2], contents[3]
        (response,) = [p["functionResponse"] for p in responses["parts"]]
        assert response["response"] == {
            "output": "red.png: 4x3 png\n[visus's note on this result follows these tool results]"
        }, name
        assert after == {"role": "user", "parts": [{"text": f"Tool call call_1: {descriptor}"}]}
        assert contents[4]["role"] == "model", name
    # The tool's own text stays in the function response, whatever it looks like.
    own = replace(
        live_red,
        messages=(*live_red.messages[:2], ToolResult("call_1", "view", (TextPart(ELIDED_TEXT),))),
    )
    contents = _lower(own, next(v for v in VARIANTS if v.name == "gemini-3"))["contents"]
    assert contents[-1]["parts"][0]["functionResponse"]["response"] == {"output": ELIDED_TEXT}


def test_bedrock_native_and_hoisted() -> None:
    request = CASES["parallel_views"]()
    native = _lower(request, next(v for v in VARIANTS if v.name == "bedrock-native"))
    turn = native["messages"][2]["content"]
    assert [next(iter(b)) for b in turn] == ["toolResult", "toolResult"]
    assert "image" in turn[0]["toolResult"]["content"][1]
    hoisted = _lower(request, next(v for v in VARIANTS if v.name == "bedrock-hoisted"))
    turn = hoisted["messages"][2]["content"]
    assert [next(iter(b)) for b in turn] == [
        "toolResult",
        "toolResult",
        "text",
        "image",
        "text",
        "image",
    ]
    for block in turn[:2]:
        assert all("image" not in c for c in block["toolResult"]["content"])


def test_ollama_hoists_to_user_images_with_labels() -> None:
    messages = _lower(CASES["parallel_views"](), VARIANTS[5])["messages"]
    assert [m["role"] for m in messages] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "assistant",
        "user",
    ]
    hoisted = messages[4]
    assert hoisted["images"] == [_b64(RED_PNG), _b64(BLUE_PNG)]
    assert "image 1: [image from tool call call_a" in hoisted["content"]
    assert "image 2: [image from tool call call_b" in hoisted["content"]
    assert all("images" not in m for m in messages if m["role"] != "user")


def test_system_and_tools_in_each_wire_shape() -> None:
    request = CASES["system_and_tools"]()
    system = request.system
    bodies = {v.name: _lower(request, v) for v in VARIANTS}
    # a list of one block: it carries the first prompt-cache breakpoint
    assert bodies["anthropic"]["system"] == [
        {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}
    ]
    assert bodies["anthropic"]["tools"][0]["input_schema"]["required"] == ["path"]
    assert bodies["openai-chat"]["messages"][0] == {"role": "system", "content": system}
    assert bodies["openai-responses"]["instructions"] == system
    assert bodies["gemini-3"]["systemInstruction"] == {"parts": [{"text": system}]}
    decls = bodies["gemini-3"]["tools"][0]["functionDeclarations"]
    assert [d["name"] for d in decls] == ["view", "read"]
    assert bodies["ollama"]["messages"][0] == {"role": "system", "content": system}
    assert bodies["bedrock-native"]["system"] == [
        {"text": system},
        {"cachePoint": {"type": "default"}},  # a Claude on Bedrock: cache checkpoints
    ]
    assert bodies["bedrock-native"]["inferenceConfig"] == {"maxTokens": 512}
    assert bodies["bedrock-native"]["toolConfig"]["tools"][1]["toolSpec"]["name"] == "read"


# --- notes instead of failures -----------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANT_IDS)
def test_missing_blob_becomes_a_note(variant: Variant) -> None:
    text = json.dumps(_lower(CASES["missing_blob"](), variant))
    assert f"[image unavailable: blob sha256:{MISSING_DIGEST} is missing]" in text


class _CorruptStore(CountingStore):
    def get(self, key: str) -> bytes:
        raise IntegrityError(f"blob {key} does not match its digest")


def test_corrupt_blob_becomes_a_note() -> None:
    body = lower(CASES["one_view"](), wire="anthropic", model=CLAUDE, blobs=_CorruptStore())
    assert f"blob sha256:{RED.digest} is corrupt" in json.dumps(body)


def test_only_sent_blobs_are_read() -> None:
    blobs = store()
    lower(CASES["elided"](), wire="openai-chat", model=GPT, blobs=blobs)
    assert blobs.reads == [BLUE.digest]


def test_model_without_vision_gets_notes() -> None:
    blind = ModelSpec(name="blind", provider="openai", vision=False)
    blobs = store()
    body = lower(CASES["parallel_views"](), wire="openai-chat", model=blind, blobs=blobs)
    assert _image_payloads(body) == []
    assert "blind does not take images (red.png, 4x3)" in json.dumps(body)
    assert blobs.reads == []


# --- request image cap -------------------------------------------------------------------


def _many(n_views: int, attachments: int = 0) -> tuple[ModelRequest, CountingStore]:
    import io

    from PIL import Image

    blobs = CountingStore()
    parts_att = []
    for i in range(attachments):
        buf = io.BytesIO()
        Image.new("RGB", (5, 5), (i * 40 % 255, 10, 10)).save(buf, "PNG")
        blobs.put(buf.getvalue(), "image/png")
        parts_att.append(attachment(buf.getvalue(), f"a{i}.png", 5, 5))
    messages: list[Any] = [UserMessage((TextPart("go"), *parts_att), turn=1)]
    for i in range(n_views):
        buf = io.BytesIO()
        Image.new("RGB", (6, 4), (10, i * 30 % 255, 10)).save(buf, "PNG")
        blobs.put(buf.getvalue(), "image/png")
        messages.append(AssistantMessage(tool_calls=(call(f"c{i}", "view", f"v{i}.png"),), turn=1))
        messages.append(
            ToolResult(f"c{i}", "view", (view_image(buf.getvalue(), f"v{i}.png", 6, 4),), turn=1)
        )
    return ModelRequest(messages=tuple(messages), tools=(VIEW_TOOL,)), blobs


def test_image_cap_elides_oldest_perceptions_first_and_keeps_attachments() -> None:
    request, blobs = _many(4, attachments=1)
    capped = replace(CLAUDE, max_images=3)
    body = lower(request, wire="anthropic", model=capped, blobs=blobs)
    assert len(_image_payloads(body)) == 3
    assert len(blobs.reads) == 3  # images over the cap are not even read
    text = json.dumps(body)
    assert "viewed v0.png in turn 1; over the 3-image limit of claude-test" in text
    assert "viewed v1.png in turn 1; over the 3-image limit" in text
    assert 'call view(\\"sha256:' in text
    assert "viewed v2.png" not in text
    assert "viewed v3.png" not in text
    assert body["messages"][0]["content"][1]["type"] == "image"  # the attachment stays


def test_image_cap_reaches_attachments_only_when_perceptions_are_gone() -> None:
    request, blobs = _many(1, attachments=3)
    capped = replace(GPT, max_images=1)
    body = lower(request, wire="openai-chat", model=capped, blobs=blobs)
    text = json.dumps(body)
    assert len(_image_payloads(body)) == 1
    assert "viewed v0.png" in text
    assert 'attachment \\"a0.png\\" from turn 1 is over the 1-image limit' in text
    assert 'attachment \\"a1.png\\" from turn 1 is over' in text
    assert "a2.png" not in text.split("[image omitted")[-1]  # the newest stays as pixels


def test_unknown_wire_is_a_wire_error() -> None:
    with pytest.raises(WireError, match="unknown wire"):
        lower(CASES["text_only"](), wire="carrier-pigeon", model=GPT, blobs=store())  # type: ignore[arg-type]


def test_model_by_name_uses_the_catalog() -> None:
    body = lower(
        CASES["one_view"](), wire="anthropic", model="anthropic:claude-sonnet-4-6", blobs=store()
    )
    assert body["model"] == "claude-sonnet-4-6"
    assert len(_image_payloads(body)) == 1


def test_every_wire_in_the_table_and_default_wires() -> None:
    names = {"anthropic", "openai-chat", "openai-responses", "gemini", "ollama", "bedrock"}
    assert set(WIRES) == names
    assert wire_for_provider("openai-compatible") == "openai-chat"
    assert wire_for_provider("bedrock") == "bedrock"
    assert wire_for_provider("openai") == "openai-responses"  # what resolve() sends
    with pytest.raises(WireError):
        wire_for_provider("nobody")


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


def test_attachment_image_keeps_its_position_in_user_content() -> None:
    body = lower(CASES["attachment_and_view"](), wire="openai-responses", model=GPT, blobs=store())
    first = body["input"][0]["content"]
    assert [p["type"] for p in first] == ["input_text", "input_image"]
    assert first[1]["image_url"] == "data:image/png;base64," + _b64(
        store().data[GREEN_ATTACHMENT.digest]
    )
    out = body["input"][2]
    assert out["type"] == "function_call_output"
    assert out["output"][0]["image_url"].endswith(_b64(BLUE_PNG))
    assert digest(BLUE_PNG) == BLUE.digest


def test_wire_cap_applies_on_top_of_a_generous_model() -> None:
    request, blobs = _many(22)
    generous = ModelSpec(name="custom", provider="bedrock", vision=True, max_images=1000)
    body = lower(request, wire="bedrock", model=generous, blobs=blobs)
    assert len(_image_payloads(body)) == 20
    text = json.dumps(body)
    assert "viewed v0.png in turn 1; over the 20-image limit of custom" in text
    assert "viewed v1.png in turn 1; over the 20-image limit" in text
    assert "viewed v2.png" not in text


def test_request_byte_budget_elides_oldest_until_it_fits() -> None:
    from visus.wire._prepare import WireRules, prepare
    from visus.wire._prepared import WireImage, WireTool, WireUser

    request, blobs = _many(3, attachments=1)
    sizes = [len(blobs.data[d]) for d in blobs.data]
    # room for two of the four images (they are all about the same size)
    rules = WireRules(
        media_types=frozenset({"image/png"}), max_request_image_bytes=2 * max(sizes) + 1
    )
    prepared = prepare(request, spec=GPT, rules=rules, blobs=blobs)
    parts = [p for m in prepared.messages if isinstance(m, WireUser | WireTool) for p in m.parts]
    kept = [p for p in parts if isinstance(p, WireImage)]
    notes = [p.text for p in parts if isinstance(p, TextPart) and "image budget" in p.text]
    assert len(kept) == 2
    assert sum(p.size for p in kept) <= rules.max_request_image_bytes
    assert [n.split(";")[0] for n in notes] == [
        "[image elided: viewed v0.png in turn 1",
        "[image elided: viewed v1.png in turn 1",
    ]
    budget = rules.max_request_image_bytes
    assert f"over the {budget:,} bytes image budget of one request" in notes[0]
    # counted as base64 the same budget holds fewer
    b64_rules = replace(rules, base64_byte_limit=True)
    prepared = prepare(request, spec=GPT, rules=b64_rules, blobs=blobs)
    kept = [
        p
        for m in prepared.messages
        if isinstance(m, WireUser | WireTool)
        for p in m.parts
        if isinstance(p, WireImage)
    ]
    assert len(kept) == 1  # the newest always stays, even alone over the budget


class _BrokenStore(CountingStore):
    def get(self, key: str) -> bytes:
        from visus.errors import StoreError

        raise StoreError("disk on fire")


def test_unreadable_store_becomes_a_note_not_a_crash() -> None:
    for v in VARIANTS:
        body = lower(CASES["one_view"](), wire=v.wire, model=v.spec, blobs=_BrokenStore())
        assert f"blob sha256:{RED.digest} cannot be read (disk on fire)" in json.dumps(body)
        assert _image_payloads(body) == []


def test_lowering_a_retention_view_is_idempotent_through_retention() -> None:
    from visus.retention import RetentionPolicy, model_view

    live_red = _with_red_live()
    once = model_view(live_red.messages, RetentionPolicy())
    twice = model_view(once, RetentionPolicy())
    for v in VARIANTS:
        a = _lower(replace(live_red, messages=once), v)
        b = _lower(replace(live_red, messages=twice), v)
        assert json.dumps(a) == json.dumps(b), v.name
        assert len(_image_payloads(a)) == 1  # turn 1's image left the window
        assert '[image elided: call view(\\"sha256:' in json.dumps(a)
