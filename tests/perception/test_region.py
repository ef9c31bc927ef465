"""view(region=...): zoom into part of a source at up to the model's native resolution.

A word the plain fitted view shrinks past reading is read in the zoomed view (the
reference model's OCR is the reader); rasters are cropped before they are shrunk, PDF
pages and SVG drawings are rendered at the scale the region needs; a region outside the
source, empty or inverted is refused with the source's size.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from visus.perception import Perception, Reach, Refusal, view
from visus.perception.digest import view_digest

from ..zoomshot import HEIGHT, REGION, WIDTH, WORDS, screen_png, words_read, write_screen

MODEL = "claude-sonnet-4-6"  # fits to 1568 px: the whole screen is shrunk 0.6x


def _seen(result: Perception | Refusal) -> Perception:
    assert isinstance(result, Perception), result
    return result


def _pdf_with_small_text() -> bytes:
    """A Letter page (612 x 792 pt) with two words in 4 pt Helvetica near its foot."""
    stream = b"BT /F1 4 Tf 400 100 Td (ZEBRAFISH marmalade) Tj ET"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def test_a_word_the_plain_view_cannot_read_is_read_zoomed(tmp_path: Path) -> None:
    write_screen(tmp_path)
    reach = Reach([tmp_path])
    plain = _seen(view("screen.png", reach=reach, model=MODEL))
    assert (plain.source_width, plain.source_height) == (WIDTH, HEIGHT)
    assert plain.width < WIDTH  # shrunk to fit
    assert not set(WORDS) & set(words_read(plain.data))
    zoomed = _seen(view("screen.png", reach=reach, model=MODEL, region=REGION))
    # Cropped before shrinking: a region that fits goes 1:1.
    assert (zoomed.width, zoomed.height) == (REGION[2] - REGION[0], REGION[3] - REGION[1])
    assert zoomed.region is not None
    assert zoomed.region.as_list() == REGION
    assert set(WORDS) <= set(words_read(zoomed.data))


def test_the_view_text_states_the_source_size_and_the_region(tmp_path: Path) -> None:
    write_screen(tmp_path)
    reach = Reach([tmp_path])
    plain = _seen(view("screen.png", reach=reach, model=MODEL)).describe()
    assert plain.startswith(f"screen.png: {WIDTH}x{HEIGHT}, sent 1429x804; ")
    assert plain.endswith("; zoom: region=[x0,y0,x1,y1]")
    zoomed = _seen(view("screen.png", reach=reach, model=MODEL, region=REGION)).describe()
    box = ",".join(map(str, REGION))
    assert zoomed.startswith(f"screen.png region=[{box}] of {WIDTH}x{HEIGHT}, sent ")
    assert "(1:1)" in zoomed
    assert "zoom" not in zoomed  # nothing more to see there


def test_a_large_region_is_fitted_and_says_a_smaller_one_shows_more(tmp_path: Path) -> None:
    write_screen(tmp_path)
    seen = _seen(
        view("screen.png", reach=Reach([tmp_path]), model=MODEL, region=[0, 0, 2000, 1000])
    )
    assert max(seen.width, seen.height) <= 1568
    assert seen.describe().endswith("; zoom: a smaller region=[x0,y0,x1,y1]")


def test_re_viewing_a_region_brings_back_the_same_crop(tmp_path: Path) -> None:
    write_screen(tmp_path)
    reach = Reach([tmp_path])
    first = _seen(view("screen.png", reach=reach, model=MODEL, region=REGION))
    again = _seen(view("screen.png", reach=reach, model=MODEL, region=tuple(REGION)))
    assert first.digest == again.digest
    # A digest ref zooms within the image it names (its own pixels).
    whole = screen_png()
    crop = view_digest(
        "sha256:" + _seen(view(whole, reach=reach, model="reference")).digest,
        known=[_seen(view(whole, reach=reach, model="reference")).digest],
        load=lambda _d: whole,
        reach=reach,
        model=MODEL,
        region=REGION,
    )
    assert _seen(crop).digest == first.digest


@pytest.mark.parametrize(
    ("region", "words"),
    [
        ([0, 0, WIDTH + 1, 10], "outside the image, which is 2400x1350"),
        ([-5, 0, 10, 10], "outside the image, which is 2400x1350"),
        ([100, 100, 100, 200], "empty or inverted"),
        ([500, 500, 100, 100], "empty or inverted"),
        ([1, 2, 3], "four whole numbers"),
        ([0, 0, 10.5, 10], "four whole numbers"),
        ("0,0,10,10", "four whole numbers"),
        ([True, 0, 10, 10], "four whole numbers"),
    ],
)
def test_a_bad_region_is_an_invalid_input_refusal_naming_the_size(
    tmp_path: Path, region: object, words: str
) -> None:
    write_screen(tmp_path)
    result = view("screen.png", reach=Reach([tmp_path]), model=MODEL, region=region)  # type: ignore[arg-type]
    assert isinstance(result, Refusal)
    assert result.reason == "invalid_input"
    assert words in result.message
    if "outside" in words or "empty" in words:
        assert "2400x1350" in result.message


def test_a_pdf_region_is_rendered_at_the_resolution_it_needs(tmp_path: Path) -> None:
    (tmp_path / "letter.pdf").write_bytes(_pdf_with_small_text())
    reach = Reach([tmp_path])
    plain = _seen(view("letter.pdf", reach=reach, model=MODEL))
    assert (plain.source_width, plain.source_height) == (612, 792)
    assert plain.describe().startswith("letter.pdf: 612x792 pt, page 1 of 1, sent ")
    assert not set(WORDS) & set(words_read(plain.data))
    # The words sit at x 400, about 688 pt from the top: a 180 x 30 pt region.
    zoomed = _seen(view("letter.pdf", reach=reach, model=MODEL, region=[390, 675, 570, 705]))
    # Rendered for the region (6x the points), not cropped from the fitted page (1.5x).
    assert zoomed.width > 1000
    assert set(WORDS) <= set(words_read(zoomed.data))
    refused = view("letter.pdf", reach=reach, model=MODEL, region=[0, 0, 700, 10])
    assert isinstance(refused, Refusal)
    assert "612x792" in refused.message


def test_an_svg_region_is_drawn_at_that_scale(tmp_path: Path) -> None:
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="4000" height="2000">'
        '<rect width="4000" height="2000" fill="#f5f6f8"/>'
        '<text x="3000" y="1500" font-family="DejaVu Sans" font-size="11">'
        "ZEBRAFISH marmalade</text></svg>"
    )
    (tmp_path / "chart.svg").write_text(svg)
    reach = Reach([tmp_path])
    plain = _seen(view("chart.svg", reach=reach, model=MODEL))
    assert not set(WORDS) & set(words_read(plain.data))
    zoomed = _seen(view("chart.svg", reach=reach, model=MODEL, region=[2980, 1480, 3160, 1510]))
    assert zoomed.width > 180  # drawn larger than its 180 px: vector detail
    assert set(WORDS) <= set(words_read(zoomed.data))


def test_a_text_region_crops_the_rendered_page(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("".join(f"value_{i} = {i}\n" for i in range(60)))
    reach = Reach([tmp_path])
    page = _seen(view("a.py", reach=reach, model=MODEL))
    zoomed = _seen(view("a.py", reach=reach, model=MODEL, region=[0, 0, 300, 120]))
    assert (zoomed.source_width, zoomed.source_height) == (page.source_width, page.source_height)
    assert (zoomed.width, zoomed.height) == (300, 120)
    assert zoomed.line_start == page.line_start
