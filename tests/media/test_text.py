from __future__ import annotations

import io
import unicodedata

import pytest
from media_corpus import CLAUDE, decoded, encode, photo
from PIL import Image

from visus import limits
from visus.errors import InvalidInputError, TooLargeError, UnsupportedTypeError
from visus.media import Profile, load, probe
from visus.media.text import render_text, split_lines

SOURCE = "".join(
    f"def function_{i}(x):\n    return x * {i}  # comment {i}\n" for i in range(1000)
).encode()


def test_default_page_and_header_range() -> None:
    f = load(SOURCE, profile=CLAUDE, name="mod.py")
    assert (f.source_kind, f.media_type) == ("text", "image/png")
    assert (f.line_start, f.line_end, f.line_total) == (1, limits.TEXT_PAGE_LINES, 2000)
    assert max(f.width, f.height) <= CLAUDE.max_edge
    assert f.width * f.height <= CLAUDE.max_pixels


def test_offset_and_limit_select_the_page() -> None:
    f = load(SOURCE, profile=CLAUDE, offset=1990, limit=50)
    assert (f.line_start, f.line_end, f.line_total) == (1991, 2000, 2000)
    g = load(SOURCE, profile=CLAUDE, offset=10, limit=5)
    assert (g.line_start, g.line_end) == (11, 15)
    # A page of five lines is a much smaller picture than a page of 120.
    assert g.source_height < f.source_height or g.source_width < f.source_width


def test_limit_is_capped_at_the_page_maximum() -> None:
    f = load(SOURCE, profile=CLAUDE, limit=10_000)
    assert f.line_end == limits.TEXT_MAX_PAGE_LINES


@pytest.mark.parametrize(("offset", "limit"), [(2000, None), (-1, None), (0, 0)])
def test_bad_offset_or_limit_is_invalid_input(offset: int, limit: int | None) -> None:
    with pytest.raises(InvalidInputError):
        load(SOURCE, profile=CLAUDE, offset=offset, limit=limit)


def test_split_lines_matches_line_counting() -> None:
    assert split_lines("a\nb") == ["a", "b"]
    assert split_lines("a\r\nb\r\n") == ["a", "b"]
    assert split_lines("\n") == [""]
    assert probe(b"one\ntwo\nthree\n").line_total == 3


def test_long_lines_wrap_and_short_pages_stay_narrow() -> None:
    narrow = render_text("x = 1\n", offset=None, limit=None, name="a.py", **_bounds())
    wide = render_text("y" * 1000 + "\n", offset=None, limit=None, name=None, **_bounds())
    # 1000 characters wrap at TEXT_WRAP_COLUMNS: 9 rows, never one 1000-char row.
    assert wide.image.height > narrow.image.height * 3
    assert wide.image.width < 1000 * 5
    assert (wide.line_start, wide.line_end) == (1, 1)


def test_a_gigantic_single_line_is_clipped_to_one_page() -> None:
    f = load(b"z" * 2_000_000, profile=CLAUDE)
    assert (f.line_start, f.line_end, f.line_total) == (1, 1, 1)
    assert max(f.width, f.height) <= CLAUDE.max_edge


def _bounds() -> dict[str, int]:
    return {"max_edge": CLAUDE.max_edge, "max_pixels": CLAUDE.max_pixels}


def _ink_colours(data: bytes) -> set[tuple[int, int, int]]:
    im = decoded(data).convert("RGB")
    colours = im.getcolors(im.width * im.height) or []
    return {c for n, c in colours if n > 30}  # type: ignore[misc]


def test_lexer_from_name_colours_code_and_plain_text_is_monochrome() -> None:
    code = b"def f(x):\n    return 'text'  # note\n" * 5
    as_python = _ink_colours(load(code, profile=CLAUDE, name="m.py").data)
    as_text = _ink_colours(load(code, profile=CLAUDE, name="notes.txt").data)
    keyword_green = (0, 128, 0)  # Pygments default style: Keyword
    assert keyword_green in as_python
    assert keyword_green not in as_text


def test_name_is_only_a_lexer_hint() -> None:
    png = encode(photo(40, 30), "PNG")
    # PNG bytes named .txt are still a raster; text named .png is still text.
    assert load(png, profile=CLAUDE, name="notes.txt").source_kind == "raster"
    assert load(b"hello\n", profile=CLAUDE, name="picture.png").source_kind == "text"


def test_control_characters_and_tabs_do_not_break_rendering() -> None:
    f = load(b"a\tb\x1b[31mred\x07\r\n\xe2\x80\x8bzero-width\n", profile=CLAUDE)
    assert f.line_total == 2


def test_nul_bytes_and_invalid_utf8_are_not_text() -> None:
    with pytest.raises(UnsupportedTypeError):
        load(b"abc\x00def", profile=CLAUDE)
    with pytest.raises(UnsupportedTypeError):
        load(b"abc\xff\xfe", profile=CLAUDE)


def test_utf8_bom_is_text() -> None:
    assert load("\ufeffhello\n".encode(), profile=CLAUDE).line_total == 1


def test_render_withheld_refuses_text() -> None:
    with pytest.raises(UnsupportedTypeError, match="withheld"):
        load(b"hello", profile=CLAUDE, render=False)


def test_text_over_the_render_bound_is_too_large() -> None:
    with pytest.raises(TooLargeError):
        load(b"a\n" * (limits.MAX_TEXT_BYTES // 2 + 1), profile=CLAUDE)


def test_offset_on_a_raster_is_invalid_input() -> None:
    with pytest.raises(InvalidInputError):
        load(encode(photo(20, 20), "PNG"), profile=CLAUDE, offset=3)


def test_rendered_text_is_legible_to_ocr_after_fitting() -> None:
    rapidocr = pytest.importorskip("rapidocr")
    import numpy as np

    f = load(SOURCE, profile=CLAUDE, name="mod.py")
    im = Image.open(io.BytesIO(f.data)).convert("RGB")
    # OCR of the whole page is slow on CI; the header and first rows at the fitted
    # scale are the same glyph size as the rest.
    crop = im.crop((0, 0, im.width // 2, im.height // 8))
    result = rapidocr.RapidOCR(params={"Global.log_level": "error"})(np.asarray(crop))
    # NFKC folds the full-width parentheses OCR sometimes reports.
    seen = unicodedata.normalize("NFKC", "".join(result.txts or ())).replace(" ", "")
    assert "lines1-120of2000" in seen
    assert "deffunction_2(x):" in seen
    assert "#comment" in seen


def test_small_profile_still_renders_a_fitting_page() -> None:
    tiny = Profile(max_edge=200, max_pixels=200 * 150, max_bytes=60_000)
    f = load(SOURCE, profile=tiny)
    assert max(f.width, f.height) <= 200
    assert f.width * f.height <= 200 * 150
    assert f.size <= 60_000


def test_long_names_do_not_widen_the_page() -> None:
    long = load(b"x = 1\n", profile=CLAUDE, name="/deep/" + "d" * 500 + "/" + "n" * 400 + ".py")
    # Unclipped, the 400-character basename alone would be over 2,600 px wide.
    assert long.source_width < 130 * 14


def _rendered(line: str) -> bytes:
    page = render_text(
        line + "\n", offset=None, limit=None, name="t.txt", max_edge=800, max_pixels=400_000
    )
    return page.image.convert("L").tobytes()


@pytest.mark.parametrize(
    ("first", "second"),
    [("漢字かな", "한글世界"), ("😀🎉", "🚀🌍"), ("✓✗", "★☂")],
    ids=["cjk", "emoji", "symbols"],
)
def test_scripts_dejavu_lacks_draw_real_glyphs_not_boxes(first: str, second: str) -> None:
    # A character no font has draws as the .notdef box, the same box for every such
    # character; real glyphs differ from that box and from each other.
    unmapped = _rendered("\U000f0000" * len(first))
    a, b = _rendered(first), _rendered(second)
    assert len({a, b, unmapped}) == 3
    # The text is inked, not blank.
    assert min(a) < 128
