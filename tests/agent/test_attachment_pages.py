"""An attached PDF is viewed like a file: the page asked for, a region of it, and the
phase line names what was viewed (issue 36's blocker: page 3 asked, page 1 shown)."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFont

from visus.agent import ToolContext, ToolRegistry, build_agent
from visus.agent.extra_tools import attachment_tools
from visus.agent.phases import tool_phase
from visus.attachments import AttachmentStore, view_attachment
from visus.models import get_model
from visus.perception import Perception, Reach
from visus.record.blobs import MemoryBlobStore
from visus.record.messages import ImagePart, PerceptionOrigin, TextPart, ToolCall, ToolResult
from visus.reference.vision import perceive

WORDS = ("HARBOR", "LANTERN", "MEADOW")


def _pdf(words: tuple[str, ...]) -> bytes:
    """One page per word, the word large enough for OCR at any fitted size."""
    from visus.media import font_path

    font = ImageFont.truetype(font_path("DejaVuSans.ttf"), 72)
    pages = []
    for word in words:
        im = Image.new("RGB", (640, 240), "white")
        ImageDraw.Draw(im).text((60, 70), word, fill="black", font=font)
        pages.append(im)
    buf = io.BytesIO()
    pages[0].save(buf, "PDF", save_all=True, append_images=pages[1:], resolution=72)
    return buf.getvalue()


def _words(data: bytes) -> list[str]:
    return [w.text for w in perceive(data).words]


@pytest.fixture
def store(tmp_path: Path) -> AttachmentStore:
    store = AttachmentStore.for_session(tmp_path / "data", "s1")
    store.put("report.pdf", base64.b64encode(_pdf(WORDS)).decode(), "application/pdf")
    return store


def test_view_attachment_shows_the_page_asked_for(store: AttachmentStore) -> None:
    for page, word in enumerate(WORDS, start=1):
        seen = view_attachment(store, "report.pdf", model="gpt-4.1", page=page)
        assert isinstance(seen, Perception)
        assert (seen.page, seen.page_count) == (page, 3)
        assert _words(seen.data) == [word]


def test_view_attachment_zooms_into_a_region_of_the_page(store: AttachmentStore) -> None:
    whole = view_attachment(store, "report.pdf", model="gpt-4.1", page=2)
    left = view_attachment(store, "report.pdf", model="gpt-4.1", page=2, region=[0, 0, 320, 240])
    assert isinstance(whole, Perception)
    assert isinstance(left, Perception)
    assert left.region is not None
    assert left.region.as_list() == [0, 0, 320, 240]
    assert (left.source_width, left.source_height) == (640, 240)
    assert whole.digest != left.digest
    bad = view_attachment(store, "report.pdf", model="gpt-4.1", page=9)
    assert bad.kind == "refusal"
    assert "page" in bad.message


async def test_the_tool_takes_page_and_region_and_records_them(
    tmp_path: Path, store: AttachmentStore
) -> None:
    del store
    registry = ToolRegistry(attachment_tools(tmp_path / "data"))
    ctx = ToolContext(
        reach=Reach([tmp_path]),
        model=get_model("gpt-4.1"),
        blobs=MemoryBlobStore(),
        session_id="s1",
    )
    out = await registry.call(
        "view_attachment", {"filename": "report.pdf", "page": 3, "region": [0, 0, 640, 240]}, ctx
    )
    assert not out.is_error
    text, image = out.parts
    assert isinstance(text, TextPart)
    assert isinstance(image, ImagePart)
    assert "page 3 of 3" in text.text
    assert image.origin == PerceptionOrigin(
        source="report.pdf", tool="view_attachment", page=3, region=(0, 0, 640, 240)
    )
    assert _words(ctx.blobs.get(image.digest)) == ["MEADOW"]
    wrong = await registry.call("view_attachment", {"filename": "report.pdf", "page": "3"}, ctx)
    assert wrong.is_error
    assert "'page' must be an integer" in str(wrong.parts[0])


async def test_asked_about_page_3_the_reference_agent_views_page_3(
    tmp_path: Path, store: AttachmentStore
) -> None:
    data = tmp_path / "data"
    registry = ToolRegistry.builtin()
    for tool in attachment_tools(data):
        registry.add(tool)
    agent = build_agent("reference", data=data, roots=[tmp_path], tools=registry)
    info = store.info("report.pdf")
    note = f"[attached to this session: report.pdf ({info.mime_type}, {info.size} bytes)]"
    phases: list[str] = []

    def heard(call: ToolCall) -> None:
        phases.append(tool_phase(call.name, call.arguments))  # the status line's words

    result = await agent.run_turn("s1", f"what's on page 3 of report.pdf?\n\n{note}", on_tool=heard)
    assert "viewing attachment report.pdf page 3" in phases, phases
    assert "MEADOW" in result.answer, result.answer
    assert "HARBOR" not in result.answer, result.answer
    # The next question names no file: it means another page of the same document.
    phases.clear()
    again = await agent.run_turn("s1", "and page 2?", on_tool=heard)
    assert "viewing attachment report.pdf page 2" in phases, phases
    assert "LANTERN" in again.answer, again.answer
    assert "MEADOW" not in again.answer, again.answer
    calls = [m.tool_name for m in agent.sessions.load("s1").messages if isinstance(m, ToolResult)]
    assert calls == ["view_attachment", "view_attachment"]
