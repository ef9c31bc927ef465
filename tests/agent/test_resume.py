"""A turn taken up from its record (the process running it died): the model is asked
again from the last recorded step; a call without a recorded result runs again only
when its tool only reads; a recorded answer is returned as it is.

A dead process is played by a first agent whose session log is then cut back to what
it had recorded when it "died"; a second agent (a new process: nothing in memory)
resumes the turn.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agent.test_loop import Scripted, agent, call, png, say
from visus.agent import Agent
from visus.agent.loop import ResumeRefusedError
from visus.record.messages import AssistantMessage, ImagePart, ToolCall, ToolResult, UserMessage
from visus.record.sessions import SessionStore

REQUEST = "7:m-1"


def cut(a: Agent, keep: int, session: str = "s") -> None:
    """The session log as it was after its first ``keep`` messages (and its header)."""
    assert isinstance(a.sessions, SessionStore)
    path = a.sessions.path(session)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[: 1 + keep]))
    assert len(a.sessions.load(session).messages) == keep


def kinds(a: Agent, session: str = "s") -> list[str]:
    return [m.kind for m in a.sessions.load(session).messages]


async def test_without_a_recorded_start_the_turn_runs_anew(tmp_path: Path) -> None:
    a = agent(tmp_path, [say("hello")])
    r = await a.run_turn("s", "hi", request_id=REQUEST, resume=True)
    assert r.answer == "hello"
    (user, _) = a.sessions.load("s").messages
    assert isinstance(user, UserMessage)
    assert user.request_id == REQUEST


async def test_after_the_user_message_the_model_is_asked_again(tmp_path: Path) -> None:
    first = agent(tmp_path, [say("earlier"), say("lost with its process")])
    await first.run_turn("s", "an earlier turn", request_id="1:m-0")
    await first.run_turn("s", "hi", request_id=REQUEST)
    cut(first, 3)  # the process died while the model was answering

    second = agent(tmp_path, [say("hello again")])
    r = await second.run_turn("s", "hi", request_id=REQUEST, resume=True)
    assert (r.answer, r.turn, r.steps) == ("hello again", 2, 1)
    assert kinds(second) == ["user", "assistant", "user", "assistant"]  # no second user
    (request,) = second.client.requests  # type: ignore[attr-defined]
    assert [m.kind for m in request.messages] == ["user", "assistant", "user"]


async def test_a_recorded_answer_is_returned_without_asking_again(tmp_path: Path) -> None:
    first = agent(tmp_path, [say("the answer")])
    await first.run_turn("s", "hi", request_id=REQUEST)  # died before its done frame
    second = agent(tmp_path, [])  # any model call would fail: the script is empty
    r = await second.run_turn("s", "hi", request_id=REQUEST, resume=True)
    assert (r.answer, r.steps, r.stopped) == ("the answer", 1, "answer")
    assert kinds(second) == ["user", "assistant"]


async def test_a_read_only_call_without_its_result_runs_again(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "pic.png").write_bytes(png())
    first = agent(tmp_path, [call("view", path="pic.png"), say("never recorded")])
    await first.run_turn("s", "look", request_id=REQUEST)
    cut(first, 2)  # the model asked for view; the process died before its result

    second = agent(tmp_path, [say("a red box")])
    r = await second.run_turn("s", "look", request_id=REQUEST, resume=True)
    assert (r.answer, r.steps) == ("a red box", 2)
    assert kinds(second) == ["user", "assistant", "tool", "assistant"]
    (result,) = [m for m in second.sessions.load("s").messages if isinstance(m, ToolResult)]
    assert not result.is_error
    assert any(isinstance(p, ImagePart) for p in result.parts)
    assert r.usage.input_tokens == 5 + 10  # the recorded step's usage counts too


async def test_a_call_that_changes_things_is_not_run_twice(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    notes = tmp_path / "work" / "notes.txt"
    notes.write_text("old\n")
    edit = AssistantMessage(
        tool_calls=(
            ToolCall("c-view", "view", {"path": "notes.txt"}),
            ToolCall(
                "c-edit", "edit", {"path": "notes.txt", "old_string": "old", "new_string": "new"}
            ),
        )
    )
    first = agent(tmp_path, [edit, say("never recorded")])
    await first.run_turn("s", "fix it", request_id=REQUEST)
    cut(first, 3)  # view's result recorded; the process died during the edit

    second = agent(tmp_path, [])
    with pytest.raises(ResumeRefusedError, match=r"edit .*notes\.txt.*\(call c-edit\)"):
        await second.run_turn("s", "fix it", request_id=REQUEST, resume=True)
    messages = second.sessions.load("s").messages
    assert kinds(second) == ["user", "assistant", "tool", "tool"]  # every call answered
    last = messages[-1]
    assert isinstance(last, ToolResult)
    assert last.is_error
    assert last.call_id == "c-edit"
    assert "not run again" in last.parts[0].text  # type: ignore[union-attr]
    assert second.client.requests == []  # type: ignore[attr-defined]
    # The next message starts a new turn on a session every wire accepts.
    second.client = Scripted([say("ok")])
    assert (await second.run_turn("s", "go on")).answer == "ok"


async def test_images_a_recorded_send_image_sent_are_sent_again(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "pic.png").write_bytes(png())
    first = agent(tmp_path, [call("send_image", path="pic.png"), say("lost")])
    sent = (await first.run_turn("s", "send it", request_id=REQUEST)).images
    cut(first, 3)  # send_image ran and was recorded; the answer was not

    second = agent(tmp_path, [say("here it is")])
    r = await second.run_turn("s", "send it", request_id=REQUEST, resume=True)
    assert r.answer == "here it is"
    assert [(i.media_type, i.data) for i in r.images] == [(i.media_type, i.data) for i in sent]
