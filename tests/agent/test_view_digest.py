"""``view("sha256:...")``: any image of the session's own record comes back by digest.

The reach of a digest ref is the record: a blob another session stored (even in the
same blob store) is not found, and a prefix must be long and unambiguous.
"""

from __future__ import annotations

import re
from pathlib import Path

from visus.agent import ToolContext, ToolRegistry
from visus.models import get_model
from visus.perception import Reach
from visus.record.blobs import MemoryBlobStore
from visus.record.messages import (
    AttachmentOrigin,
    ImagePart,
    Message,
    TextPart,
    ToolResult,
    UserMessage,
)
from visus.reference.grid import make_grid

MODEL = get_model("claude-sonnet-4-6")


def _pasted(blobs: MemoryBlobStore, seed: int) -> ImagePart:
    png, _ = make_grid(2, 2, seed=seed)
    digest = blobs.put(png, "image/png")
    return ImagePart(digest, "image/png", len(png), 600, 260, AttachmentOrigin("grid.png"))


def _ctx(root: Path, blobs: MemoryBlobStore, *images: ImagePart) -> ToolContext:
    record = (UserMessage(parts=(TextPart("look"), *images), turn=1),)
    return ToolContext(reach=Reach([root]), model=MODEL, blobs=blobs, record=record)


async def test_full_digest_and_prefix_bring_back_a_pasted_image(tmp_path: Path) -> None:
    blobs = MemoryBlobStore()
    mine = _pasted(blobs, 1)
    ctx = _ctx(tmp_path, blobs, mine)
    for ref in (
        f"sha256:{mine.digest}",
        f"sha256:{mine.digest[:12]}",
        f"SHA256:{mine.digest[:20]}",
    ):
        out = await ToolRegistry.builtin().call("view", {"path": ref}, ctx)
        assert not out.is_error, out
        note, image = out.parts
        assert isinstance(image, ImagePart)
        assert (image.width, image.height) == (600, 260)
        assert blobs.get(image.digest)[:8] == b"\x89PNG\r\n\x1a\n"
        # re-viewable again by the full digest, however short the ref was
        assert image.origin.kind == "perception"
        assert image.origin.source == f"sha256:{mine.digest}"
        assert isinstance(note, TextPart)
        assert mine.digest in note.text


async def test_another_sessions_blob_is_not_reachable(tmp_path: Path) -> None:
    blobs = MemoryBlobStore()  # one store shared by two sessions
    mine, theirs = _pasted(blobs, 1), _pasted(blobs, 2)
    assert blobs.has(theirs.digest)
    ctx = _ctx(tmp_path, blobs, mine)
    out = await ToolRegistry.builtin().call("view", {"path": f"sha256:{theirs.digest}"}, ctx)
    assert out.is_error
    assert len(out.parts) == 1
    assert out.parts[0].text.startswith("refused (not_found): no image or document in this session")


async def test_bad_short_and_ambiguous_refs_are_refused(tmp_path: Path) -> None:
    blobs = MemoryBlobStore()
    mine = _pasted(blobs, 1)
    # two record digests sharing a 12-digit prefix (no blob needed to be ambiguous)
    twin = ImagePart(mine.digest[:12] + "0" * 52, "image/png", 1, 1, 1, AttachmentOrigin())
    ctx = _ctx(tmp_path, blobs, mine, twin)
    call = ToolRegistry.builtin().call
    short = await call("view", {"path": f"sha256:{mine.digest[:11]}"}, ctx)
    assert "at least 12 hex digits" in short.parts[0].text
    assert short.is_error
    bad = await call("view", {"path": "sha256:not-hex-at-all"}, ctx)
    assert "not sha256: followed by hex digits" in bad.parts[0].text
    assert bad.is_error
    both = await call("view", {"path": f"sha256:{mine.digest[:12]}"}, ctx)
    assert "matches 2 images" in both.parts[0].text
    assert both.is_error
    longer = await call("view", {"path": f"sha256:{mine.digest[:13]}"}, ctx)
    assert not longer.is_error


async def test_a_blob_missing_from_the_store_is_a_refusal(tmp_path: Path) -> None:
    gone = ImagePart("ab" * 32, "image/png", 1, 1, 1, AttachmentOrigin())
    ctx = _ctx(tmp_path, MemoryBlobStore(), gone)
    out = await ToolRegistry.builtin().call("view", {"path": "sha256:" + "ab" * 32}, ctx)
    assert out.is_error
    assert "cannot be shown again" in out.parts[0].text


async def test_a_file_changed_since_its_view_names_only_its_own_pixels(
    tmp_path: Path,
) -> None:
    blobs = MemoryBlobStore()
    record: list[Message] = [UserMessage(parts=(TextPart("look"),), turn=1)]
    ctx = ToolContext(reach=Reach([tmp_path]), model=MODEL, blobs=blobs, record=record)
    call = ToolRegistry.builtin().call
    seen: list[ImagePart] = []
    notes: list[str] = []
    for turn, seed in enumerate((1, 1, 2), 1):  # shot, shot again unchanged, new screen
        (tmp_path / "screen.png").write_bytes(make_grid(1, 2, seed=seed)[0])
        out = await call("view", {"path": "screen.png"}, ctx)
        note, image = out.parts
        assert isinstance(note, TextPart)
        assert isinstance(image, ImagePart)
        assert f"; sha256:{image.digest[:16]}" in note.text  # the view names its pixels
        record.append(ToolResult(f"c{turn}", "view", out.parts, turn=turn))
        seen.append(image)
        notes.append(note.text)
    # Each result names one digest, its own: a result that also named the earlier
    # screen's (issue 35) had a reader take that one for this one's.
    for note, image in zip(notes, seen, strict=True):
        assert re.findall(r"sha256:([0-9a-f]+)", note) == [image.digest[:16]]
    first = seen[0].digest[:16]
    _, again = (await call("view", {"path": f"sha256:{first}"}, ctx)).parts
    assert isinstance(again, ImagePart)
    assert again.digest == seen[0].digest


async def test_a_view_left_behind_is_about_40_tokens_naming_only_its_own_digest(
    tmp_path: Path,
) -> None:
    # A long run carries each step's view line, and once its image leaves, its
    # descriptor, re-read at every later step (issue 35: ~107 tokens a step doubled the
    # cost per step by step 300). A 4K screen: the longest line (its size, what was
    # sent, how to zoom, the digest).
    from tests.zoomshot import write_screen
    from visus.retention import RetentionPolicy, model_view

    write_screen(tmp_path, width=3840, height=2160)
    (tmp_path / "next.png").write_bytes(make_grid(1, 1, seed=5)[0])
    blobs = MemoryBlobStore()
    record: list[Message] = [UserMessage(parts=(TextPart("watch"),), turn=1)]
    ctx = ToolContext(reach=Reach([tmp_path]), model=MODEL, blobs=blobs, record=record)
    call = ToolRegistry.builtin().call
    for n, path in enumerate(("screen.png", "next.png")):
        out = await call("view", {"path": path}, ctx)
        record.append(ToolResult(f"c{n}", "view", out.parts, turn=1))
    first = record[1].parts[1]
    assert isinstance(first, ImagePart)
    policy = RetentionPolicy(live_images=1)
    views = [model_view(record, policy) for _ in range(2)]
    left = " ".join(p.text for p in views[0][1].parts if isinstance(p, TextPart))
    assert not any(isinstance(p, ImagePart) for p in views[0][1].parts)
    assert re.findall(r"sha256:([0-9a-f]+)", left) == [first.digest[:16]] * 2
    assert "zoom: region=[x0,y0,x1,y1]" in left
    assert "3840x2160" in left
    assert len(left) / 4 <= 40, left  # tokens as the reference server counts them
    assert views[0] == views[1]  # the same bytes each time it is sent
