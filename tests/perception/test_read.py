"""read: numbered text, paging, clipping; images and binary refused naming view."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from visus.limits import READ_DEFAULT_LINES, READ_MAX_LINE_CHARS
from visus.perception import Reach, ReadResult, Refusal, read

from . import corpus


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path


def _ok(result: ReadResult | Refusal) -> ReadResult:
    assert isinstance(result, ReadResult), result
    return result


def _refused(result: ReadResult | Refusal) -> Refusal:
    assert isinstance(result, Refusal), result
    return result


def test_numbers_lines_like_cat_n(root: Path) -> None:
    (root / "a.py").write_bytes(b"import os\n\nprint(os.sep)\n")
    r = _ok(read("a.py", reach=Reach([root])))
    assert r.text == "     1\timport os\n     2\t\n     3\tprint(os.sep)"
    assert (r.line_start, r.line_end, r.line_total) == (1, 3, 3)
    assert r.path == (root / "a.py").resolve()
    assert r.kind == "read"
    assert not r.more


def test_content_digest_is_of_the_whole_file(root: Path) -> None:
    data = b"".join(b"line %d\n" % i for i in range(5000))
    (root / "big.txt").write_bytes(data)
    r = _ok(read("big.txt", reach=Reach([root]), offset=10, limit=3))
    assert r.content_digest == hashlib.sha256(data).hexdigest()


def test_paging_default_and_explicit(root: Path) -> None:
    (root / "big.txt").write_text("".join(f"L{i}\n" for i in range(1, 5001)))
    reach = Reach([root])
    first = _ok(read("big.txt", reach=reach))
    assert (first.line_start, first.line_end, first.line_total) == (1, READ_DEFAULT_LINES, 5000)
    assert first.more
    assert "call read('big.txt', offset=2000)" in first.for_model()
    window = _ok(read("big.txt", reach=reach, offset=4990, limit=50))
    assert (window.line_start, window.line_end) == (4991, 5000)
    assert window.text.splitlines()[0] == "  4991\tL4991"
    assert window.text.splitlines()[-1] == "  5000\tL5000"
    assert not window.more


def test_offset_past_the_end_is_invalid(root: Path) -> None:
    (root / "s.txt").write_text("a\nb\n")
    r = _refused(read("s.txt", reach=Reach([root]), offset=2))
    assert r.reason == "invalid_input"
    assert "2 lines" in r.message


@pytest.mark.parametrize(("offset", "limit"), [(-1, None), (0, 0), ("1", None), (True, None)])
def test_bad_window_arguments(root: Path, offset: object, limit: object) -> None:
    (root / "s.txt").write_text("a\n")
    r = read("s.txt", reach=Reach([root]), offset=offset, limit=limit)  # type: ignore[arg-type]
    assert _refused(r).reason == "invalid_input"


def test_long_lines_clipped_and_crlf(root: Path) -> None:
    long = "x" * (READ_MAX_LINE_CHARS + 500)
    (root / "w.txt").write_bytes(f"short\r\n{long}\r\nend".encode())
    r = _ok(read("w.txt", reach=Reach([root])))
    lines = r.text.split("\n")
    assert lines[0] == "     1\tshort"
    assert lines[1].startswith("     2\t" + "x" * READ_MAX_LINE_CHARS + "…")
    assert f"clipped {READ_MAX_LINE_CHARS + 500} chars" in lines[1]
    assert lines[2] == "     3\tend"
    assert r.clipped_lines == 1
    assert r.line_total == 3


def test_empty_file(root: Path) -> None:
    (root / "e.txt").write_bytes(b"")
    r = _ok(read("e.txt", reach=Reach([root])))
    assert (r.text, r.line_start, r.line_end, r.line_total) == ("", 0, 0, 0)
    assert "empty" in r.for_model()


def test_bom_and_unicode(root: Path) -> None:
    (root / "u.txt").write_bytes("\ufeffgrüße ✓\n".encode())
    assert _ok(read("u.txt", reach=Reach([root]))).text == "     1\tgrüße ✓"


def test_text_named_png_is_read(root: Path) -> None:
    (root / "notes.png").write_text("this is text\n")
    assert "this is text" in _ok(read("notes.png", reach=Reach([root]))).text


def test_svg_is_text_to_read(root: Path) -> None:
    (root / "d.svg").write_bytes(corpus.svg())
    assert "<svg" in _ok(read("d.svg", reach=Reach([root]))).text


@pytest.mark.parametrize("fmt", ["png", "jpeg", "gif", "webp", "bmp", "tiff"])
def test_images_refused_naming_view(root: Path, fmt: str) -> None:
    (root / f"img.{fmt}").write_bytes(corpus.raster(fmt, 96, 64))
    r = _refused(read(f"img.{fmt}", reach=Reach([root])))
    assert r.reason == "unsupported_type"
    assert f"view('img.{fmt}')" in r.message
    assert "image (96x64)" in r.message


def test_png_named_txt_refused_naming_view(root: Path) -> None:
    (root / "really.txt").write_bytes(corpus.raster("png"))
    r = _refused(read("really.txt", reach=Reach([root])))
    assert "is an image" in r.message
    assert "view('really.txt')" in r.message


def test_pdf_refused_naming_view_with_pages(root: Path) -> None:
    (root / "doc.pdf").write_bytes(corpus.pdf(pages=7))
    r = _refused(read("doc.pdf", reach=Reach([root])))
    assert r.reason == "unsupported_type"
    assert "PDF document (7 pages)" in r.message
    assert "view('doc.pdf', page=N)" in r.message


def test_binary_refused(root: Path) -> None:
    (root / "blob.bin").write_bytes(corpus.random_binary())
    (root / "nul.txt").write_bytes(b"text\x00with nul\n")
    for name in ["blob.bin", "nul.txt"]:
        r = _refused(read(name, reach=Reach([root])))
        assert r.reason == "unsupported_type"
        assert "binary" in r.message
        assert "view" in r.message


def test_reach_refusals(root: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    other = tmp_path_factory.mktemp("other")
    (other / "secret.txt").write_text("secret")
    (root / "link").symlink_to(other / "secret.txt")
    (root / "d").mkdir()
    reach = Reach([root])
    assert _refused(read("link", reach=reach)).reason == "outside_reach"
    assert _refused(read(f"../{other.name}/secret.txt", reach=reach)).reason == "outside_reach"
    assert _refused(read("missing.txt", reach=reach)).reason == "not_found"
    assert _refused(read("d", reach=reach)).reason == "invalid_input"
    assert _refused(read(b"bytes", reach=reach)).reason == "invalid_input"  # type: ignore[arg-type]
    assert _refused(read("a.txt", reach="nope")).reason == "invalid_input"  # type: ignore[arg-type]
    assert "secret" not in _refused(read("link", reach=reach)).message.replace("secret.txt", "")


def test_render_capability_does_not_affect_read(root: Path) -> None:
    (root / "a.txt").write_text("hello\n")
    assert _ok(read("a.txt", reach=Reach([root], render=False))).text == "     1\thello"
