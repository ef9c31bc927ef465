"""A turn's streamed text leaves in fewer delta frames (by time and size), in order,
the text still held going out with the turn's last frame in the same write."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from visus.tether.deltas import DeltaWriter
from visus.tether.frames import AssistantDone, AssistantStatus, ErrorPayload, Frame, Payload


class Sink:
    """Every write: the frames' types and delta texts, and whether it ended the turn."""

    def __init__(self, fail: BaseException | None = None, pause: float = 0.0) -> None:
        self.writes: list[tuple[list[str], bool]] = []
        self.fail = fail
        self.pause = pause

    async def __call__(self, frames: Sequence[Frame], final: bool) -> None:
        await asyncio.sleep(self.pause)
        if self.fail is not None:
            raise self.fail
        self.writes.append(([_show(f) for f in frames], final))


def _show(f: Frame) -> str:
    text = getattr(f.payload, "text", "")
    return f"{f.type}:{text}" if f.type == "assistant.delta" else f.type


def make(payload: Payload) -> Frame:
    return Frame(payload, "s", "m")


async def test_pieces_within_the_window_leave_as_one_delta_and_later_ones_apart() -> None:
    sink = Sink()
    out = DeltaWriter(sink, make, window=0.05)
    await out.delta("a")
    await out.delta("b")
    await asyncio.sleep(0.3)  # the window passes: "ab" leaves on its own
    assert sink.writes == [(["assistant.delta:ab"], False)]
    await out.delta("c")
    await out.send(make(AssistantDone("abc")), final=True)
    assert sink.writes[1:] == [(["assistant.delta:c", "assistant.done"], True)]


async def test_text_past_max_bytes_leaves_at_once() -> None:
    sink = Sink()
    out = DeltaWriter(sink, make, window=60.0, max_bytes=4)
    await out.delta("ab")
    assert sink.writes == []
    await out.delta("cdé")  # 5 bytes held: over the bound, written without waiting
    assert sink.writes == [(["assistant.delta:abcdé"], False)]


async def test_order_holds_while_a_write_is_in_flight() -> None:
    sink = Sink(pause=0.05)  # a slow store: writes overlap the pieces that keep coming
    out = DeltaWriter(sink, make, window=0.01)
    for piece in "abcdefgh":
        await out.delta(piece)
        await asyncio.sleep(0.012)
    await out.send(make(ErrorPayload("egress_limit", "x")), make(AssistantDone("")), final=True)
    texts = [s.split(":", 1)[1] for w, _ in sink.writes for s in w if ":" in s]
    assert "".join(texts) == "abcdefgh"
    assert sink.writes[-1] == (sink.writes[-1][0], True)
    assert sink.writes[-1][0][-2:] == ["error", "assistant.done"]
    assert len(sink.writes) < 8  # joined while the store was busy


async def test_a_failed_background_write_is_raised_to_the_turn() -> None:
    out = DeltaWriter(Sink(fail=LookupError("taken over")), make, window=0.01)
    await out.delta("a")
    await asyncio.sleep(0.2)
    with pytest.raises(LookupError, match="taken over"):
        await out.delta("b")


async def test_aclose_drops_held_text_and_waits_for_the_write_in_flight() -> None:
    sink = Sink(pause=0.1)
    out = DeltaWriter(sink, make, window=0.01)
    await out.delta("sent")
    await asyncio.sleep(0.05)  # its write has started
    await out.delta("held")
    await out.aclose()
    assert sink.writes == [(["assistant.delta:sent"], False)]  # and nothing after
    await asyncio.sleep(0.1)
    assert len(sink.writes) == 1


async def test_a_status_is_held_in_order_and_a_quick_turn_is_one_write() -> None:
    sink = Sink()
    out = DeltaWriter(sink, make, window=60.0)
    await out.delta("a")
    await out.hold(make(AssistantStatus("viewing x.png")))
    await out.delta("b")
    await out.delta("c")
    assert sink.writes == []  # held: nothing written yet
    await out.send(make(AssistantDone("abc")), final=True)
    want = ["assistant.delta:a", "assistant.status", "assistant.delta:bc", "assistant.done"]
    assert sink.writes == [(want, True)]


async def test_a_held_status_leaves_on_its_own_within_the_window() -> None:
    sink = Sink()
    out = DeltaWriter(sink, make, window=0.05)
    await out.hold(make(AssistantStatus("waiting for the model")))
    await asyncio.sleep(0.3)  # a slow model: the phase shows without waiting for text
    assert sink.writes == [(["assistant.status"], False)]
