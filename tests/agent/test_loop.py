"""The agent loop against a scripted provider: tools, freshness, recovery, limits.

The scripted client stands in for the provider seam only; it records every request
the loop sends, so the tests can check what the model would have seen.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import pytest
from PIL import Image

from visus.agent import Agent, PastedImage, ToolRegistry
from visus.errors import ImageRejectedError
from visus.models import ModelSpec, get_model
from visus.perception import Reach
from visus.providers.base import BlobReader, OnDelta
from visus.record.blobs import FileBlobStore
from visus.record.messages import (
    AssistantMessage,
    ImagePart,
    ModelRequest,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
)
from visus.record.sessions import SessionStore
from visus.wire import RefitCache


class Scripted:
    """Replies from a script; an exception in the script is raised instead."""

    provider = "scripted"
    wire = "anthropic"

    def __init__(self, script: Sequence[AssistantMessage | Exception]) -> None:
        self.script = list(script)
        self.requests: list[ModelRequest] = []

    async def complete(
        self,
        request: ModelRequest,
        *,
        model: ModelSpec,
        blobs: BlobReader,
        on_delta: OnDelta | None = None,
        refit_cache: RefitCache | None = None,
    ) -> AssistantMessage:
        self.requests.append(request)
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        if on_delta is not None and step.text:
            on_delta(step.text)
        return step


def say(text: str) -> AssistantMessage:
    return AssistantMessage(parts=(TextPart(text),), usage=Usage(10, 2, 0.001))


def call(name: str, **args: object) -> AssistantMessage:
    return AssistantMessage(
        tool_calls=(ToolCall(f"c-{name}-{len(args)}", name, dict(args)),), usage=Usage(5, 1, 0.0)
    )


def png(w: int = 64, h: int = 48, color: str = "red") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), color).save(buf, format="PNG")
    return buf.getvalue()


def agent(tmp_path: Path, script: Sequence[AssistantMessage | Exception], **kw: object) -> Agent:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return Agent(
        client=Scripted(script),
        model=get_model("claude-sonnet-4-6"),
        sessions=SessionStore(tmp_path / "sessions"),
        blobs=FileBlobStore(tmp_path / "blobs"),
        reach=Reach([work]),
        tools=ToolRegistry.builtin(),
        **kw,  # type: ignore[arg-type]
    )


def results(a: Agent, session: str = "s") -> list[ToolResult]:
    return [m for m in a.sessions.load(session).messages if isinstance(m, ToolResult)]


async def test_final_answer_is_recorded_with_usage(tmp_path: Path) -> None:
    a = agent(tmp_path, [say("hello")])
    seen: list[str] = []
    r = await a.run_turn("s", "hi", on_delta=seen.append)
    assert (r.answer, r.steps, r.stopped) == ("hello", 1, "answer")
    assert r.usage == Usage(10, 2, 0.001)
    assert seen == ["hello"]
    kinds = [m.kind for m in a.sessions.load("s").messages]
    assert kinds == ["user", "assistant"]


async def test_view_result_is_an_image_part_stored_as_a_blob(tmp_path: Path) -> None:
    (tmp_path / "work" / "pic.png").parent.mkdir(exist_ok=True)
    (tmp_path / "work" / "pic.png").write_bytes(png())
    a = agent(tmp_path, [call("view", path="pic.png"), say("a red box")])
    r = await a.run_turn("s", "look")
    assert r.answer == "a red box"
    (res,) = results(a)
    images = [p for p in res.parts if isinstance(p, ImagePart)]
    assert len(images) == 1
    assert a.blobs.has(images[0].digest)
    assert images[0].origin.kind == "perception"
    # The second request carried the tool result with the image reference.
    second = a.client.requests[1]  # type: ignore[attr-defined]
    assert any(isinstance(p, ImagePart) for m in second.messages for p in getattr(m, "parts", ()))


async def test_edit_needs_a_fresh_read_and_a_view_does_not_count(tmp_path: Path) -> None:
    f = tmp_path / "work" / "notes.txt"
    f.parent.mkdir(exist_ok=True)
    f.write_text("colour = red\n")
    a = agent(
        tmp_path,
        [
            call("view", path="notes.txt"),
            call("edit", path="notes.txt", old_string="red", new_string="blue"),
            say("tried"),
            call("read", path="notes.txt"),
            call("edit", path="notes.txt", old_string="red", new_string="blue"),
            say("done"),
        ],
    )
    await a.run_turn("s", "edit after viewing")
    assert f.read_text() == "colour = red\n"
    refused = results(a)[-1]
    assert refused.is_error
    assert "read" in refused.text

    await a.run_turn("s", "edit after reading")
    assert f.read_text() == "colour = blue\n"


async def test_edit_refused_when_the_file_changed_since_the_read(tmp_path: Path) -> None:
    f = tmp_path / "work" / "notes.txt"
    f.parent.mkdir(exist_ok=True)
    f.write_text("a = 1\n")
    a = agent(tmp_path, [call("read", path="notes.txt"), say("read it")])
    await a.run_turn("s", "read")
    f.write_text("a = 2\n")  # someone else changed it
    a.client.script = [  # type: ignore[attr-defined]
        call("edit", path="notes.txt", old_string="a = 2", new_string="a = 3"),
        say("x"),
    ]
    await a.run_turn("s", "edit")
    assert f.read_text() == "a = 2\n"
    assert "changed since" in results(a)[-1].text


async def test_refused_image_is_refitted_then_elided_and_the_turn_completes(
    tmp_path: Path,
) -> None:
    big = png(3000, 2000, "green")
    a = agent(
        tmp_path,
        [
            ImageRejectedError("image too large", provider="scripted", status=400),
            ImageRejectedError("still refused", provider="scripted", status=400),
            say("answered without the image"),
        ],
    )
    r = await a.run_turn("s", "what is this?", [PastedImage(big, "image/png")])
    assert r.answer == "answered without the image"
    assert len(r.notes) == 2
    reqs = a.client.requests  # type: ignore[attr-defined]
    first, second, third = (next(iter(q.messages)) for q in reqs)
    img1 = next(p for p in first.parts if isinstance(p, ImagePart))
    img2 = next(p for p in second.parts if isinstance(p, ImagePart))
    assert max(img2.width, img2.height) <= 1024 < max(img1.width, img1.height)
    assert not any(isinstance(p, ImagePart) for p in third.parts)
    # The record keeps the original: recovery changed only what was sent.
    stored = next(iter(a.sessions.load("s").messages))
    assert next(p for p in stored.parts if isinstance(p, ImagePart)).digest == img1.digest


async def test_step_limit_stops_a_looping_model(tmp_path: Path) -> None:
    a = agent(tmp_path, [call("list_nothing") for _ in range(3)], max_steps=3)
    r = await a.run_turn("s", "loop")
    assert r.stopped == "step_limit"
    assert r.steps == 3
    assert r.answer.startswith("(stopped after 3 steps")
    assert all("no tool named" in t.text for t in results(a))


async def test_undecodable_pasted_image_is_a_clear_error(tmp_path: Path) -> None:
    from visus.errors import InvalidInputError

    a = agent(tmp_path, [say("x")])
    with pytest.raises(InvalidInputError, match="image 1"):
        await a.run_turn("s", "hi", [PastedImage(b"not an image at all", "image/png")])


async def test_a_bit_flipped_blob_is_found_when_the_session_is_loaded(tmp_path: Path) -> None:
    from visus.agent import PastedImage

    first = agent(tmp_path, [say("a red square")])
    await first.run_turn("s", "what is this?", images=[PastedImage(png(), "image/png")])
    (image,) = [p for p in first.sessions.load("s").messages[0].parts if isinstance(p, ImagePart)]
    blob = first.blobs.path(image.digest)  # type: ignore[attr-defined]
    assert blob is not None
    raw = bytearray(blob.read_bytes())
    raw[len(raw) // 2] ^= 0x01  # one flipped bit
    blob.write_bytes(bytes(raw))
    second = agent(tmp_path, [say("still here")])  # a fresh process: loads from disk
    r = await second.run_turn("s", "and now?")
    assert r.answer == "still here"
    sent = second.client.requests[0].messages[0]  # type: ignore[attr-defined]
    assert not any(isinstance(p, ImagePart) for p in sent.parts)
    note = " ".join(p.text for p in sent.parts if isinstance(p, TextPart))
    assert f"sha256:{image.digest} is corrupt" in note


async def test_pasted_images_are_fitted_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import visus.agent.loop as loop_module

    threads: list[int] = []
    real_fit = loop_module.fit

    def spy(data: bytes, profile: object) -> object:
        threads.append(threading.get_ident())
        return real_fit(data, profile)  # type: ignore[arg-type]

    monkeypatch.setattr(loop_module, "fit", spy)
    a = agent(tmp_path, [say("a red picture")])
    r = await a.run_turn("s", "what is this?", [PastedImage(png(), "image/png")])
    assert r.answer == "a red picture"
    assert threads
    assert threading.get_ident() not in threads  # never on the loop's own thread
