"""Every corpus conversation on every wire: pinned snapshots and the SDKs' own types.

Set ``VISUS_UPDATE_SNAPSHOTS=1`` to rewrite ``snapshots/`` after an intended change;
otherwise any difference fails.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from visus.wire import lower

from .corpus import CASES, VARIANTS, Variant, store
from .sdk_check import CHECKS, check_bedrock, validate_typed

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("VISUS_UPDATE_SNAPSHOTS") == "1"


def _lowered(case: str) -> dict[str, Any]:
    return {
        v.name: lower(CASES[case](), wire=v.wire, model=v.spec, blobs=store()) for v in VARIANTS
    }


def _dump(value: Any) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("case", sorted(CASES))
def test_snapshot(case: str) -> None:
    text = _dump(_lowered(case))
    path = SNAPSHOTS / f"{case}.json"
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no snapshot {path.name}; run with VISUS_UPDATE_SNAPSHOTS=1"
    assert text == path.read_text(encoding="utf-8"), f"{case} lowered differently"


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_sdk_types_accept(case: str, variant: Variant) -> None:
    body = lower(CASES[case](), wire=variant.wire, model=variant.spec, blobs=store())
    if variant.wire == "bedrock":
        check_bedrock(body, model_id=variant.spec.name)
    else:
        CHECKS[variant.wire](body)


# --- negative controls: the checks bite ---------------------------------------------

IMAGE_URL = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


def _chat_body(message: dict[str, Any]) -> dict[str, Any]:
    return {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}, message]}


def test_openai_chat_rejects_image_in_tool_message() -> None:
    tool = {"role": "tool", "tool_call_id": "call_1", "content": [IMAGE_URL]}
    with pytest.raises(ValidationError):
        validate_typed("openai-chat", _chat_body(tool))


def test_openai_chat_rejects_image_in_assistant_message() -> None:
    assistant = {"role": "assistant", "content": [IMAGE_URL]}
    with pytest.raises(ValidationError):
        validate_typed("openai-chat", _chat_body(assistant))


def test_lazy_validation_alone_would_accept_the_tool_image() -> None:
    # Why materialise exists: without consuming the iterators, the bad payload passes.
    tool = {"role": "tool", "tool_call_id": "call_1", "content": [IMAGE_URL]}
    validate_typed("openai-chat", _chat_body(tool), lazy=True)
    with pytest.raises(ValidationError):
        validate_typed("openai-chat", _chat_body(tool))


def test_openai_chat_accepts_image_in_user_message() -> None:
    validate_typed("openai-chat", _chat_body({"role": "user", "content": [IMAGE_URL]}))


def test_openai_chat_rejects_misspelt_field() -> None:
    with pytest.raises(ValidationError):
        validate_typed("openai-chat", _chat_body({"role": "user", "contents": "hi"}))


def test_anthropic_rejects_image_block_of_wrong_shape() -> None:
    bad = {
        "model": "claude-test",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": [{"type": "image", "data": "iVBORw0KGgo="}]}],
    }
    with pytest.raises(ValidationError):
        validate_typed("anthropic", bad)


def test_responses_rejects_image_with_bad_detail() -> None:
    bad = {
        "model": "gpt-test",
        "input": [
            {
                "type": "function_call_output",
                "call_id": "c",
                "output": [{"type": "input_image", "image_url": "data:,", "detail": "huge"}],
            }
        ],
    }
    with pytest.raises(ValidationError):
        validate_typed("openai-responses", bad)


def test_botocore_rejects_image_bytes_in_wrong_place() -> None:
    bad = {
        "messages": [{"role": "user", "content": [{"image": {"format": "png", "bytes": "aGk="}}]}]
    }
    with pytest.raises(AssertionError, match="Unknown parameter"):
        check_bedrock(bad)


def test_gemini_rejects_snake_and_camel_mix_typo() -> None:
    from .sdk_check import check_gemini

    bad = {"contents": [{"role": "user", "parts": [{"inlineDatum": {"data": "aGk="}}]}]}
    with pytest.raises(ValidationError):
        check_gemini(bad)
