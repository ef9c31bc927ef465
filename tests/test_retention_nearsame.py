"""A screen that changed by a few pixels is a changed screen (issue 24).

Only a screen whose fitted bytes equal a live image's is sent as "[image unchanged:
...]"; ``python -m benchmarks nearsame`` measured that no perceptual criterion separates
a caret blink or a clock tick from a changed letter, digit or sign (they change as few
pixels), so none is used. This guards that decision: every small change, meaningful or
cosmetic, reaches the model as pixels, and an identical screen still does not.
"""

from __future__ import annotations

import hashlib
import tempfile

from tests.nearsame import PAIRS, Screen, draw
from visus.perception import Reach, Refusal, view
from visus.record.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    PerceptionOrigin,
    TextPart,
    ToolCall,
    ToolResult,
    UserMessage,
)
from visus.retention import RetentionPolicy, model_view


def _step(n: int, png: bytes, reach: Reach) -> list[Message]:
    """The agent's view of screen.png at step ``n``, as its record holds it."""
    seen = view(png, reach=reach, model="claude-sonnet-4-6", name="screen.png")
    assert not isinstance(seen, Refusal), seen
    digest = hashlib.sha256(seen.data).hexdigest()
    image = ImagePart(
        digest, seen.media_type, len(seen.data), seen.width, seen.height, PerceptionOrigin("s")
    )
    call = ToolCall(f"c{n}", "view", {"path": "screen.png"})
    return [
        AssistantMessage(tool_calls=(call,), turn=1),
        ToolResult(f"c{n}", "view", (TextPart("screen.png"), image), turn=1),
    ]


def test_every_small_change_is_sent_and_only_an_identical_screen_is_not() -> None:
    reach = Reach([tempfile.mkdtemp()])
    base = draw(Screen())
    policy = RetentionPolicy(live_images=4, image_chunk=4)
    record: list[Message] = [UserMessage((TextPart("watch the screen"),), turn=1)]
    for n, (name, _, variant) in enumerate(PAIRS):
        changed = draw(variant)
        record += _step(3 * n, base, reach) + _step(3 * n + 1, changed, reach)
        newest = model_view(record, policy)[-1]
        assert isinstance(newest, ToolResult)
        assert isinstance(newest.parts[1], ImagePart), name  # pixels, not a note
        record += _step(3 * n + 2, changed, reach)  # the very same screen again
        again = model_view(record, policy)[-1]
        assert isinstance(again, ToolResult)
        assert isinstance(again.parts[1], TextPart), name
        assert again.parts[1].text.startswith("[image unchanged:"), name
