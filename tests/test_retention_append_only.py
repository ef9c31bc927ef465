"""Append-only retention for models that bind their reasoning to the prefix: the family
policy (``policy_for``), evictions only at a ceiling in one batch, and the reasoning an
eviction cost left out of the requests after it (sent once, on the evicting request)."""

from __future__ import annotations

import itertools
import random

from visus import limits
from visus.models import BEDROCK_IDS, CATALOG, get_model, image_tokens
from visus.record.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    PerceptionOrigin,
    ProviderState,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
)
from visus.retention import (
    APPEND_ONLY_FAMILIES,
    Ceiling,
    Hold,
    RetentionPolicy,
    Shown,
    evicted_over,
    model_view,
    plan_tool_images,
    policy_for,
)

OPUS = get_model("claude-opus-5-5")
W, H = 1280, 800


def _record(steps: int, reasoned: int = 0) -> list[Message]:
    """``steps`` screenshots, each asked for by a reply that reasoned ``reasoned`` tokens."""
    record: list[Message] = [UserMessage((TextPart("go"),), turn=1)]
    for n in range(steps):
        state = ProviderState("anthropic", f'[{{"type":"thinking","signature":"s{n}"}}]')
        call = ToolCall(f"c{n}", "view", {})
        usage = Usage(input_tokens=1, output_tokens=reasoned)
        record.append(AssistantMessage(tool_calls=(call,), usage=usage, provider_state=state))
        shot = ImagePart(f"{n:064x}", "image/png", 1000, W, H, PerceptionOrigin("s.png"))
        record.append(ToolResult(f"c{n}", "view", (shot,), turn=1))
    return record


def _live(view: tuple[Message, ...]) -> int:
    return sum(isinstance(p, ImagePart) for m in view for p in m.parts)


#: Each catalog model that binds its reasoning, by the family key it must take.
_FAMILY_OF = {
    "claude-opus-5-5": "claude-opus-5",
    "claude-sonnet-5-5": "claude-sonnet-5",
    "claude-haiku-5-5": "claude-haiku-5",
    "claude-fable-5-1": "claude-fable-5",
    "claude-fable-5-2": "claude-fable-5",
    "claude-mythos-5-2": "claude-mythos-5",
    "gpt-5.6-sol": "gpt-5.6",
    "gpt-5.6-terra": "gpt-5.6",
    "gpt-5.6-luna": "gpt-5.6",
    "gpt-6-astra": "gpt-6",
    "gpt-6-sol": "gpt-6",
    "gpt-6-luna": "gpt-6",
    "gpt-6.1-sol": "gpt-6",
    "gpt-6.1-terra": "gpt-6",
}


def test_policy_for_decides_per_family() -> None:
    """Every catalog model that binds its reasoning takes its family's measured
    break-even, under each of its names (Bedrock ids, dated snapshots), matched by one
    family key alone, and none takes the fallback."""
    opus = policy_for(OPUS)
    assert opus.append_only
    assert opus.append_tokens == APPEND_ONLY_FAMILIES["claude-opus-5"].tokens
    binding = {name for name, spec in CATALOG.items() if spec.preserved_thinking}
    assert binding == set(_FAMILY_OF)  # a new binding model needs its family measured
    fallback = (limits.RETENTION_APPEND_ONLY_TOKENS, limits.RETENTION_APPEND_ONLY_SHARE)
    bedrock = {name: [b for b, to in BEDROCK_IDS.items() if to == name] for name in binding}
    for name, key in _FAMILY_OF.items():
        chosen = APPEND_ONLY_FAMILIES[key]
        for alias in (name, f"{name}-2026-10-01", f"{name}@20261001", *bedrock[name]):
            spec = get_model(alias)
            assert [k for k in APPEND_ONLY_FAMILIES if k in spec.name] == [key], alias
            policy = policy_for(spec)
            assert policy.append_only, alias
            assert (policy.append_tokens, policy.share) == (chosen.tokens, chosen.share), alias
            assert (policy.append_tokens, policy.share) != fallback, alias
    assert all(bedrock[n] for n in binding if n.startswith("claude-"))
    # A model that does not bind keeps the count window, whatever key its id contains
    # (the legacy Fable 5, Opus 5, Sonnet 5).
    for name in ("claude-sonnet-4-6", "gpt-5", "claude-fable-5", "claude-opus-5"):
        assert policy_for(get_model(name)).append_only is False, name
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
        assert not said[-1].provider_state.left_out
    first = evicting[0]
    after = [m for m in views[first + 1] if isinstance(m, AssistantMessage)]
    assert any(m.provider_state and m.provider_state.left_out for m in after)  # left out
    at = [m for m in views[first] if isinstance(m, AssistantMessage)]
    # Sent on the evicting request.
    assert all(m.provider_state and not m.provider_state.left_out for m in at)
    # The model that does not bind its reasoning keeps every block in every view.
    sonnet = get_model("claude-sonnet-4-6")
    for n in range(1, 31):
        view = model_view(_record(n), RetentionPolicy(), model=sonnet)
        said = [m for m in view if isinstance(m, AssistantMessage)]
        assert all(m.provider_state and not m.provider_state.left_out for m in said)


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


WEIGHED = RetentionPolicy(weigh_reasoning=True)


def _evictions(reasoned: int, steps: int = 180, policy: RetentionPolicy = WEIGHED) -> list[int]:
    """The steps whose request evicted on Opus 5.5 (its 10k break-even)."""
    record = [_record(n, reasoned) for n in range(1, steps + 1)]
    live = [_live(model_view(r, policy, model=OPUS)) for r in record]
    return [n + 1 for n in range(1, steps) if live[n] < live[n - 1] + 1]


def test_the_first_eviction_waits_while_the_reasoning_it_drops_costs_more() -> None:
    """A reply that reasons little: images leave at the break-even (~step 8 of 1280x800
    screens on Opus). One that reasons 1,000 tokens a reply: they stay until the reads
    they cost cover the reasoning an eviction drops (a short run keeps all of it), then
    the history evicts at the break-even as a long run should."""
    none, little, much = _evictions(0, 40), _evictions(48, 40), _evictions(1000)
    tokens = image_tokens(OPUS, W, H)
    at_break_even = APPEND_ONLY_FAMILIES["claude-opus-5"].tokens // tokens + 1
    assert none[0] == at_break_even  # nothing to drop: at once
    assert at_break_even < little[0] < 2 * at_break_even  # a few steps of reads
    assert much[0] > 5 * at_break_even  # it waited
    # Then the break-even, as the model reasoning little does: the same gaps.
    gaps = [b - a for a, b in itertools.pairwise(much)]
    assert gaps
    assert max(gaps) <= max(b - a for a, b in itertools.pairwise(little)) + 1
    # The rule, priced for the model: reads (0.05x) past the break-even against the
    # reasoning (output, 5x) dropped; no reasoning pending, it leaves at once.
    hold = policy_for(OPUS, WEIGHED).hold(OPUS)
    assert hold == Hold(APPEND_ONLY_FAMILIES["claude-opus-5"].tokens, read=0.05, redo=5.0)


def test_by_default_the_first_eviction_comes_at_the_break_even_whatever_the_reasoning() -> None:
    """Weighing the reasoning is opt-in (measured: dearer at 300 steps than what it
    saves at 100): by default a reply reasoning 1,000 tokens evicts as one reasoning
    none does."""
    default = RetentionPolicy()
    assert _evictions(1000, 40, default) == _evictions(0, 40, default)
    assert policy_for(OPUS).hold(OPUS) == Hold(10_000, read=0.05, redo=0.0)


def test_a_provider_ceiling_stays_hard_while_the_first_eviction_waits() -> None:
    shots = [Shown(f"{n:064x}", 1000, 1500, reasoning=5000) for n in range(40)]
    fates = plan_tool_images(shots, WEIGHED, model=OPUS, ceiling=Ceiling(images=12))
    assert sum(f.kind == "live" for f in fates) <= 12
    unbounded = plan_tool_images(shots, WEIGHED, model=OPUS)
    assert sum(f.kind == "live" for f in unbounded) == 40  # waiting: the reasoning costs more


def test_evictions_that_wait_for_reasoning_never_come_back() -> None:
    rnd = random.Random(11)
    shots = [
        Shown(f"{rnd.randrange(90):064x}", 60_000, 1960, reasoning=rnd.randrange(0, 300))
        for _ in range(300)
    ]
    hold = Hold(10_000, read=0.05, redo=5.0)
    counts = [evicted_over(shots[:n], Ceiling(), share=0.9, hold=hold) for n in range(1, 301)]
    assert all(a <= b for a, b in itertools.pairwise(counts))
    assert max(counts) > 0
