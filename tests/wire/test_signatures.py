"""A tool call's opaque signature goes back on Gemini's functionCall part, nowhere else."""

from __future__ import annotations

import base64
import json
from dataclasses import replace

from visus.record.messages import AssistantMessage, ModelRequest
from visus.wire import lower

from .corpus import VARIANTS, one_view, store
from .sdk_check import CHECKS, check_bedrock

SIG = base64.b64encode(b"\x01\x02signed").decode()


def _signed() -> ModelRequest:
    req = one_view()
    messages = list(req.messages)
    call_msg = messages[1]
    assert isinstance(call_msg, AssistantMessage)
    messages[1] = replace(
        call_msg, tool_calls=tuple(replace(c, signature=SIG) for c in call_msg.tool_calls)
    )
    return replace(req, messages=tuple(messages))


def test_gemini_sends_the_signature_on_the_function_call_part() -> None:
    for v in VARIANTS:
        if v.wire != "gemini":
            continue
        body = lower(_signed(), wire=v.wire, model=v.spec, blobs=store())
        part = body["contents"][1]["parts"][0]
        assert part["functionCall"]["name"] == "view"
        assert part["thoughtSignature"] == SIG
        CHECKS["gemini"](body)
        unsigned = lower(one_view(), wire=v.wire, model=v.spec, blobs=store())
        assert "thoughtSignature" not in unsigned["contents"][1]["parts"][0]


def test_other_wires_leave_it_out() -> None:
    for v in VARIANTS:
        if v.wire == "gemini":
            continue
        body = lower(_signed(), wire=v.wire, model=v.spec, blobs=store())
        assert SIG not in json.dumps(body)
        assert body == lower(one_view(), wire=v.wire, model=v.spec, blobs=store())
        if v.wire == "bedrock":
            check_bedrock(body, model_id=v.spec.name)
        else:
            CHECKS[v.wire](body)
