"""The deterministic model: tool-call lines, image descriptions, descriptors, tokens."""

from __future__ import annotations

import base64

from visus.reference.model import (
    Conversation,
    InCall,
    InImage,
    InMessage,
    count_tokens,
    respond,
)
from visus.reference.vision import decode_size

from .conftest import Grid, answer_json, assert_grid_seen


def _image(grid: Grid, where: str = "test") -> InImage:
    w, h, _ = decode_size(grid.png)
    return InImage(data=grid.png, width=w, height=h, where=where)


def test_call_lines_become_parallel_calls_for_offered_tools_only() -> None:
    text = 'please\ncall view {"path": "a.png"}\ncall view {"path": "b.png"}\ncall rm {"p": 1}'
    conv = Conversation(messages=(InMessage(role="user", texts=(text,)),), tools=("view",))
    reply = respond(conv, json_block=True)
    assert [(c.name, dict(c.arguments)) for c in reply.tool_calls] == [
        ("view", {"path": "a.png"}),
        ("view", {"path": "b.png"}),
    ]
    assert reply.text == ""
    assert len({c.id for c in reply.tool_calls}) == 2
    assert [c.id for c in respond(conv, json_block=True).tool_calls] == [
        c.id for c in reply.tool_calls
    ]


def test_no_offered_tool_means_a_description_not_a_call() -> None:
    conv = Conversation(messages=(InMessage(role="user", texts=('call view {"path": "x"}',)),))
    reply = respond(conv, json_block=True)
    assert reply.tool_calls == ()
    assert answer_json(reply.text) == {"images": [], "descriptors": []}


def test_after_tool_results_it_describes_the_images(grid2: Grid) -> None:
    call = InCall(id="c1", name="view", arguments='{"path": "g.png"}')
    conv = Conversation(
        messages=(
            InMessage(role="user", texts=('call view {"path": "g.png"}',)),
            InMessage(role="assistant", tool_calls=(call,)),
            InMessage(role="tool", texts=("image below",), tool_call_id="c1"),
            # The hoisted-images user message of wires without images in tool results:
            # it must not re-trigger the call even if it quoted the call line.
            InMessage(role="user", texts=('call view {"path": "g.png"}',), images=(_image(grid2),)),
        ),
        tools=("view",),
    )
    reply = respond(conv, json_block=True)
    assert reply.tool_calls == ()
    assert_grid_seen(reply.text, grid2)
    assert reply.text.startswith("g.png (")  # named by the call that brought it


def test_base64_in_text_is_not_perceived_and_descriptors_are_reported(grid2: Grid) -> None:
    note = '[image elided: viewed g.png in turn 1; call view("g.png") to see it again]'
    stringified = "here is the image: data:image/png;base64," + grid2.b64
    conv = Conversation(messages=(InMessage(role="user", texts=(stringified, note)),))
    data = answer_json(respond(conv, json_block=True).text)
    assert data == {"images": [], "descriptors": [note]}
    for word, *_ in grid2.expected:
        assert word not in respond(conv, json_block=True).text


def test_tokens_are_text_over_four_plus_the_image_formula(grid2: Grid) -> None:
    conv = Conversation(
        messages=(InMessage(role="user", texts=("x" * 401,), images=(_image(grid2),)),),
        tool_text="y" * 99,
    )
    assert count_tokens(conv, lambda im: 1000) == 125 + 1000
    b64_conv = Conversation(messages=(InMessage(role="user", texts=(grid2.b64,)),))
    assert count_tokens(b64_conv, lambda im: 1000) == -(-len(grid2.b64) // 4)
    assert len(base64.b64decode(grid2.b64)) == len(grid2.png)


def test_descriptors_quoted_by_the_assistant_are_not_counted_again() -> None:
    note = '[image elided: viewed a.png in turn 1; call view("a.png") to see it again]'
    conv = Conversation(
        messages=(
            InMessage(role="user", texts=(note,)),
            InMessage(role="assistant", texts=(f"I saw {note}",)),
            InMessage(role="tool", texts=(note,), tool_call_id="c"),
            InMessage(role="user", texts=("and now?",)),
        )
    )
    assert answer_json(respond(conv, json_block=True).text)["descriptors"] == [note, note]


def test_say_lines_are_text_written_before_the_calls() -> None:
    texts = ('say Let me look.\ncall view {"path": "a.png"}\nsay Then answer.',)
    reply = respond(Conversation(messages=(InMessage(role="user", texts=texts),), tools=("view",)))
    assert reply.text == "Let me look. Then answer."
    assert [c.name for c in reply.tool_calls] == ["view"]
    # Without a call line, "say" is just words in the prompt: no text is invented.
    plain = respond(Conversation(messages=(InMessage(role="user", texts=("say hi",)),)))
    assert plain.tool_calls == ()
