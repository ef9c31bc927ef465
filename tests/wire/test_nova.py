"""Amazon Nova on Bedrock: vision models in the catalog (with their limits), so their
images go out as Converse image blocks instead of notes."""

from __future__ import annotations

import json

import pytest

from visus.models import get_model, image_tokens
from visus.wire import lower

from .corpus import one_view, store
from .sdk_check import check_bedrock

IDS = [
    "amazon.nova-lite-v1:0",
    "us.amazon.nova-lite-v1:0",
    "eu.amazon.nova-pro-v1:0",
    "bedrock:us.amazon.nova-premier-v1:0",
    "us.amazon.nova-2-lite-v1:0",
]


@pytest.mark.parametrize("ref", IDS)
def test_nova_ids_are_bedrock_vision_models_with_their_limits(ref: str) -> None:
    spec = get_model(ref)
    assert spec.provider == "bedrock"
    assert spec.name == ref.removeprefix("bedrock:")  # the id sent is the one given
    assert spec.vision
    assert spec.max_edge == 8000  # Nova's maximum resolution
    assert spec.max_image_bytes <= 3_750_000  # Bedrock Converse's per-image cap
    assert spec.max_images == (5 if "nova-2" in ref else 20)
    assert image_tokens(spec, 900, 900) == (
        230 if "nova-2" in ref else pytest.approx(1300, rel=0.15)
    )


@pytest.mark.parametrize("ref", IDS)
def test_an_image_for_nova_goes_out_as_an_image_block(ref: str) -> None:
    spec = get_model(ref)
    body = lower(one_view(), wire="bedrock", model=spec, blobs=store())
    text = json.dumps(body)
    assert '"image": {"format": "png"' in text
    assert "unavailable" not in text
    assert "cannot see" not in text
    check_bedrock(body, model_id=spec.name)


@pytest.mark.parametrize("ref", ["us.amazon.nova-pro-v1:0", "us.amazon.nova-2-lite-v1:0"])
def test_a_tool_image_for_nova_rides_inside_its_tool_result(ref: str) -> None:
    # Nova takes text and images as a tool's result (its tool-use guide), and accepted
    # Converse traffic carries them there: not hoisted into a following user turn.
    body = lower(one_view(), wire="bedrock", model=get_model(ref), blobs=store())
    messages = body["messages"]
    results = [
        block["toolResult"]
        for m in messages
        for block in m["content"]
        if isinstance(block, dict) and "toolResult" in block
    ]
    assert len(results) == 1
    assert any("image" in item for item in results[0]["content"])
    hoisted = [
        block
        for m in messages
        for block in m["content"]
        if isinstance(block, dict) and "image" in block
    ]
    assert hoisted == []
    check_bedrock(body, model_id=ref)
