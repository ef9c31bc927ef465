"""One conformance suite, run unchanged against every store: local files and a real
PostgreSQL database (a throwaway cluster the tests start; see tests/pgcluster.py)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from tests.store.conftest import Opener
from visus.errors import (
    IntegrityError,
    InvalidInputError,
    InvalidKeyError,
    NotFoundError,
    StoreError,
)
from visus.record.messages import (
    AssistantMessage,
    AttachmentOrigin,
    ImagePart,
    PerceptionOrigin,
    TextPart,
    ToolResult,
    UserMessage,
)
from visus.store import Collected, FileStore, Store

PNG = b"\x89PNG\r\n\x1a\n" + os.urandom(64)
JPEG = b"\xff\xd8\xff" + os.urandom(64)


def _corrupt(store: Store, digest: str, data: bytes) -> None:
    blobs = store.blobs("")
    if isinstance(store, FileStore):
        path = store.blobs("").path(digest)
        assert path is not None
        path.write_bytes(data)
    else:
        blobs.corrupt(digest, data)  # type: ignore[attr-defined]


def _image(digest: str, filename: str = "a.png") -> ImagePart:
    return ImagePart(digest, "image/png", len(PNG), 4, 4, AttachmentOrigin(filename))


def test_instances_round_trip_and_survive_a_reopen(opener: Opener) -> None:
    store = opener()
    assert store.list_instances() == []
    store.put_instance({"id": "i-b", "model": "reference", "created": "2026-01-02", "extra": {}})
    store.put_instance({"id": "i-a", "model": "m", "created": "2026-01-01", "tools": ["view"]})
    assert store.get_instance("i-b") == {
        "id": "i-b",
        "model": "reference",
        "created": "2026-01-02",
        "extra": {},
    }
    assert store.get_instance("i-zzz") is None
    again = opener()
    assert [c["id"] for c in again.list_instances()] == ["i-a", "i-b"]  # oldest first
    assert again.get_instance("i-a") == {
        "id": "i-a",
        "model": "m",
        "created": "2026-01-01",
        "tools": ["view"],
    }
    store.put_instance({"id": "i-a", "model": "other", "created": "2026-01-01"})
    assert again.get_instance("i-a")["model"] == "other"  # type: ignore[index]
    assert again.delete_instance("i-a") is True
    assert again.delete_instance("i-a") is False
    assert [c["id"] for c in store.list_instances()] == ["i-b"]


def test_sessions_round_trip_every_message_kind(opener: Opener) -> None:
    store = opener()
    blobs = store.blobs("instances/i-1")
    log = store.sessions("instances/i-1")
    digest = blobs.put(PNG, "image/png")
    sid = log.create("chat", meta={"model": "reference"})
    assert sid == "chat"
    assert log.exists("chat")
    assert not log.exists("other")
    msgs = [
        UserMessage(parts=(TextPart("look"), _image(digest)), turn=1),
        AssistantMessage(parts=(TextPart("a cat"),), turn=1, model="reference"),
        ToolResult(
            "c1",
            "view",
            (ImagePart(digest, "image/png", 9, 4, 4, PerceptionOrigin("/x.png")),),
            turn=2,
        ),
    ]
    revisions = {log.revision("chat")}
    for m in msgs:
        log.append("chat", m)
        revisions.add(log.revision("chat"))
    assert len(revisions) == 4  # every append changes the revision
    loaded = opener().sessions("instances/i-1").load("chat", blobs=blobs)
    assert loaded.messages == tuple(msgs)
    assert loaded.problems == ()
    assert loaded.meta["model"] == "reference"
    assert loaded.created is not None
    assert abs(loaded.created - time.time()) < 600
    assert loaded.turn_count == 2
    [info] = log.list()
    assert (info.id, info.messages, info.turns) == ("chat", 3, 2)
    assert log.referenced_digests() == {digest}


def test_sessions_refuse_what_they_must(opener: Opener) -> None:
    log = opener().sessions()
    log.create("s1")
    with pytest.raises(StoreError, match="already exists"):
        log.create("s1")
    with pytest.raises(NotFoundError):
        log.append("nope", UserMessage(parts=(TextPart("x"),)))
    with pytest.raises(NotFoundError):
        log.load("nope")
    for bad in ("../etc", "", "a/b", ".hidden"):
        with pytest.raises(InvalidKeyError):
            log.create(bad)
    fresh = log.create()
    assert log.exists(fresh)
    assert fresh != "s1"


def test_namespaces_are_separate(opener: Opener) -> None:
    store = opener()
    store.sessions("instances/i-1").create("chat")
    assert not store.sessions("instances/i-2").exists("chat")
    assert not store.sessions().exists("chat")
    with pytest.raises(InvalidKeyError):
        store.sessions("../outside")


def test_blobs_written_once_and_verified_on_read(opener: Opener) -> None:
    store = opener()
    blobs = store.blobs()
    digest = blobs.put(PNG, "image/png")
    assert digest == hashlib.sha256(PNG).hexdigest()
    assert blobs.put(PNG, "image/png") == digest
    assert blobs.has(digest)
    assert blobs.media_type(digest) == "image/png"
    assert opener().blobs().get(digest) == PNG
    other = hashlib.sha256(b"absent").hexdigest()
    assert not blobs.has(other)
    assert blobs.media_type(other) is None
    with pytest.raises(NotFoundError):
        blobs.get(other)
    with pytest.raises(InvalidKeyError):
        blobs.get("../../etc/passwd")
    # Same size, other bytes: the last byte flipped (a fixed b"X" was PNG itself
    # whenever the random last byte happened to be "X": 1 run in 256 failed).
    _corrupt(store, digest, PNG[:-1] + bytes([PNG[-1] ^ 0xFF]))
    with pytest.raises(IntegrityError):
        blobs.get(digest)


def test_a_missing_blob_degrades_to_a_note(opener: Opener) -> None:
    store = opener()
    log, blobs = store.sessions(), store.blobs()
    gone = hashlib.sha256(b"never stored").hexdigest()
    log.create("s")
    log.append("s", UserMessage(parts=(TextPart("hi"), _image(gone)), turn=1))
    loaded = log.load("s", blobs=blobs)
    [msg] = loaded.messages
    assert isinstance(msg.parts[1], TextPart)
    assert gone in msg.parts[1].text
    assert any(gone in p for p in loaded.problems)


def test_a_bit_flipped_blob_is_reported_when_its_session_loads(opener: Opener) -> None:
    store = opener()
    log, blobs = store.sessions(), store.blobs()
    sound, flipped = blobs.put(PNG, "image/png"), blobs.put(JPEG, "image/jpeg")
    log.create("s")
    log.append("s", UserMessage(parts=(_image(sound), _image(flipped, "b.jpg")), turn=1))
    _corrupt(store, flipped, JPEG[:-1] + bytes([JPEG[-1] ^ 0x01]))
    # Another replica (or a restarted server) loads it: the load itself finds the flip.
    loaded = opener().sessions().load("s", blobs=opener().blobs())
    [msg] = loaded.messages
    assert isinstance(msg.parts[0], ImagePart)
    assert isinstance(msg.parts[1], TextPart)
    assert f"blob sha256:{flipped} is corrupt" in msg.parts[1].text
    assert [p for p in loaded.problems if flipped in p and "corrupt" in p]
    assert not [p for p in loaded.problems if sound in p]


def test_gc_removes_only_unreferenced_blobs_past_the_grace(opener: Opener) -> None:
    store = opener()
    blobs, log = store.blobs(), store.sessions()
    kept = blobs.put(PNG, "image/png")
    dead = blobs.put(JPEG, "image/jpeg")
    log.create("s")
    log.append("s", UserMessage(parts=(_image(kept),), turn=1))
    # Both are fresh: a turn may still record the one no session names yet.
    assert store.gc(grace_seconds=3600) == Collected(removed=0, young=1)
    time.sleep(0.05)
    assert store.gc(grace_seconds=0.01) == Collected(removed=1, young=0)
    assert blobs.has(kept)
    assert not blobs.has(dead)
    assert log.load("s", blobs=blobs).problems == ()


def test_a_deleted_session_is_gone_with_its_attachments_and_its_blobs_go_at_gc(
    opener: Opener,
) -> None:
    store = opener()
    blobs, log = store.blobs(), store.sessions()
    shared = blobs.put(PNG, "image/png")
    own = blobs.put(JPEG, "image/jpeg")
    for sid, parts in (("a", (_image(shared), _image(own))), ("b", (_image(shared),))):
        log.create(sid)
        log.append(sid, UserMessage(parts=parts, turn=1))
    store.attachments("", "a").put("n.txt", "eA==", "text/plain")
    assert log.delete("a") is True
    assert log.delete("a") is False
    assert not log.exists("a")
    assert [i.id for i in log.list()] == ["b"]
    assert store.attachments("", "a").list() == []
    time.sleep(0.05)
    assert store.gc(grace_seconds=0.01).removed == 1  # the blob only "a" used
    assert blobs.has(shared)
    assert not blobs.has(own)


def test_a_session_title_is_set_changed_cleared_and_goes_with_the_session(
    opener: Opener,
) -> None:
    log = opener().sessions("instances/i-1")
    log.create("s")
    assert log.title("s") is None
    log.set_title("s", "  Trip   photos ")
    assert log.title("s") == "Trip photos"
    log.set_title("s", "Receipts")
    assert log.title("s") == "Receipts"
    assert [m.kind for m in log.load("s").messages] == []  # the log itself is untouched
    log.set_title("s", "")
    assert log.title("s") is None
    with pytest.raises(InvalidInputError, match="SESSION_TITLE_MAX_CHARS"):
        log.set_title("s", "x" * 201)
    with pytest.raises(NotFoundError):
        log.set_title("nope", "x")
    log.set_title("s", "Gone soon")
    log.delete("s")
    log.create("s")
    assert log.title("s") is None  # a new session of the same id starts without it


def test_an_instance_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    # It may hold an MCP server's Authorization header from the create request.
    store = FileStore(tmp_path)
    secret = {"mcp_servers": [{"name": "w", "url": "https://x/mcp", "headers": {"a": "t"}}]}
    store.put_instance({"id": "i-s", "model": "m", "created": "now", "extra": secret})
    store.put_instance({"id": "i-s", "model": "m", "created": "now", "extra": secret})
    [path] = tmp_path.rglob("*.json")
    assert path.stat().st_mode & 0o777 == 0o600
    assert store.get_instance("i-s") == {
        "id": "i-s",
        "model": "m",
        "created": "now",
        "extra": secret,
    }
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left
