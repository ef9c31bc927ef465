from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from visus.errors import InvalidKeyError, NotFoundError, StoreError
from visus.record.blobs import FileBlobStore, MemoryBlobStore
from visus.record.messages import (
    AssistantMessage,
    AttachmentOrigin,
    ImagePart,
    Message,
    PerceptionOrigin,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
)
from visus.record.sessions import SessionStore, missing_blob_note, validate_session_id

PNG = b"\x89PNG\r\n\x1a\n" + b"pixels" * 100


def _conversation(digest: str) -> list[Message]:
    return [
        UserMessage(parts=(TextPart("look at a.png"),), turn=1),
        AssistantMessage(
            tool_calls=(ToolCall("c1", "view", {"path": "a.png"}),),
            turn=1,
            model="m",
            usage=Usage(10, 2, 0.001),
        ),
        ToolResult(
            "c1",
            "view",
            (
                TextPart("Viewed a.png"),
                ImagePart(digest, "image/png", len(PNG), 8, 8, PerceptionOrigin("a.png")),
            ),
            turn=1,
        ),
        AssistantMessage(parts=(TextPart("It is a square."),), turn=1),
        UserMessage(
            parts=(
                TextPart("and this?"),
                ImagePart(digest, "image/png", len(PNG), 8, 8, AttachmentOrigin("p.png")),
            ),
            turn=2,
        ),
    ]


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    return SessionStore(tmp_path / "sessions")


def test_create_append_load_roundtrip(store: SessionStore) -> None:
    blobs = MemoryBlobStore()
    digest = blobs.put(PNG, "image/png")
    sid = store.create("s1", meta={"model": "claude-sonnet-4-6", "n": 3})
    assert sid == "s1"
    msgs = _conversation(digest)
    for m in msgs:
        store.append(sid, m)
    loaded = store.load(sid, blobs=blobs)
    assert loaded.id == "s1"
    assert loaded.messages == tuple(msgs)
    assert loaded.problems == ()
    assert dict(loaded.meta) == {"model": "claude-sonnet-4-6", "n": 3}
    assert loaded.turn_count == 2
    assert store.turn_count(sid) == 2
    # Loading verifies each referenced blob once (a bit flip is found here, issue 23).
    assert blobs.reads == 1


def test_log_is_jsonl_without_image_bytes(store: SessionStore) -> None:
    sid = store.create("s")
    digest = "b" * 64
    for m in _conversation(digest):
        store.append(sid, m)
    raw = store.path(sid).read_bytes()
    lines = raw.split(b"\n")
    assert lines[-1] == b""
    assert len(lines) - 1 == 6  # header + five messages, one line each
    header = json.loads(lines[0])
    assert header["kind"] == "session"
    assert header["v"] == 1
    assert all(json.loads(line)["v"] == 1 for line in lines[:-1])
    assert b"pixels" not in raw


def test_generated_ids_are_valid_and_distinct(store: SessionStore) -> None:
    ids = {store.create() for _ in range(5)}
    assert len(ids) == 5
    for sid in ids:
        assert validate_session_id(sid) == sid
        assert store.exists(sid)


def test_create_existing_refused(store: SessionStore) -> None:
    store.create("dup")
    with pytest.raises(StoreError, match="already exists"):
        store.create("dup")


@pytest.mark.parametrize(
    "bad", ["../x", "a/b", ".hidden", "", "a" * 200, "x\n", "with space", "..", "a\\b", "é"]
)
def test_bad_session_ids_refused(store: SessionStore, bad: str) -> None:
    with pytest.raises(InvalidKeyError):
        store.create(bad)
    with pytest.raises(InvalidKeyError):
        store.load(bad)
    with pytest.raises(InvalidKeyError):
        store.append(bad, UserMessage(parts=()))
    with pytest.raises(InvalidKeyError):
        store.exists(bad)


def test_missing_session(store: SessionStore) -> None:
    assert not store.exists("nope")
    with pytest.raises(NotFoundError):
        store.load("nope")
    with pytest.raises(NotFoundError):
        store.append("nope", UserMessage(parts=()))
    assert store.list() == []


def test_append_fsyncs(store: SessionStore, monkeypatch: pytest.MonkeyPatch) -> None:
    sid = store.create("f")
    synced: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    store.append(sid, UserMessage(parts=(TextPart("x"),)))
    assert len(synced) == 1


def test_torn_last_line_skipped_and_reported(store: SessionStore) -> None:
    sid = store.create("t")
    msgs = _conversation("c" * 64)
    for m in msgs[:3]:
        store.append(sid, m)
    path = store.path(sid)
    full = path.read_bytes()
    # simulate a crash mid-write of the fourth message
    line = json.dumps({"v": 1, "kind": "assistant", "parts": [{"kind": "text", "text": "It is"}]})
    path.write_bytes(full + line.encode()[:25])
    loaded = store.load(sid)
    assert loaded.messages == tuple(msgs[:3])
    assert len(loaded.problems) == 1
    assert "torn" in loaded.problems[0]
    assert "line 5" in loaded.problems[0]

    # appending afterwards starts a fresh line: the new message loads, the torn
    # bytes stay one corrupt line in the middle
    store.append(sid, msgs[3])
    store.append(sid, msgs[4])
    again = store.load(sid)
    assert again.messages == tuple(msgs[:5])
    assert len(again.problems) == 1
    assert "line 5" in again.problems[0]
    assert "corrupt" in again.problems[0]


def test_complete_last_line_without_newline_is_kept(store: SessionStore) -> None:
    sid = store.create("n")
    m = UserMessage(parts=(TextPart("x"),))
    store.append(sid, m)
    path = store.path(sid)
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    loaded = store.load(sid)
    assert loaded.messages == (m,)
    assert loaded.problems == ()


def test_corrupt_middle_lines_reported_rest_loads(store: SessionStore) -> None:
    sid = store.create("c")
    msgs = _conversation("d" * 64)
    for m in msgs:
        store.append(sid, m)
    path = store.path(sid)
    lines = path.read_bytes().split(b"\n")
    lines[2] = b'{"v": 1, "kind": "assistant", "tool_calls": [{"id"'  # broken JSON
    lines[3] = b'{"v": 99, "kind": "tool"}'  # unknown version
    lines[4] = b"\xff\xfe garbage"  # not UTF-8
    path.write_bytes(b"\n".join(lines))
    loaded = store.load(sid)
    assert loaded.messages == (msgs[0], msgs[4])
    assert [p.split(":")[0] for p in loaded.problems] == ["line 3", "line 4", "line 5"]
    assert "version" in loaded.problems[1]


def test_missing_blob_becomes_note(tmp_path: Path, store: SessionStore) -> None:
    blobs = FileBlobStore(tmp_path / "blobs")
    kept = blobs.put(PNG, "image/png")
    gone = blobs.put(PNG + b"2", "image/png")
    sid = store.create("m")
    store.append(
        sid,
        ToolResult(
            "c1",
            "view",
            (
                TextPart("two views"),
                ImagePart(kept, "image/png", 1, 8, 8, PerceptionOrigin("a.png")),
                ImagePart(gone, "image/png", 1, 8, 8, PerceptionOrigin("b.png")),
            ),
        ),
    )
    assert blobs.gc([kept]) == 1
    loaded = store.load(sid, blobs=blobs)
    (result,) = loaded.messages
    assert isinstance(result, ToolResult)
    assert result.parts[0] == TextPart("two views")
    assert isinstance(result.parts[1], ImagePart)
    assert result.parts[2] == TextPart(missing_blob_note(gone))
    assert result.parts[2].text == f"[image unavailable: blob sha256:{gone} is missing]"
    assert len(loaded.problems) == 1
    assert gone in loaded.problems[0]
    # without a blob store, references load untouched
    assert isinstance(store.load(sid).messages[0].parts[2], ImagePart)


def test_loading_never_crashes_on_garbage(store: SessionStore) -> None:
    sid = store.create("g")
    path = store.path(sid)
    with path.open("ab") as f:
        f.write(b'[]\n42\nnull\n{}\n\n   \n{"kind": "session"}\n')
    loaded = store.load(sid, blobs=MemoryBlobStore())
    assert loaded.messages == ()
    assert len(loaded.problems) == 5  # blank lines are not problems


def test_list_sessions(store: SessionStore) -> None:
    a = store.create("a")
    b = store.create("b")
    store.append(a, UserMessage(parts=(TextPart("1"),), turn=1))
    store.append(a, UserMessage(parts=(TextPart("2"),), turn=2))
    os.utime(store.path(b), (1_000, 1_000))
    (store.root / "notes.txt").write_text("ignored")
    (store.root / ".hidden.jsonl").write_text("ignored")
    infos = store.list()
    assert [i.id for i in infos] == ["a", "b"]
    assert infos[0].messages == 2
    assert infos[0].turns == 2
    assert infos[1].messages == 0
    assert infos[1].modified == 1_000
    assert infos[0].size == store.path(a).stat().st_size


def test_header_created_timestamp(store: SessionStore) -> None:
    before = time.time()
    sid = store.create("ts")
    loaded = store.load(sid)
    assert loaded.created is not None
    assert before - 1 <= loaded.created <= time.time() + 1


def test_concurrent_appends_from_threads(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # interleaving, not durability, here
    sid = store.create("threads")
    long_text = "x" * 70_000  # bigger than a pipe buffer: a write may be split

    def worker(n: int) -> None:
        for i in range(25):
            store.append(sid, UserMessage(parts=(TextPart(f"{n}:{i}:{long_text}"),), turn=n))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    loaded = store.load(sid)
    assert loaded.problems == ()
    assert sorted(m.text.split(":")[:2] for m in loaded.messages) == sorted(
        [str(n), str(i)] for n in range(4) for i in range(25)
    )


_APPENDER = """
import sys
from visus.record.messages import TextPart, UserMessage
from visus.record.sessions import SessionStore
store = SessionStore(sys.argv[1])
for i in range(20):
    store.append("procs", UserMessage(parts=(TextPart(sys.argv[2] + str(i) + "y" * 100_000),)))
"""


def test_concurrent_appends_from_processes(store: SessionStore) -> None:
    sid = store.create("procs")
    procs = [
        subprocess.Popen([sys.executable, "-c", _APPENDER, str(store.root), tag])
        for tag in ("a", "b")
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    loaded = store.load(sid)
    assert loaded.problems == ()
    assert len(loaded.messages) == 40
    assert sorted(m.text[:3].rstrip("y") for m in loaded.messages) == sorted(
        [f"{t}{i}" for t in "ab" for i in range(20)]
    )


def test_referenced_digests_feed_gc(tmp_path: Path, store: SessionStore) -> None:
    blobs = FileBlobStore(tmp_path / "blobs")
    keep_a = blobs.put(PNG, "image/png")
    keep_b = blobs.put(PNG + b"b", "image/png")
    orphan = blobs.put(PNG + b"orphan", "image/png")
    for sid, digest in (("one", keep_a), ("two", keep_b)):
        store.create(sid)
        store.append(sid, _conversation(digest)[2])
    # a damaged line still protects the blob it names
    with store.path("two").open("ab") as f:
        f.write(b'{"v":1,"kind":"user","parts":[{"kind":"image","digest":"' + b"e" * 64 + b'"')
    assert store.referenced_digests() == {keep_a, keep_b, "e" * 64}
    assert blobs.gc(store.referenced_digests()) == 1
    assert not blobs.has(orphan)
    assert blobs.get(keep_a) == PNG
    assert SessionStore(tmp_path / "none").referenced_digests() == set()


def test_missing_document_blob_becomes_a_note(tmp_path: Path) -> None:
    from visus.record.blobs import MemoryBlobStore
    from visus.record.messages import DocumentPart, PerceptionOrigin, TextPart, UserMessage

    store = SessionStore(tmp_path)
    store.create("d1")
    doc = DocumentPart(
        digest="ab" * 32,
        media_type="application/pdf",
        size=10,
        page_count=2,
        origin=PerceptionOrigin("report.pdf"),
    )
    store.append("d1", UserMessage(parts=(TextPart("read this"), doc), turn=1))
    loaded = store.load("d1", blobs=MemoryBlobStore())
    (msg,) = loaded.messages
    assert msg.parts[0] == TextPart("read this")
    assert isinstance(msg.parts[1], TextPart)
    assert msg.parts[1].text == f"[document unavailable: blob sha256:{'ab' * 32} is missing]"
    assert any("document is replaced" in p for p in loaded.problems)
