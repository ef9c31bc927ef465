"""A session's attachments through the store, one suite run against local files and a
real PostgreSQL database (a throwaway cluster the tests start; tests/pgcluster.py).

The file store must keep today's layout (``<ns>/sessions/<id>/attachments/``); the
database one must keep the same names, caps and errors, and keep its caps when two
stores (two replicas) upload to one session at once.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from pathlib import Path

import pytest

from tests.store.conftest import Opener
from visus import limits
from visus.attachments import (
    AttachmentCaps,
    AttachmentStore,
    SessionAttachments,
    grep_attachment,
    list_attachments,
)
from visus.errors import (
    InvalidInputError,
    InvalidKeyError,
    LimitError,
    NotFoundError,
    StoreError,
    TooLargeError,
)
from visus.store import FileStore, Store, open_store
from visus.store.postgres import PostgresStore

NS = "instances/i-1"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _capped(store: Store, session: str, caps: AttachmentCaps) -> SessionAttachments:
    """The session's attachments with small caps (the store's own use the limits)."""
    if isinstance(store, FileStore):
        root = store.folder(NS) / "sessions" / session / "attachments"
        return AttachmentStore(
            root,
            max_file_bytes=caps.max_file_bytes,
            max_session_bytes=caps.max_session_bytes,
            max_files=caps.max_files,
        )
    from visus.store.pg_attachments import PgAttachments
    from visus.store.postgres import PostgresStore

    assert isinstance(store, PostgresStore)
    return PgAttachments(store.db, NS, session, caps)


def test_put_list_info_read_and_a_reopen_sees_them(opener: Opener) -> None:
    store = opener()
    chat = store.attachments(NS, "chat")
    assert isinstance(chat, SessionAttachments)
    assert chat.list() == []
    first = chat.put("../../etc/notes.txt", b64(b"alpha\nbeta\n"), "Text/Plain; charset=utf-8")
    assert (first.name, first.size, first.mime_type) == ("notes.txt", 11, "text/plain")
    assert first.sha256 == hashlib.sha256(b"alpha\nbeta\n").hexdigest()
    assert first.original_name == "../../etc/notes.txt"
    second = chat.put("NOTES.txt", b64(b"other"), "")  # clashes case-insensitively
    assert (second.name, second.mime_type) == ("NOTES (2).txt", "application/octet-stream")
    assert chat.put("notes.txt", b64(b"alpha\nbeta\n"), "text/plain") == first  # a re-send
    third = chat.put("notes.txt", b64(b"changed"), "text/plain")
    assert third.name == "notes (3).txt"

    again = opener().attachments(NS, "chat")
    assert [a.name for a in again.list()] == ["notes.txt", "NOTES (2).txt", "notes (3).txt"]
    assert again.info("NOTES (2).txt") == second
    assert again.read_bytes("notes.txt") == b"alpha\nbeta\n"
    with pytest.raises(NotFoundError):
        again.info("missing.txt")
    with pytest.raises(NotFoundError):
        again.read_bytes("missing.txt")
    # The tools run on either store alike.
    assert "notes.txt:2: beta" in grep_attachment(again, "bet")
    assert list_attachments(again).splitlines()[0] == "notes.txt (11 bytes, text/plain)"


def test_sessions_and_namespaces_are_apart(opener: Opener) -> None:
    store = opener()
    store.attachments(NS, "a").put("x.txt", b64(b"x"), "text/plain")
    assert store.attachments(NS, "b").list() == []
    assert store.attachments("instances/i-2", "a").list() == []
    assert store.attachments("", "a").list() == []
    for bad in ("../a", "a/b", ""):
        with pytest.raises(InvalidKeyError):
            store.attachments(NS, bad)
    with pytest.raises(InvalidKeyError):
        store.attachments("../up", "a")


def test_the_file_store_keeps_todays_layout(tmp_path: Path) -> None:
    store = open_store("", tmp_path)
    store.attachments(NS, "chat").put("a.txt", b64(b"hi"), "text/plain")
    root = tmp_path / NS / "sessions" / "chat" / "attachments"
    assert (root / "files" / "a.txt").read_bytes() == b"hi"
    assert (root / "manifest.json").is_file()
    assert AttachmentStore.for_session(tmp_path / NS, "chat").list()[0].name == "a.txt"


def test_bad_input_is_refused_alike(opener: Opener) -> None:
    chat = opener().attachments(NS, "chat")
    with pytest.raises(InvalidInputError, match="base64"):
        chat.put("a.txt", "not base64!", "text/plain")
    with pytest.raises(InvalidInputError, match="MIME"):
        chat.put("a.txt", b64(b"x"), "not a type")
    assert chat.list() == []


def test_caps_are_the_same_on_every_store(opener: Opener) -> None:
    store = opener()
    caps = AttachmentCaps(max_file_bytes=100, max_session_bytes=250, max_files=3)
    chat = _capped(store, "chat", caps)
    with pytest.raises(TooLargeError, match="ATTACHMENT_MAX_FILE_BYTES"):
        chat.put("big.bin", b64(b"x" * 101), "application/octet-stream")
    chat.put("a.bin", b64(b"a" * 100), "application/octet-stream")
    chat.put("b.bin", b64(b"b" * 100), "application/octet-stream")
    with pytest.raises(LimitError, match="ATTACHMENT_MAX_SESSION_BYTES"):
        chat.put("c.bin", b64(b"c" * 51), "application/octet-stream")
    chat.put("c.bin", b64(b"c" * 50), "application/octet-stream")
    with pytest.raises(LimitError, match="ATTACHMENT_MAX_FILES"):
        chat.put("d.bin", b64(b""), "application/octet-stream")
    assert [a.name for a in chat.list()] == ["a.bin", "b.bin", "c.bin"]


def test_caps_hold_over_all_the_sessions_of_an_instance(
    opener: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33: the caps were per session only, and a client opens any number of
    sessions (fifty of 200 MB were all taken). An instance's sessions together keep
    ATTACHMENT_MAX_INSTANCE_BYTES and ATTACHMENT_MAX_INSTANCE_FILES; another instance
    (namespace) has its own."""
    monkeypatch.setattr(limits, "ATTACHMENT_MAX_INSTANCE_FILES", 4)
    monkeypatch.setattr(limits, "ATTACHMENT_MAX_INSTANCE_BYTES", 1000)
    store = opener()
    for i in range(3):
        store.attachments(NS, f"s{i}").put("a.bin", b64(b"x" * 300), "application/octet-stream")
    with pytest.raises(LimitError, match="ATTACHMENT_MAX_INSTANCE_BYTES"):
        store.attachments(NS, "s3").put("a.bin", b64(b"x" * 101), "application/octet-stream")
    store.attachments(NS, "s3").put("a.bin", b64(b"x" * 100), "application/octet-stream")
    with pytest.raises(LimitError, match="ATTACHMENT_MAX_INSTANCE_FILES"):
        store.attachments(NS, "s4").put("b.bin", b64(b""), "application/octet-stream")
    # A re-send of a stored file is no new file; another instance starts from nothing.
    store.attachments(NS, "s0").put("a.bin", b64(b"x" * 300), "application/octet-stream")
    store.attachments("instances/i-2", "s0").put("b.bin", b64(b"y"), "text/plain")


def test_two_stores_uploading_at_once_keep_the_caps_and_unique_names(opener: Opener) -> None:
    """Two stores (two replicas on PostgreSQL: two pools) race 24 uploads of one name
    into a session capped at 10 files: exactly 10 land, each under its own name."""
    caps = AttachmentCaps(max_files=10)
    sides = [_capped(opener(), "chat", caps), _capped(opener(), "chat", caps)]
    start = threading.Barrier(24)
    stored: list[str] = []
    refused: list[Exception] = []
    lock = threading.Lock()

    def upload(i: int) -> None:
        start.wait()
        try:
            info = sides[i % 2].put("shot.png", b64(f"image {i}".encode()), "image/png")
        except LimitError as e:
            with lock:
                refused.append(e)
            return
        with lock:
            stored.append(info.name)

    workers = [threading.Thread(target=upload, args=(i,)) for i in range(24)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert (len(stored), len(refused)) == (10, 14)
    assert len(set(stored)) == 10
    listed = sides[0].list()
    assert sorted(a.name for a in listed) == sorted(stored)
    assert "shot.png" in stored
    assert "shot (10).png" in stored


def test_damaged_bytes_are_refused_on_read(opener: Opener, tmp_path: Path) -> None:
    store = opener()
    chat = store.attachments(NS, "chat")
    chat.put("a.txt", b64(b"the true bytes"), "text/plain")
    if isinstance(store, FileStore):
        root = store.folder(NS) / "sessions" / "chat" / "attachments" / "files"
        (root / "a.txt").write_bytes(b"the false bytes")
    else:
        import psycopg

        assert isinstance(store, PostgresStore)
        with psycopg.connect(store.url) as conn:  # the bytes change, their hash does not
            conn.execute(
                "UPDATE visus_attachments SET data = %s WHERE name = 'a.txt'", (b"the false bytes",)
            )
    with pytest.raises(StoreError, match="sha256"):
        chat.read_bytes("a.txt")


def test_deleting_an_instance_deletes_its_attachments(opener: Opener) -> None:
    store = opener()
    store.put_instance({"id": "i-1", "model": "reference", "created": "t"})
    store.attachments(NS, "chat").put("a.txt", b64(b"x"), "text/plain")
    store.attachments("instances/i-2", "chat").put("b.txt", b64(b"y"), "text/plain")
    store.delete_instance("i-1")
    assert store.attachments(NS, "chat").list() == []
    assert [a.name for a in store.attachments("instances/i-2", "chat").list()] == ["b.txt"]
