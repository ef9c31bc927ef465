"""Append-only retention for models that bind their reasoning to the prefix: the family
policy (``policy_for``), evictions only at a ceiling in one batch, and the reasoning an
eviction cost left out of the requests after it (sent once, on the evicting request)."""

from __future__ import annotations

import itertools
import random

from visus.models import get_model, image_tokens
from visus.record.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    PerceptionOrigin,
    ProviderState,
    TextPart,
    ToolCall,
    ToolResult,
    UserMessage,
)
from visus.retention import (
    APPEND_ONLY_FAMILIES,
    Ceiling,
    RetentionPolicy,
    Shown,
    evicted_over,
    model_view,
    plan_tool_images,
    policy_for,
)

OPUS = get_model("claude-opus-5-5")
W, H = 1280, 800


def _record(steps: int) -> list[Message]:
    record: list[Message] = [UserMessage((TextPart("go"),), turn=1)]
    for n in range(steps):
        state = ProviderState("anthropic", f'[{{"type":"thinking","signature":"s{n}"}}]')
        record.append(
            AssistantMessage(tool_calls=(ToolCall(f"c{n}", "view", {}),), provider_state=state)
        )
        shot = ImagePart(f"{n:064x}", "image/png", 1000, W, H, PerceptionOrigin("s.png"))
        record.append(ToolResult(f"c{n}", "view", (shot,), turn=1))
    return record


def _live(view: tuple[Message, ...]) -> int:
    return sum(isinstance(p, ImagePart) for m in view for p in m.parts)


def test_policy_for_decides_per_family() -> None:
    opus = policy_for(OPUS)
    assert opus.append_only
    assert opus.append_tokens == APPEND_ONLY_FAMILIES["claude-opus-5"].tokens
    haiku = policy_for(get_model("claude-haiku-5-5"))  # measured: not the fallback
    assert haiku.append_only
    assert (haiku.append_tokens, haiku.share) == (10_000, 0.9)
    assert policy_for(get_model("claude-sonnet-4-6")).append_only is False
    assert policy_for(get_model("gpt-5")).append_only is False
    assert policy_for(OPUS, RetentionPolicy(append_only=False)).append_only is False


def test_append_only_evicts_only_at_the_ceiling_in_one_batch() -> None:
    tokens = image_tokens(OPUS, W, H)
    policy = RetentionPolicy(append_tokens=10 * tokens)
    live = [_live(model_view(_record(n), policy, model=OPUS)) for n in range(1, 31)]
    # No window of 4: images pile up to ten, then half of what fits leaves at once.
    assert live[:10] == list(range(1, 11))
    drops = [n for n in range(1, 30) if live[n] < live[n - 1]]
    assert all(live[n - 1] - live[n] + 1 >= 5 for n in drops)
    assert len(drops) <= 30 // 5
    # A provider's ceiling (images per request) tightens the model's.
    shots = [Shown(f"{n:064x}", 1000, tokens) for n in range(30)]
    fates = plan_tool_images(shots, RetentionPolicy(), model=OPUS, ceiling=Ceiling(images=8))
    assert sum(f.kind == "live" for f in fates) <= 8


def test_reasoning_an_eviction_cost_is_sent_once() -> None:
    tokens = image_tokens(OPUS, W, H)
    policy = RetentionPolicy(append_tokens=10 * tokens)
    views = [model_view(_record(n), policy, model=OPUS) for n in range(1, 31)]
    live = [_live(v) for v in views]
    evicting = [n for n in range(1, 30) if live[n] < live[n - 1] + 1]
    assert evicting
    for view in views:  # the latest reply's reasoning always goes
        said = [m for m in view if isinstance(m, AssistantMessage)]
        assert said[-1].provider_state is not None
    first = evicting[0]
    after = [m for m in views[first + 1] if isinstance(m, AssistantMessage)]
    assert any(m.provider_state is None for m in after)  # left out after the eviction
    at = [m for m in views[first] if isinstance(m, AssistantMessage)]
    assert all(m.provider_state is not None for m in at)  # sent on the evicting request
    # The model that does not bind its reasoning keeps every block in every view.
    sonnet = get_model("claude-sonnet-4-6")
    for n in range(1, 31):
        view = model_view(_record(n), RetentionPolicy(), model=sonnet)
        assert all(m.provider_state is not None for m in view if isinstance(m, AssistantMessage))


def test_evictions_never_come_back_as_a_history_grows() -> None:
    """The eviction count of a growing history never goes down (else an image would come
    back live, change the prefix and cost every later reasoning block again): with
    repeats (an unchanged screen costs nothing while its twin is live) it did."""
    rnd = random.Random(7)
    digests = [f"{rnd.randrange(150):064x}" for _ in range(400)]
    shots = [Shown(d, rnd.randrange(50_000, 90_000), 1960) for d in digests]
    for cap in (Ceiling(image_tokens=100_000), Ceiling(images=30), Ceiling(image_bytes=2_000_000)):
        counts = [evicted_over(shots[:n], cap, share=0.5) for n in range(1, len(shots) + 1)]
        assert all(a <= b for a, b in itertools.pairwise(counts))
        assert max(counts) > 0
