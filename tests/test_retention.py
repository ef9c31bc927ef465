from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from visus.errors import InvalidInputError
from visus.models import get_model, image_tokens
from visus.record.codec import message_to_dict
from visus.record.messages import (
    AssistantMessage,
    AttachmentOrigin,
    ImagePart,
    Message,
    PerceptionOrigin,
    TextPart,
    ToolCall,
    ToolResult,
    UserMessage,
)
from visus.retention import (
    RetentionPolicy,
    current_turn,
    elided_descriptor,
    evicted_images,
    first_live_turn,
    model_view,
    plan_images,
    repeat_descriptor,
)

MODEL = get_model("claude-sonnet-4-6")


def _digest(n: int) -> str:
    return f"{n:064x}"


def _view_turn(turn: int, source: str | None = None, *, w: int = 100, h: int = 80) -> list[Message]:
    source = source or f"shots/{turn}.png"
    return [
        UserMessage(parts=(TextPart(f"look at turn {turn}"),), turn=turn),
        AssistantMessage(tool_calls=(ToolCall(f"c{turn}", "view", {"path": source}),), turn=turn),
        ToolResult(
            f"c{turn}",
            "view",
            (
                TextPart(f"Viewed {source}"),
                ImagePart(_digest(turn), "image/png", 1000, w, h, PerceptionOrigin(source)),
            ),
            turn=turn,
        ),
        AssistantMessage(parts=(TextPart(f"seen {turn}"),), turn=turn),
    ]


def _session(turns: int, *, w: int = 100, h: int = 80) -> list[Message]:
    return [m for t in range(1, turns + 1) for m in _view_turn(t, w=w, h=h)]


def _live_turns_of(view: tuple[Message, ...]) -> list[int]:
    return sorted({m.turn for m in view for p in m.parts if isinstance(p, ImagePart)})


def test_default_window_keeps_only_current_turn() -> None:
    record = _session(3)
    view = model_view(record)
    assert len(view) == len(record)
    assert _live_turns_of(view) == [3]
    elided = view[2]
    assert isinstance(elided, ToolResult)
    assert elided.parts == (
        TextPart("Viewed shots/1.png"),
        TextPart('[image elided: call view("sha256:0000000000000000") to see it again]'),
    )
    # the record itself is untouched, and unchanged messages are the same objects
    assert isinstance(record[2].parts[1], ImagePart)
    assert view[0] is record[0]
    assert view[10] is record[10]


def test_old_messages_are_elided_once_across_views() -> None:
    record = _session(3)
    first = model_view(record)
    record += _view_turn(4)
    second = model_view(record)
    assert second[2] is first[2]  # the same elided object, not a rebuilt equal one
    assert second[6] == _elided_copy(record[6])
    # equal but distinct message objects get their own (equal) elided forms
    clone = [dataclasses.replace(m) for m in record]
    assert model_view(clone) == second


def _elided_copy(m: Message) -> Message:
    assert isinstance(m, ToolResult)
    image = m.parts[1]
    assert isinstance(image, ImagePart)
    return dataclasses.replace(m, parts=(m.parts[0], TextPart(elided_descriptor(image, m.turn))))


def test_live_turns_two() -> None:
    view = model_view(_session(5), RetentionPolicy(live_turns=2))
    assert _live_turns_of(view) == [4, 5]
    assert "[image elided: call view(" in view[10].text


def test_live_window_larger_than_session() -> None:
    record = _session(2)
    assert model_view(record, RetentionPolicy(live_turns=5)) == tuple(record)


def test_descriptor_names_the_digest_not_the_path() -> None:
    # A screenshot tool overwrites one file: the path would show today's screen, the
    # digest shows exactly the pixels that were seen then. It names nothing else: the
    # call and the view's own line say what it was, and a long run carries one a step.
    digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    short = '[image elided: call view("sha256:9f86d081884c7d65") to see it again]'
    for origin in (
        PerceptionOrigin("r.pdf", page=3),
        PerceptionOrigin("cat.png", "view_attachment"),
        PerceptionOrigin('a "b".png'),
        PerceptionOrigin(f"sha256:{digest}"),
    ):
        part = ImagePart(digest, "image/png", 1, 1, 1, origin)
        assert elided_descriptor(part, 4) == short
        assert len(short) // 4 <= 20  # the reference server's tokens: four characters each
    pasted = ImagePart(digest, "image/png", 1, 1, 1, AttachmentOrigin("p.png"))
    assert elided_descriptor(pasted, 2) == (
        '[image elided: p.png pasted in turn 2; call view("sha256:9f86d081884c7d65") '
        "to see it again]"
    )
    anonymous = ImagePart(_digest(2), "image/png", 1, 1, 1, AttachmentOrigin())
    assert elided_descriptor(anonymous, 1).startswith("[image elided: pasted in turn 1;")


def _pasted_then_views(views: int) -> list[Message]:
    pasted = ImagePart(_digest(99), "image/png", 1, 50, 50, AttachmentOrigin("photo.jpg"))
    shifted = [dataclasses.replace(m, turn=m.turn + 1) for m in _session(views)]
    return [UserMessage(parts=(TextPart("see this"), pasted), turn=1), *shifted]


def test_attachments_leave_after_their_own_window() -> None:
    # pasted in turn 1; the default keeps attachments 3 turns, views only 1
    for current, live in ((2, True), (3, True), (4, False), (9, False)):
        record = _pasted_then_views(current - 1)
        view = model_view(record)
        assert isinstance(view[0].parts[1], ImagePart) is live, current
        if not live:
            assert f'call view("sha256:{_digest(99)[:16]}")' in view[0].parts[1].text
    # the descriptor never changes as the boundary moves on (prompt caches)
    texts = {
        message_to_dict(model_view(_pasted_then_views(n))[0])["parts"][1]["text"] for n in (3, 5, 8)
    }
    assert len(texts) == 1
    # None keeps them forever, even under a zero token budget
    keep = RetentionPolicy(attachments_live_turns=None, image_token_budget=0)
    record = _pasted_then_views(8)
    assert model_view(record, keep, model=MODEL)[0] is record[0]
    # a window shorter than live_turns elides attachments before views
    short = RetentionPolicy(live_turns=4, attachments_live_turns=1)
    view = model_view(_pasted_then_views(2), short)
    assert view[0].parts[1].kind == "text"
    assert all(isinstance(m.parts[1], ImagePart) for m in view[1:] if m.kind == "tool")


def test_attachments_window_moves_in_chunks() -> None:
    policy = RetentionPolicy(attachments_live_turns=2, chunk=4)
    assert [policy.first_live_attachment_turn(t) for t in (2, 5, 6, 9, 10)] == [1, 1, 5, 5, 9]


def test_chunk_boundary_formula() -> None:
    p = RetentionPolicy(live_turns=1, chunk=3)
    assert [p.first_live_turn(c) for c in range(11)] == [1, 1, 1, 1, 4, 4, 4, 7, 7, 7, 10]
    p2 = RetentionPolicy(live_turns=2, chunk=2)
    assert [p2.first_live_turn(c) for c in range(1, 9)] == [1, 1, 1, 3, 3, 5, 5, 7]
    assert first_live_turn(_session(5), RetentionPolicy(live_turns=2)) == 4
    assert current_turn([]) == 0


def _prefix_bytes(view: tuple[Message, ...], n: int) -> bytes:
    return b"\n".join(
        json.dumps(message_to_dict(m), separators=(",", ":")).encode() for m in view[:n]
    )


@pytest.mark.parametrize(("live_turns", "chunk"), [(1, 3), (2, 4), (1, 5)])
def test_chunk_keeps_prefix_byte_identical_between_moves(live_turns: int, chunk: int) -> None:
    policy = RetentionPolicy(live_turns=live_turns, chunk=chunk, live_images=None)  # turns only
    record: list[Message] = []
    previous: tuple[Message, ...] | None = None
    stable = moves = 0
    for turn in range(1, 16):
        record.extend(_view_turn(turn))
        view = model_view(record, policy)
        # never fewer than live_turns turns keep pixels, never more than live_turns + chunk - 1
        live = _live_turns_of(view)
        assert live[0] <= max(1, turn - live_turns + 1)
        assert len(live) <= live_turns + chunk - 1
        if previous is not None:
            same = _prefix_bytes(view, len(previous)) == _prefix_bytes(previous, len(previous))
            moved = policy.first_live_turn(turn) != policy.first_live_turn(turn - 1)
            assert same == (not moved), turn
            stable += same
            moves += moved
        previous = view
    assert moves == len({policy.first_live_turn(t) for t in range(1, 16)}) - 1
    assert stable > moves


def test_without_chunk_prefix_changes_every_turn() -> None:
    record: list[Message] = []
    prefixes_equal = []
    previous: tuple[Message, ...] | None = None
    for turn in range(1, 6):
        record.extend(_view_turn(turn))
        view = model_view(record)
        if previous is not None:
            prefixes_equal.append(
                _prefix_bytes(view, len(previous)) == _prefix_bytes(previous, len(previous))
            )
        previous = view
    assert prefixes_equal == [False] * 4


def _screen_agent(steps: int, *, same: frozenset[int] = frozenset()) -> list[Message]:
    """One instruction, then a screenshot per step (a step in ``same`` sees the last
    screen again, byte for byte)."""
    record: list[Message] = [UserMessage(parts=(TextPart("do the task"),), turn=1)]
    shown = 0
    for step in range(1, steps + 1):
        shown = shown if step in same else step
        call = ToolCall(f"c{step}", "view", {"path": "screen.png"})
        image = ImagePart(_digest(shown), "image/png", 1000, 1568, 980, PerceptionOrigin("s.png"))
        record.append(AssistantMessage(tool_calls=(call,), turn=1))
        record.append(ToolResult(f"c{step}", "view", (TextPart("Viewed"), image), turn=1))
    return record


def _live_images(view: tuple[Message, ...]) -> list[ImagePart]:
    return [p for m in view for p in m.parts if isinstance(p, ImagePart)]


def test_one_long_turn_stays_bounded_by_image_count() -> None:
    # The default policy: 30 screenshots in one user turn no longer all stay live.
    record = _screen_agent(30)
    live = _live_images(model_view(record))
    assert 0 < len(live) <= RetentionPolicy().live_images == 4
    assert live[-1] == record[-1].parts[1]  # the newest is always live
    unbounded = RetentionPolicy(live_images=None)
    assert len(_live_images(model_view(record, unbounded))) == 30


@pytest.mark.parametrize(("live", "chunk"), [(10, 5), (4, 1), (6, 6)])
def test_evictions_come_in_batches_and_keep_the_prefix_between(live: int, chunk: int) -> None:
    policy = RetentionPolicy(live_images=live, image_chunk=chunk)
    previous: tuple[Message, ...] | None = None
    breaks = []
    for step in range(1, 61):
        view = model_view(_screen_agent(step), policy)
        count = len(_live_images(view))
        assert live - chunk + 1 <= count <= live or step < live
        if previous is not None:
            kept = _prefix_bytes(view, len(previous)) == _prefix_bytes(previous, len(previous))
            if not kept:
                breaks.append(step)
        previous = view
    # the first eviction at live + 1 images, then one every chunk images
    assert breaks == list(range(live + 1, 61, chunk))


def test_an_unchanged_screen_is_not_sent_twice() -> None:
    record = _screen_agent(6, same=frozenset({3, 4, 6}))  # screens 1 2 2 2 5 5
    view = model_view(record, RetentionPolicy(live_images=10))
    assert [p.digest for p in _live_images(view)] == [_digest(n) for n in (1, 2, 5)]
    repeat = view[6].parts[1]  # step 3: the same bytes as step 2
    assert repeat == TextPart(
        "[image unchanged: the same pixels as sha256:0000000000000000, shown earlier]"
    )
    # once the screen it repeats leaves, a later copy carries the pixels again
    evicting = RetentionPolicy(live_images=2, image_chunk=1)
    fates = plan_images([_digest(n) for n in (1, 2, 2, 2, 5, 5, 7)], live_images=2, chunk=1)
    assert [f.kind for f in fates] == [
        "evicted",
        "evicted",
        "evicted",
        "evicted",
        "live",
        "repeat",
        "live",
    ]
    assert len(_live_images(model_view(_screen_agent(7, same=frozenset({3, 4, 6})), evicting))) == 2


def test_plan_images_never_evicts_the_newest() -> None:
    for n in range(1, 40):
        digests = [_digest(i) for i in range(n)]
        for live, chunk in ((1, 1), (3, 3), (3, 7), (10, 5)):
            fates = plan_images(digests, live_images=live, chunk=chunk)
            assert fates[-1].kind == "live"
            assert sum(f.kind == "live" for f in fates) <= live


def test_token_budget_elides_oldest_reviewable_first() -> None:
    pasted = ImagePart(_digest(77), "image/png", 1, 1000, 1000, AttachmentOrigin("p.png"))
    record: list[Message] = [UserMessage(parts=(TextPart("hi"), pasted), turn=1)]
    record += _session(4, w=1000, h=1000)
    per_image = image_tokens(MODEL, 1000, 1000)
    assert per_image > 0
    policy = RetentionPolicy(
        live_turns=10, image_token_budget=3 * per_image, attachments_live_turns=None
    )
    view = model_view(record, policy, model=MODEL)
    # 5 live images (4 views + 1 attachment) over a 3-image budget: views of turns 1, 2 go
    assert _live_turns_of(view) == [1, 3, 4]
    assert view[0].parts[1] == pasted
    assert f'[image elided: call view("sha256:{_digest(1)[:16]}")' in view[3].text  # budget
    assert f'[image elided: call view("sha256:{_digest(2)[:16]}")' in view[7].text
    # a budget that fits everything changes nothing
    roomy = RetentionPolicy(
        live_turns=10, image_token_budget=5 * per_image, attachments_live_turns=None
    )
    assert model_view(record, roomy, model=MODEL) == tuple(record)
    # the budget counts what the window left live
    windowed = RetentionPolicy(
        live_turns=2, image_token_budget=3 * per_image, attachments_live_turns=None
    )
    assert _live_turns_of(model_view(record, windowed, model=MODEL)) == [1, 3, 4]


def test_token_budget_spares_the_newest_images_and_attachments() -> None:
    pasted = ImagePart(_digest(77), "image/png", 1, 1000, 1000, AttachmentOrigin())
    record: list[Message] = [UserMessage(parts=(pasted,), turn=1), *_session(3, w=1000, h=1000)]
    view = model_view(record, RetentionPolicy(live_turns=3, image_token_budget=0), model=MODEL)
    assert _live_turns_of(view) == [1, 3]
    assert isinstance(view[-2].parts[1], ImagePart)  # what the model just asked to see


def test_budget_needs_a_model() -> None:
    with pytest.raises(InvalidInputError, match="model"):
        model_view(_session(1), RetentionPolicy(image_token_budget=10))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"live_turns": 0},
        {"chunk": 0},
        {"live_turns": True},
        {"chunk": 1.5},
        {"image_token_budget": -1},
        {"image_token_budget": False},
        {"attachments_live_turns": 0},
        {"attachments_live_turns": True},
        {"live_images": 0},
        {"image_chunk": 0},
    ],
)
def test_policy_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidInputError):
        RetentionPolicy(**kwargs)  # type: ignore[arg-type]


def test_empty() -> None:
    assert model_view([]) == ()


# --- properties -------------------------------------------------------------------

_origin = st.one_of(
    st.builds(
        PerceptionOrigin,
        source=st.sampled_from(["a.png", "b.pdf", 'q"uote.png']),
        tool=st.sampled_from(["view", "view_attachment"]),
        page=st.one_of(st.none(), st.integers(1, 5)),
    ),
    st.builds(AttachmentOrigin, filename=st.one_of(st.none(), st.just("x.png"))),
)
_image = st.builds(
    ImagePart,
    digest=st.integers(0, 2**20).map(_digest),
    media_type=st.just("image/png"),
    size=st.integers(1, 10**7),
    width=st.integers(1, 3000),
    height=st.integers(1, 3000),
    origin=_origin,
)
_part = st.one_of(st.builds(TextPart, st.text(max_size=5)), _image)


@st.composite
def _sessions(draw: st.DrawFn) -> list[Message]:
    out: list[Message] = []
    turn = 0
    for _ in range(draw(st.integers(0, 25))):
        turn += draw(st.integers(0, 1))
        kind = draw(st.sampled_from(["user", "assistant", "tool"]))
        parts = tuple(draw(st.lists(_part, max_size=3)))
        if kind == "user":
            out.append(UserMessage(parts=parts, turn=turn))
        elif kind == "tool":
            out.append(ToolResult("c", "view", parts, turn=turn))
        else:
            out.append(AssistantMessage(parts=(TextPart("x"),), turn=turn))
    return out


_policies = st.builds(
    RetentionPolicy,
    live_turns=st.integers(1, 4),
    chunk=st.integers(1, 4),
    image_token_budget=st.one_of(st.none(), st.integers(0, 20_000)),
    attachments_live_turns=st.one_of(st.none(), st.integers(1, 4)),
    live_images=st.one_of(st.none(), st.integers(1, 5)),
    image_chunk=st.integers(1, 5),
)


@settings(max_examples=150, deadline=None)
@given(_sessions(), _policies)
def test_model_view_is_idempotent_and_keeps_shape(
    record: list[Message], policy: RetentionPolicy
) -> None:
    once = model_view(record, policy, model=MODEL)
    assert model_view(once, policy, model=MODEL) == once
    assert len(once) == len(record)
    first_live = policy.first_live_turn(current_turn(record))
    first_attachment = policy.first_live_attachment_turn(current_turn(record))
    for before, after in zip(record, once, strict=True):
        assert type(before) is type(after)
        assert before.turn == after.turn
        assert len(before.parts) == len(after.parts)
        for p, q in zip(before.parts, after.parts, strict=True):
            if p == q:
                continue
            # the only changes retention makes: an image -> its descriptor or, for a
            # tool image, a repeat of a live one
            assert isinstance(p, ImagePart)
            if q == TextPart(repeat_descriptor(p, before.turn)):
                assert isinstance(p.origin, PerceptionOrigin)
                continue
            assert q == TextPart(elided_descriptor(p, before.turn))
            if isinstance(p.origin, AttachmentOrigin):  # only by their own window
                assert before.turn < first_attachment
            elif policy.image_token_budget is None and policy.live_images is None:
                assert before.turn < first_live
    live_tools = [
        p
        for m in once
        for p in m.parts
        if isinstance(p, ImagePart) and isinstance(p.origin, PerceptionOrigin)
    ]
    # never two live copies of one image, never more than live_images
    assert len({p.digest for p in live_tools}) == len(live_tools)
    if policy.live_images is not None:
        assert len(live_tools) <= policy.live_images


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.integers(1, 200))
def test_evicted_images_bounds_the_window_and_moves_in_batches(
    live_images: int, chunk: int, count: int
) -> None:
    evicted = evicted_images(count, live_images, chunk)
    batch = min(chunk, live_images)
    assert evicted % batch == 0
    assert 1 <= count - evicted <= live_images  # bounded, and the newest stays
    if count > live_images:
        assert count - evicted > live_images - batch  # no more leave than a batch needs
    # One more image evicts nothing or exactly one more batch: the prefix moves rarely.
    assert evicted_images(count + 1, live_images, chunk) - evicted in {0, batch}


def test_evicted_images_refuses_a_window_below_one() -> None:
    with pytest.raises(InvalidInputError, match="live_images"):
        evicted_images(3, 0)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.integers(1, 120))
def test_plan_images_agrees_with_evicted_images_on_distinct_images(
    live_images: int, chunk: int, count: int
) -> None:
    fates = plan_images([_digest(i) for i in range(count)], live_images=live_images, chunk=chunk)
    evicted = sum(f.kind == "evicted" for f in fates)
    assert evicted == evicted_images(count, live_images, chunk)
