from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from visus.errors import IntegrityError, InvalidKeyError, NotFoundError
from visus.record.blobs import (
    BlobStore,
    FileBlobStore,
    MemoryBlobStore,
    extension_for,
    validate_digest,
)

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
JPEG = b"\xff\xd8\xff\xe0" + b"jpeg-body" * 50


@pytest.fixture(params=["file", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> FileBlobStore | MemoryBlobStore:
    if request.param == "file":
        return FileBlobStore(tmp_path / "blobs")
    return MemoryBlobStore()


def test_both_satisfy_the_protocol(tmp_path: Path) -> None:
    assert isinstance(FileBlobStore(tmp_path), BlobStore)
    assert isinstance(MemoryBlobStore(), BlobStore)


def test_put_get_roundtrip(store: FileBlobStore | MemoryBlobStore) -> None:
    key = store.put(PNG, "image/png")
    assert key == hashlib.sha256(PNG).hexdigest()
    assert store.has(key)
    assert store.get(key) == PNG
    assert store.media_type(key) == "image/png"
    assert store.reads == 1
    other = store.put(JPEG, "image/jpeg")
    assert store.get(other) == JPEG
    assert store.media_type(other) == "image/jpeg"
    assert store.reads == 2


def test_put_is_idempotent_and_writes_once(store: FileBlobStore | MemoryBlobStore) -> None:
    first = store.put(PNG, "image/png")
    second = store.put(PNG, "image/png")
    assert first == second
    assert store.writes == 1
    assert list(store.digests()) == [first]


def test_missing_blob(store: FileBlobStore | MemoryBlobStore) -> None:
    key = hashlib.sha256(b"never stored").hexdigest()
    assert not store.has(key)
    assert store.media_type(key) is None
    with pytest.raises(NotFoundError, match=key):
        store.get(key)


@pytest.mark.parametrize(
    "bad",
    [
        "../" * 10 + "etc/passwd",
        "ab/../../x",
        "A" * 64,  # uppercase is not our key form
        "a" * 63,
        "a" * 65,
        "g" * 64,
        "",
        "/" + "a" * 63,
        "a" * 64 + "\n",
    ],
)
def test_bad_keys_refused(store: FileBlobStore | MemoryBlobStore, bad: str) -> None:
    with pytest.raises(InvalidKeyError):
        store.get(bad)
    with pytest.raises(InvalidKeyError):
        store.has(bad)
    with pytest.raises(InvalidKeyError):
        store.media_type(bad)


def test_validate_digest_rejects_non_strings() -> None:
    with pytest.raises(InvalidKeyError):
        validate_digest(b"a" * 64)
    assert validate_digest("0" * 64) == "0" * 64


def test_file_layout_fanout_and_extension(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    key = store.put(JPEG, "image/jpeg")
    path = tmp_path / key[:2] / key[2:4] / f"{key}.jpg"
    assert path.is_file()
    assert path.read_bytes() == JPEG
    assert store.path(key) == path
    # no temp files left behind by the atomic write
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_extension_for_media_types() -> None:
    assert extension_for("image/png") == "png"
    assert extension_for("image/jpeg") == "jpg"
    assert extension_for("image/gif") == "gif"
    assert extension_for("image/webp") == "webp"
    assert extension_for("IMAGE/PNG; charset=binary") == "png"
    assert extension_for("application/pdf") == "pdf"
    assert extension_for("x/../../evil") == "bin"


def test_write_once_does_not_touch_existing_file(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    key = store.put(PNG, "image/png")
    path = store.path(key)
    assert path is not None
    os.utime(path, (1_000_000, 1_000_000))
    store.put(PNG, "image/png")
    assert path.stat().st_mtime == 1_000_000
    assert store.writes == 1
    # a second store on the same root sees the blob and writes nothing either
    again = FileBlobStore(tmp_path)
    assert again.put(PNG, "image/png") == key
    assert again.writes == 0


def test_put_uses_fsync_and_replace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append("fsync")
        real_fsync(fd)

    def replace(src: str, dst: Path) -> None:
        calls.append(f"replace:{Path(src).parent == Path(dst).parent}")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    store = FileBlobStore(tmp_path)
    store.put(PNG, "image/png")
    # file fsynced, then renamed from the same folder, then the folder fsynced
    assert calls == ["fsync", "replace:True", "fsync"]
    calls.clear()
    store.put(PNG, "image/png")
    assert calls == []


def test_tampered_file_raises_integrity_error(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    key = store.put(PNG, "image/png")
    path = store.path(key)
    assert path is not None
    path.write_bytes(PNG[:-1] + b"X")
    with pytest.raises(IntegrityError, match=key):
        store.get(key)


def test_tampered_memory_blob_raises_integrity_error() -> None:
    store = MemoryBlobStore()
    key = store.put(PNG, "image/png")
    store.corrupt(key, b"other bytes")
    with pytest.raises(IntegrityError):
        store.get(key)


def test_damaged_copy_of_wrong_size_is_repaired_by_put(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    key = store.put(PNG, "image/png")
    path = store.path(key)
    assert path is not None
    path.write_bytes(PNG[:10])  # truncated on disk
    assert store.put(PNG, "image/png") == key
    assert store.get(key) == PNG


def test_gc_removes_unreferenced(store: FileBlobStore | MemoryBlobStore) -> None:
    keys = [store.put(bytes([i]) * 100, "image/png") for i in range(5)]
    removed = store.gc([keys[0], keys[3], "not-a-digest", "../../x"])
    assert removed == 3
    assert sorted(store.digests()) == sorted([keys[0], keys[3]])
    assert store.get(keys[0]) == bytes([0]) * 100
    for k in (keys[1], keys[2], keys[4]):
        assert not store.has(k)
    assert store.gc([keys[0], keys[3]]) == 0


def test_gc_cleans_empty_folders_and_keeps_temp_files(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    key = store.put(PNG, "image/png")
    leaf = tmp_path / key[:2] / key[2:4]
    other = store.put(JPEG, "image/jpeg")
    other_leaf = tmp_path / other[:2] / other[2:4]
    (other_leaf / ".tmp-inflight.part").write_bytes(b"partial")
    assert store.gc([other]) == 1
    assert not leaf.exists()
    assert (other_leaf / ".tmp-inflight.part").exists()
    assert store.has(other)


def test_gc_on_empty_root(tmp_path: Path) -> None:
    assert FileBlobStore(tmp_path / "nothing").gc([]) == 0
