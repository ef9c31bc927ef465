"""The reference model as a small agent: plain words call the right tool, answers are
short prose about what the message is about, and the JSON block only when asked for."""

from __future__ import annotations

import json

import jsonschema
import pytest

from visus.reference.model import Conversation, InCall, InImage, InMessage, respond
from visus.reference.vision import decode_size

from .conftest import Grid

TOOLS = ("read", "view", "edit", "send_image")


def _user(text: str, *images: InImage) -> InMessage:
    return InMessage(role="user", texts=(text,), images=images)


def _image(grid: Grid, where: str = "m") -> InImage:
    w, h, _ = decode_size(grid.png)
    return InImage(grid.png, w, h, where)


def _calls(text: str, tools: tuple[str, ...] = TOOLS) -> list[tuple[str, dict[str, object]]]:
    reply = respond(Conversation((_user(text),), tools=tools))
    return [(c.name, dict(c.arguments)) for c in reply.tool_calls]


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ("look at chart.png", [("view", {"path": "chart.png"})]),
        ("read notes.txt", [("read", {"path": "notes.txt"})]),
        ("Please look at notes.txt and tell me what it says", [("read", {"path": "notes.txt"})]),
        ("what's on page 3 of report.pdf?", [("view", {"path": "report.pdf", "page": 3})]),
        ("view notes.txt as an image", [("view", {"path": "notes.txt"})]),
        (
            "compare docs/a.png and 'my shot.jpg'",
            [
                ("view", {"path": "my shot.jpg"}),
                ("view", {"path": "docs/a.png"}),
            ],
        ),
        (
            "what is at https://example.org/logo.svg?",
            [
                ("view", {"path": "https://example.org/logo.svg"}),
            ],
        ),
        # Not files: abbreviations, model names, versions.
        ("e.g. gpt-4.1 or v1.2.3, Mr.Smith", []),
        # "send" an image: the README's --save-images example, offline.
        ("Send me docs/examples/sign.png", [("send_image", {"path": "docs/examples/sign.png"})]),
        (
            "please send logo.png and chart.svg back",
            [
                ("send_image", {"path": "logo.png"}),
                ("send_image", {"path": "chart.svg"}),
            ],
        ),
        # Not an image: read it; "sent" is not a request.
        ("send me notes.txt", [("read", {"path": "notes.txt"})]),
        ("what did I say in the photo I sent, a.png?", [("view", {"path": "a.png"})]),
    ],
)
def test_a_named_file_calls_the_tool_that_opens_it(text: str, calls: list[object]) -> None:
    assert _calls(text) == calls


def test_only_offered_tools_are_called() -> None:
    assert _calls("read notes.txt", tools=("view",)) == [("view", {"path": "notes.txt"})]
    assert _calls("look at chart.png", tools=("read",)) == []
    assert _calls("look at chart.png", tools=()) == []


def test_explicit_call_lines_still_win() -> None:
    assert _calls('look at a.png\ncall view {"path": "b.png"}') == [("view", {"path": "b.png"})]


def test_files_attached_in_the_web_chat_go_to_the_attachment_tools() -> None:
    text = "what is this?\n\n[attached to this session: report.pdf (application/pdf, 2048 bytes)]"
    tools = (*TOOLS, "list_attachments", "read_attachment", "view_attachment")
    assert _calls(text, tools) == [("view_attachment", {"filename": "report.pdf"})]


def test_a_message_with_its_own_image_is_about_that_image(grid2: Grid) -> None:
    reply = respond(Conversation((_user("what is in chart.png?", _image(grid2)),), tools=TOOLS))
    assert reply.tool_calls == ()
    assert reply.text.startswith("The image (")
    for word, *_ in grid2.expected:
        assert word in reply.text


def _read_turn(text: str, result: str) -> Conversation:
    call = InCall("c1", "read", json.dumps({"path": "notes.txt"}))
    return Conversation(
        (
            _user(text),
            InMessage(role="assistant", tool_calls=(call,)),
            InMessage(role="tool", texts=(result,), tool_call_id="c1"),
        ),
        tools=TOOLS,
    )


def test_after_a_read_it_says_what_the_file_says() -> None:
    result = "     1\tBuy oat milk\n     2\tCall the plumber\n[lines 1-2 of 2]"
    reply = respond(_read_turn("read notes.txt", result))
    assert reply.tool_calls == ()
    assert reply.text == 'notes.txt says: "Buy oat milk / Call the plumber"'


def test_a_read_refused_as_an_image_is_followed_by_a_view_once() -> None:
    refused = (
        "refused (unsupported_type): notes.txt is an image (40x40); read returns text only. "
        "Call view('notes.txt') to see it."
    )
    conv = _read_turn("read notes.txt", refused)
    reply = respond(conv)
    assert [(c.name, dict(c.arguments)) for c in reply.tool_calls] == [
        ("view", {"path": "notes.txt"})
    ]
    # Once per turn: after that view it answers, whatever the results say.
    view = InCall("c2", "view", json.dumps({"path": "notes.txt"}))
    again = Conversation(
        (
            *conv.messages,
            InMessage(role="assistant", tool_calls=(view,)),
            InMessage(role="tool", texts=(refused,), tool_call_id="c2"),
        ),
        tools=TOOLS,
    )
    reply = respond(again)
    assert reply.tool_calls == ()
    assert "I could not view notes.txt" in reply.text


@pytest.mark.parametrize("marker", ["", "[tool error] "])
@pytest.mark.parametrize(("tool", "said"), [("view", "view"), ("send_image", "send image")])
def test_a_refused_call_is_said_as_refused_on_every_wire(marker: str, tool: str, said: str) -> None:
    """Chat Completions, Responses and Ollama mark a failed tool's text "[tool error] ";
    the answer still says the refusal: it said "I see no images in what view returned for
    nothere.png" there, and "send_image: [tool error] refused ..." (seen from outside)."""
    refused = (
        "refused (not_found): nothere.png does not exist. Check the path (relative paths "
        "start at the first allowed root)."
    )
    call = InCall("c1", tool, json.dumps({"path": "nothere.png"}))
    conv = Conversation(
        (
            _user(f"{'look at' if tool == 'view' else 'send me'} nothere.png"),
            InMessage(role="assistant", tool_calls=(call,)),
            InMessage(role="tool", texts=(marker + refused,), tool_call_id="c1"),
        ),
        tools=TOOLS,
    )
    reply = respond(conv)
    assert reply.tool_calls == ()
    assert reply.text.startswith(f"I could not {said} nothere.png: nothere.png does not exist")


def test_a_question_about_an_earlier_image_answers_about_that_image(
    grid2: Grid, grid3: Grid
) -> None:
    first, second = _image(grid2, "m0"), _image(grid3, "m2")
    history = (
        _user("here", first),
        InMessage(role="assistant", texts=("ok",)),
        _user("and this", second),
        InMessage(role="assistant", texts=("ok",)),
    )
    latest = respond(Conversation((*history, _user("what colour is the text?")), tools=TOOLS))
    assert latest.tool_calls == ()
    assert all(word in latest.text for word, *_ in grid3.expected[:3])
    assert not any(word in latest.text for word, *_ in grid2.expected)
    earlier = respond(Conversation((*history, _user("and the first image?")), tools=TOOLS))
    assert all(word in earlier.text for word, *_ in grid2.expected)
    assert not any(word in earlier.text for word, *_ in grid3.expected)


def test_an_elided_image_is_brought_back_by_what_its_note_says() -> None:
    note = (
        '[image elided: photo.png pasted in turn 1; call view("sha256:0123456789abcdef") '
        "to see it again]"
    )
    conv = Conversation(
        (
            InMessage(role="user", texts=(note, "describe it")),
            InMessage(role="assistant", texts=("ok",)),
            _user("what did it say?"),
        ),
        tools=TOOLS,
    )
    reply = respond(conv)
    assert [(c.name, dict(c.arguments)) for c in reply.tool_calls] == [
        ("view", {"path": "sha256:0123456789abcdef"})
    ]


def test_no_image_says_what_the_model_is_and_how_to_use_it() -> None:
    text = respond(Conversation((_user("hello"),), tools=TOOLS)).text
    assert text.startswith("I see no images in this request.")
    assert "look at chart.png" in text
    assert "```" not in text


def test_the_json_block_only_when_asked_for(grid2: Grid) -> None:
    conv = Conversation((_user("what is this?", _image(grid2)),))
    assert "```" not in respond(conv).text
    text = respond(conv, json_block=True).text
    block = json.loads(text.split("```json\n")[1].split("\n```")[0])
    assert [w["text"] for w in block["images"][0]["words"]] == [w for w, *_ in grid2.expected]


def _schema_ask(schema: dict[str, object]) -> str:
    return (
        "List the words\n\nAnswer with one JSON value that validates against this JSON "
        "Schema, in a ```json fenced block or as the whole reply, and nothing that "
        "contradicts it:\n" + json.dumps(schema)
    )


@pytest.mark.parametrize(
    "schema",
    [
        {
            "type": "object",
            "properties": {"words": {"type": "array", "items": {"type": "string"}}},
            "required": ["words"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "required": ["boxes"],
            "properties": {
                "boxes": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["label", "x", "y", "color"],
                        "properties": {
                            "label": {"type": "string"},
                            "x": {"type": "number"},
                            "y": {"type": "number"},
                            "color": {"type": "string"},
                        },
                    },
                }
            },
        },
        {
            "type": "object",
            "properties": {
                "count": {"type": "integer", "minimum": 0},
                "has_text": {"type": "boolean"},
                "kind": {"enum": ["chart", "photo", "diagram"]},
            },
            "required": ["count", "has_text", "kind"],
        },
    ],
)
def test_a_json_schema_gets_a_valid_instance_of_what_was_seen(
    grid2: Grid, schema: dict[str, object]
) -> None:
    conv = Conversation((_user(_schema_ask(schema), _image(grid2)),))
    text = respond(conv).text
    value = json.loads(text.split("```json\n")[1].split("\n```")[0])
    jsonschema.validate(value, schema)
    flat = json.dumps(value)
    if "count" in flat:
        assert value["count"] == len(grid2.expected)
        assert value["has_text"] is True
    else:
        assert all(word in flat for word, *_ in grid2.expected)


def test_a_schema_it_cannot_fill_is_said_in_words(grid2: Grid) -> None:
    schema = {
        "type": "object",
        "required": ["iban"],
        "properties": {"iban": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{20}$"}},
    }
    text = respond(Conversation((_user(_schema_ask(schema), _image(grid2)),))).text
    assert "cannot fill this JSON Schema" in text
    assert "```" not in text


def test_a_call_quoted_in_a_file_it_read_is_not_followed() -> None:
    """Issue 36: "read README.md" also called view("sha256:...") copied from the
    README's text. The file says it; the user did not ask for it."""
    readme = (
        '     1\tOlder images lower to a descriptor: call view("sha256:0123456789abcdef")\n'
        "     2\tor Call view('chart.png', page=N) for a page.\n[lines 1-2 of 2]"
    )
    reply = respond(_read_turn("read notes.txt", readme))
    assert reply.tool_calls == ()
    assert reply.text.startswith("notes.txt says:")


def test_and_page_2_views_page_2_of_the_document_the_last_page_view_showed() -> None:
    first = InCall("c1", "view", json.dumps({"path": "report.pdf", "page": 3}))
    history = (
        _user("what's on page 3 of report.pdf?"),
        InMessage(role="assistant", tool_calls=(first,)),
        InMessage(role="tool", texts=("view: report.pdf: pdf, page 3 of 4",), tool_call_id="c1"),
        InMessage(role="assistant", texts=("Page 3 says HARBOR.",)),
    )
    reply = respond(Conversation((*history, _user("and page 2?")), tools=TOOLS))
    assert [(c.name, dict(c.arguments)) for c in reply.tool_calls] == [
        ("view", {"path": "report.pdf", "page": 2})
    ]
    # Without a document viewed before, a page alone names nothing to view.
    assert _calls("and page 2?") == []
