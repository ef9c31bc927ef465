"""Per-session attachments: safe names, caps, manifest, and the list/read/grep/view tools."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import threading
import time
from pathlib import Path

import pytest

from tests.timing import within
from visus import limits
from visus.attachments import (
    AttachmentInfo,
    AttachmentStore,
    attachment_origin,
    grep_attachment,
    list_attachments,
    read_attachment,
    safe_name,
)
from visus.errors import InvalidInputError, LimitError, StoreError, TooLargeError


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def png_bytes(size: tuple[int, int] = (40, 30)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, (200, 30, 90)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def store(tmp_path: Path) -> AttachmentStore:
    return AttachmentStore(tmp_path / "sessions" / "s1" / "attachments")


# --- names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("../../etc/passwd", "passwd"),
        ("/etc/shadow", "shadow"),
        (".hidden", "hidden"),
        ("...env", "env"),
        ("a/b/c.png", "c.png"),
        ("C:\\Users\\me\\shot.png", "shot.png"),
        ("dir/../..", "attachment"),
        ("..", "attachment"),
        ("", "attachment"),
        ("   ", "attachment"),
        ("café ☕.txt", "café ☕.txt"),
        ("cafe\u0301.txt", "café.txt"),  # NFC
        ("a\x00b\nc\x7f.txt", "abc.txt"),
        ("photo\u202egnp.exe", "photognp.exe"),  # bidi override cannot disguise the extension
        ('we<ird>:na"me|?.txt', "we_ird__na_me__.txt"),
        ("trailing. . ", "trailing"),
    ],
)
def test_safe_names(store: AttachmentStore, given: str, stored: str) -> None:
    assert safe_name(given) == stored
    info = store.put(given, b64(b"x"), "text/plain")
    assert info.name == stored
    assert info.original_name == given
    path = store.path(info.name)
    assert path.parent == store.root / "files"
    assert path.read_bytes() == b"x"


def test_traversal_never_writes_outside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "a" / "attachments"
    store = AttachmentStore(root)
    for name in ("../../escape.txt", "..\\..\\escape2.txt", "/tmp/escape3.txt"):
        store.put(name, b64(b"data"), "text/plain")
    written = {p for p in tmp_path.rglob("*") if p.is_file()}
    assert all(root in p.parents for p in written)
    assert not any(p.name.startswith(".") for p in written)


def test_long_names_are_clipped_keeping_the_extension(store: AttachmentStore) -> None:
    name = "é" * 300 + ".png"
    info = store.put(name, b64(b"x"), "image/png")
    assert len(info.name.encode()) <= limits.ATTACHMENT_MAX_NAME_BYTES
    assert info.name.endswith(".png")
    again = store.put(name, b64(b"y"), "image/png")
    assert again.name.endswith(" (2).png")
    assert again.name != info.name


def test_collisions_get_a_suffix(store: AttachmentStore) -> None:
    first = store.put("report.pdf", b64(b"one"), "application/pdf")
    second = store.put("report.pdf", b64(b"two"), "application/pdf")
    third = store.put("sub/report.pdf", b64(b"three"), "application/pdf")
    upper = store.put("REPORT.PDF", b64(b"four"), "application/pdf")
    noext = store.put("Makefile", b64(b"a"), "text/plain")
    noext2 = store.put("Makefile", b64(b"b"), "text/plain")
    assert [first.name, second.name, third.name] == [
        "report.pdf",
        "report (2).pdf",
        "report (3).pdf",
    ]
    assert upper.name == "REPORT (4).PDF"
    assert (noext.name, noext2.name) == ("Makefile", "Makefile (2)")
    assert store.read_bytes("report (2).pdf") == b"two"
    assert store.read_bytes("report.pdf") == b"one"


def test_same_name_same_bytes_is_idempotent(store: AttachmentStore) -> None:
    a = store.put("a.txt", b64(b"same"), "text/plain")
    b = store.put("a.txt", b64(b"same"), "text/plain")
    assert a == b
    assert len(store.list()) == 1


def test_concurrent_puts_never_share_a_name(store: AttachmentStore) -> None:
    results: list[AttachmentInfo] = []

    def put(i: int) -> None:
        results.append(store.put("same.txt", b64(f"content {i}".encode()), "text/plain"))

    threads = [threading.Thread(target=put, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    names = {r.name for r in results}
    assert len(names) == 8
    assert len(store.list()) == 8
    for r in results:
        assert hashlib.sha256(store.read_bytes(r.name)).hexdigest() == r.sha256


# --- content, MIME, manifest ------------------------------------------------------------


def test_manifest_keeps_declared_mime_size_and_digest(store: AttachmentStore) -> None:
    data = b"not really a png"
    info = store.put("fake.png", b64(data), "image/png")
    # The client's claim is kept as is: no sniffing of our own.
    assert info.mime_type == "image/png"
    assert info.size == len(data)
    assert info.sha256 == hashlib.sha256(data).hexdigest()
    manifest = json.loads((store.root / "manifest.json").read_text())
    assert manifest["files"] == [
        {
            "name": "fake.png",
            "size": len(data),
            "mime_type": "image/png",
            "sha256": hashlib.sha256(data).hexdigest(),
            "original_name": "fake.png",
        }
    ]


def test_manifest_persists_across_instances(store: AttachmentStore) -> None:
    store.put("a.txt", b64(b"hello"), "text/plain")
    store.put("b.bin", b64(bytes(range(10))), "application/octet-stream")
    again = AttachmentStore(store.root)
    assert again.list() == store.list()
    assert again.read_bytes("b.bin") == bytes(range(10))
    collision = again.put("a.txt", b64(b"other"), "text/plain")
    assert collision.name == "a (2).txt"


def test_mime_types_are_normalised_and_checked(store: AttachmentStore) -> None:
    assert store.put("a.txt", b64(b"a"), "Text/Plain; charset=utf-8").mime_type == "text/plain"
    assert store.put("b", b64(b"b"), "").mime_type == "application/octet-stream"
    for bad in ("nonsense", "text/", "a b/c", "x" * 300 + "/y"):
        with pytest.raises(InvalidInputError, match="MIME"):
            store.put("c.txt", b64(b"c"), bad)


@pytest.mark.parametrize("bad", ["not base64!!", "A", "QUJD*", "data:text/plain;base64,QUJD"])
def test_invalid_base64_is_refused(store: AttachmentStore, bad: str) -> None:
    with pytest.raises(InvalidInputError, match="base64"):
        store.put("x.txt", bad, "text/plain")
    assert store.list() == []


def test_base64_padding_and_line_wrapping_are_accepted(store: AttachmentStore) -> None:
    assert store.read_bytes(store.put("a", "QUJD", "text/plain").name) == b"ABC"
    assert store.read_bytes(store.put("b", "QUI", "text/plain").name) == b"AB"
    wrapped = base64.encodebytes(b"z" * 200).decode()  # newline every 76 chars
    assert store.read_bytes(store.put("c", wrapped, "text/plain").name) == b"z" * 200


def test_tampered_file_is_detected(store: AttachmentStore) -> None:
    store.put("a.txt", b64(b"original"), "text/plain")
    store.path("a.txt").write_bytes(b"changed")
    with pytest.raises(StoreError, match="sha256"):
        store.read_bytes("a.txt")


# --- caps ---------------------------------------------------------------------------------


def test_per_file_cap(tmp_path: Path) -> None:
    store = AttachmentStore(tmp_path, max_file_bytes=100)
    store.put("ok.bin", b64(b"x" * 100), "application/octet-stream")
    with pytest.raises(TooLargeError, match=r"101 bytes.*limit of 100 bytes"):
        store.put("big.bin", b64(b"x" * 101), "application/octet-stream")
    assert [f.name for f in store.list()] == ["ok.bin"]


def test_huge_payload_is_refused_before_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import visus.attachments.store

    def never(content: str) -> bytes:
        raise AssertionError("decoded a payload that was obviously too large")

    monkeypatch.setattr(visus.attachments.store, "_decode_base64", never)
    store = AttachmentStore(tmp_path, max_file_bytes=1000)
    with pytest.raises(TooLargeError, match=r"about 30000000 bytes.*ATTACHMENT_MAX_FILE_BYTES"):
        store.put("huge.bin", "A" * 40_000_000, "application/octet-stream")


def test_per_session_bytes_cap(tmp_path: Path) -> None:
    store = AttachmentStore(tmp_path, max_session_bytes=250)
    store.put("a", b64(b"a" * 100), "text/plain")
    store.put("b", b64(b"b" * 100), "text/plain")
    with pytest.raises(LimitError, match=r"300 bytes, over the limit of 250.*SESSION_BYTES"):
        store.put("c", b64(b"c" * 100), "text/plain")
    store.put("d", b64(b"d" * 50), "text/plain")  # still fits exactly
    assert sum(f.size for f in store.list()) == 250


def test_per_session_file_count_cap(tmp_path: Path) -> None:
    store = AttachmentStore(tmp_path, max_files=3)
    for i in range(3):
        store.put(f"{i}.txt", b64(b"x"), "text/plain")
    with pytest.raises(LimitError, match=r"ATTACHMENT_MAX_FILES = 3"):
        store.put("3.txt", b64(b"x"), "text/plain")


# --- list and read ------------------------------------------------------------------------


def test_list_format(store: AttachmentStore) -> None:
    assert list_attachments(store) == "No attachments in this session."
    store.put("notes.txt", b64(b"hello"), "text/plain")
    store.put("photo.jpg", b64(b"\xff\xd8\xff" + b"0" * 97), "image/jpeg")
    assert list_attachments(store) == (
        "notes.txt (5 bytes, text/plain)\nphoto.jpg (100 bytes, image/jpeg)"
    )


def test_read_pages_by_lines(store: AttachmentStore) -> None:
    lines = [f"line {i}" for i in range(1, 5001)]
    store.put("log.txt", b64("\n".join(lines).encode()), "text/plain")
    first = read_attachment(store, "log.txt")
    body = first.splitlines()
    assert body[0] == "     1\tline 1"
    assert body[limits.READ_DEFAULT_LINES - 1] == f"  2000\tline {limits.READ_DEFAULT_LINES}"
    assert body[-1] == (
        "[lines 1-2000 of 5000; call read_attachment('log.txt', offset=2000) for more]"
    )
    page = read_attachment(store, "log.txt", offset=4995, limit=10).splitlines()
    assert page == [
        "  4996\tline 4996",
        "  4997\tline 4997",
        "  4998\tline 4998",
        "  4999\tline 4999",
        "  5000\tline 5000",
        "[lines 4996-5000 of 5000]",
    ]
    middle = read_attachment(store, "log.txt", offset=10, limit=2).splitlines()
    assert middle[:2] == ["    11\tline 11", "    12\tline 12"]
    assert "offset=12" in middle[2]


def test_read_edges(store: AttachmentStore) -> None:
    store.put("empty.txt", b64(b""), "text/plain")
    store.put("one.txt", b64("\ufeffbom line\n".encode()), "text/plain")
    store.put("long.txt", b64(b"x" * (limits.READ_MAX_LINE_CHARS + 50)), "text/plain")
    assert read_attachment(store, "empty.txt") == "[empty.txt is empty]"
    assert read_attachment(store, "one.txt").splitlines()[0] == "     1\tbom line"
    assert "past the end" in read_attachment(store, "one.txt", offset=5)
    long = read_attachment(store, "long.txt")
    assert "1 long lines clipped" in long
    assert len(long.splitlines()[0]) < limits.READ_MAX_LINE_CHARS + 20
    assert "offset must be" in read_attachment(store, "one.txt", offset=-1)
    assert "offset must be" in read_attachment(store, "one.txt", limit=0)
    assert "offset must be" in read_attachment(store, "one.txt", offset="2")  # type: ignore[arg-type]


def test_read_unknown_name_lists_what_exists(store: AttachmentStore) -> None:
    store.put("a.txt", b64(b"a"), "text/plain")
    assert read_attachment(store, "b.txt") == "No attachment named 'b.txt'. Attachments: a.txt."


def test_read_refuses_binary_that_is_no_image(store: AttachmentStore) -> None:
    store.put("blob.bin", b64(bytes(range(256)) * 4), "application/octet-stream")
    text = read_attachment(store, "blob.bin")
    assert "binary" in text
    assert "view_attachment" not in text
    # NUL bytes make a file binary even when it decodes as UTF-8
    store.put("nul.txt", b64(b"abc\x00def"), "text/plain")
    assert "binary" in read_attachment(store, "nul.txt")


def test_read_refuses_an_image_naming_view_attachment(store: AttachmentStore) -> None:
    # Declared as text: the decoders, not the client's claim, decide it is an image.
    store.put("shot.dat", b64(png_bytes()), "text/plain")
    text = read_attachment(store, "shot.dat")
    assert "image" in text
    assert "view_attachment('shot.dat')" in text


# --- grep ---------------------------------------------------------------------------------


def test_grep_finds_lines_with_numbers(store: AttachmentStore) -> None:
    store.put("a.log", b64(b"ok\nERROR disk full\nok\nerror lowercase\n"), "text/plain")
    store.put("b.log", b64(b"ERROR network\n"), "text/plain")
    out = grep_attachment(store, r"ERROR \w+")
    assert out.splitlines() == [
        "a.log:2: ERROR disk full",
        "b.log:1: ERROR network",
        "[2 matches]",
    ]
    only_b = grep_attachment(store, "(?i)error", filename="b.log")
    assert only_b.splitlines() == ["b.log:1: ERROR network", "[1 match]"]
    assert grep_attachment(store, "nothing here") == "[no match for 'nothing here']"
    assert "No attachment named 'c.log'" in grep_attachment(store, "x", filename="c.log")


def test_grep_hits_are_bounded(store: AttachmentStore) -> None:
    store.put("many.txt", b64(b"hit\n" * (limits.GREP_MAX_HITS * 3)), "text/plain")
    out = grep_attachment(store, "hit").splitlines()
    assert len(out) == limits.GREP_MAX_HITS + 1
    assert f"stopped at the limit of {limits.GREP_MAX_HITS} matches" in out[-1]


def test_grep_rejects_long_and_invalid_patterns(store: AttachmentStore) -> None:
    store.put("a.txt", b64(b"abc"), "text/plain")
    long = "a" * (limits.GREP_MAX_PATTERN_CHARS + 1)
    assert "GREP_MAX_PATTERN_CHARS" in grep_attachment(store, long)
    assert grep_attachment(store, "(unclosed").startswith("Invalid regular expression")


def test_grep_catastrophic_pattern_stops_at_the_budget(store: AttachmentStore) -> None:
    store.put("evil.txt", b64(b"fine line\n" + b"a" * 5000 + b"!\n" + b"after\n"), "text/plain")
    start = time.monotonic()
    out = grep_attachment(store, r"(a+)+$", time_budget=0.3)
    elapsed = time.monotonic() - start
    assert elapsed < within(2.0)
    assert "time budget of 0.3 s" in out
    assert "GREP_TIME_BUDGET_SECONDS" in out
    assert "evil.txt line 2" in out


def test_grep_default_budget_bounds_a_catastrophic_pattern(store: AttachmentStore) -> None:
    store.put("evil.txt", b64(b"a" * 3000 + b"!"), "text/plain")
    start = time.monotonic()
    out = grep_attachment(store, r"(a|aa)+$")
    assert time.monotonic() - start < limits.GREP_TIME_BUDGET_SECONDS + within(1.5)
    assert "time budget" in out


def test_grep_long_lines_are_searched_up_to_the_cap(store: AttachmentStore) -> None:
    cap = limits.GREP_MAX_LINE_CHARS
    line_early = "needle" + "x" * (cap + 100)
    line_late = "x" * (cap + 100) + "needle"
    store.put("wide.txt", b64(f"{line_early}\n{line_late}\n".encode()), "text/plain")
    out = grep_attachment(store, "needle")
    assert out.splitlines()[0].startswith("wide.txt:1: needle")
    assert "wide.txt:2:" not in out
    assert "2 lines longer than" in out
    assert len(out) < cap  # hit lines are clipped for display


def test_grep_skips_binary_and_says_so(store: AttachmentStore) -> None:
    store.put("t.txt", b64(b"match me"), "text/plain")
    store.put("b.bin", b64(b"\xff\xfe match me \x00"), "application/octet-stream")
    out = grep_attachment(store, "match")
    assert out.splitlines() == ["t.txt:1: match me", "[1 match; not text, not searched: b.bin]"]


def test_grep_on_an_empty_session(store: AttachmentStore) -> None:
    assert grep_attachment(store, "x") == "No attachments in this session."


# --- view ---------------------------------------------------------------------------------


def test_attachment_origin_is_reviewable() -> None:
    origin = attachment_origin("shot.png")
    assert (origin.kind, origin.source, origin.tool) == (
        "perception",
        "shot.png",
        "view_attachment",
    )


def test_view_attachment_returns_a_perception(store: AttachmentStore) -> None:
    from visus.attachments import view_attachment

    store.put("shot.png", b64(png_bytes((300, 200))), "image/png")
    result = view_attachment(store, "shot.png", model="claude-sonnet-4-6")
    assert result.kind == "perception", result
    assert (result.width, result.height) == (300, 200)
    assert result.source == "shot.png"
    assert result.media_type in {"image/png", "image/jpeg", "image/webp"}
    assert result.tokens > 0


def test_view_attachment_refuses_for_a_model_without_vision(store: AttachmentStore) -> None:
    from visus.attachments import view_attachment

    store.put("shot.png", b64(png_bytes()), "image/png")
    result = view_attachment(store, "shot.png", model="openai-compatible:plain-text-llm")
    assert result.kind == "refusal"
    assert result.reason == "unsupported_type"
    assert "cannot see images" in result.message
    assert result.source == "shot.png"


def test_view_attachment_unknown_name(store: AttachmentStore) -> None:
    from visus.attachments import view_attachment

    result = view_attachment(store, "nope.png", model="claude-sonnet-4-6")
    assert result.kind == "refusal"
    assert result.reason == "not_found"


def test_view_attachment_refuses_undecodable_binary(store: AttachmentStore) -> None:
    from visus.attachments import view_attachment

    store.put("junk.png", b64(bytes(range(256))), "image/png")  # the claim does not decide
    result = view_attachment(store, "junk.png", model="claude-sonnet-4-6")
    assert result.kind == "refusal"


def pdf_bytes(pages: int = 2) -> bytes:
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument.new()
    for _ in range(pages):
        doc.new_page(200, 300)
    buf = io.BytesIO()
    doc.save(buf)
    return buf.getvalue()


def test_read_refuses_a_pdf_naming_view_attachment(store: AttachmentStore) -> None:
    store.put("paper.pdf", b64(pdf_bytes(3)), "application/pdf")
    text = read_attachment(store, "paper.pdf")
    assert "PDF of 3 pages" in text
    assert "view_attachment('paper.pdf')" in text


def test_read_names_the_image_from_its_header(store: AttachmentStore) -> None:
    store.put("pic", b64(png_bytes((64, 48))), "application/octet-stream")
    assert "image (image/png 64x48)" in read_attachment(store, "pic")


def test_truncated_image_is_an_image_to_read_and_undecodable_to_view(
    store: AttachmentStore,
) -> None:
    from visus.attachments import view_attachment

    # read looks at headers only (media.probe); view decodes and finds the damage.
    store.put("broken.png", b64(png_bytes((64, 48))[:60]), "image/png")
    assert "view_attachment('broken.png')" in read_attachment(store, "broken.png")
    seen = view_attachment(store, "broken.png", model="claude-sonnet-4-6")
    assert seen.kind == "refusal"
    assert seen.reason == "undecodable"


def test_view_attachment_renders_text_when_allowed(store: AttachmentStore) -> None:
    from visus.attachments import view_attachment

    store.put("code.py", b64(b"def f():\n    return 42\n"), "text/x-python")
    seen = view_attachment(store, "code.py", model="claude-sonnet-4-6")
    assert seen.kind == "perception", seen
    assert seen.source_kind == "text"
    assert seen.source == "code.py"
    withheld = view_attachment(store, "code.py", model="claude-sonnet-4-6", render=False)
    assert withheld.kind == "refusal"


def test_for_session_places_the_store_and_validates_the_id(tmp_path: Path) -> None:
    from visus.errors import InvalidKeyError

    store = AttachmentStore.for_session(tmp_path, "chat-1", max_files=2)
    assert store.root == tmp_path / "sessions" / "chat-1" / "attachments"
    assert store.max_files == 2
    for bad in ("../evil", ".hidden", "a/b", ""):
        with pytest.raises(InvalidKeyError):
            AttachmentStore.for_session(tmp_path, bad)
