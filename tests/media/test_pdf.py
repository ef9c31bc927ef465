from __future__ import annotations

import gc
import time
import warnings

import pypdfium2 as pdfium
import pytest
from media_corpus import CLAUDE, decoded, near, pdf_bytes, pixel

from tests.timing import within
from visus import limits
from visus.errors import InvalidInputError, TooLargeError, UnsupportedTypeError
from visus.media import Profile, load, probe
from visus.media import pdf as pdf_mod
from visus.media.render import render_source


def test_first_page_is_rendered_to_fill_the_profile() -> None:
    data = pdf_bytes(3, draw=True)
    f = load(data, profile=CLAUDE)
    assert (f.source_kind, f.page, f.page_count) == ("pdf", 1, 3)
    assert (f.source_width, f.source_height) == (612, 792)
    # A letter page is rendered larger than 72 dpi, up to the profile's bounds.
    assert f.height > 792
    assert f.width * f.height <= CLAUDE.max_pixels
    assert max(f.width, f.height) <= CLAUDE.max_edge
    out = decoded(f.data).convert("RGB")
    # The drawn square covers the bottom-left quarter (PDF origin is bottom-left).
    assert near(pixel(out, (10, f.height - 10)), (0, 0, 0), 10)
    assert near(pixel(out, (f.width - 10, 10)), (255, 255, 255), 10)


def test_render_scale_targets_the_fit_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    scales: list[float] = []
    real = pdfium.PdfPage.render

    def spy(self: pdfium.PdfPage, *args: object, **kwargs: object) -> object:
        scales.append(float(kwargs["scale"]))  # type: ignore[arg-type]
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pdfium.PdfPage, "render", spy)
    # In this process: load() renders in a worker, where the spy is not installed.
    f = render_source(
        pdf_bytes(1), profile=CLAUDE, render=True, page=None, offset=None, limit=None, name=None
    )
    assert f is not None
    assert len(scales) == 1
    # Rendered straight at the fitted size, not at 300 dpi (scale 4.17) then shrunk.
    assert round(792 * scales[0]) == f.height


def test_page_selection_and_range() -> None:
    data = pdf_bytes(5)
    assert load(data, profile=CLAUDE, page=5).page == 5
    with pytest.raises(InvalidInputError, match="out of range"):
        load(data, profile=CLAUDE, page=6)
    with pytest.raises(InvalidInputError):
        load(data, profile=CLAUDE, page=0)


def test_two_thousand_pages_are_fine_and_fast() -> None:
    data = pdf_bytes(2000)
    start = time.perf_counter()
    f = load(data, profile=CLAUDE, page=1999)
    assert time.perf_counter() - start < within(5)
    assert (f.page, f.page_count) == (1999, 2000)
    assert probe(data).page_count == 2000


def test_too_many_pages_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_PDF_PAGES", 10)
    with pytest.raises(TooLargeError, match="pages"):
        load(pdf_bytes(11), profile=CLAUDE)


def test_render_withheld_refuses_pdf() -> None:
    with pytest.raises(UnsupportedTypeError, match="withheld"):
        load(pdf_bytes(1), profile=CLAUDE, render=False)
    assert probe(pdf_bytes(1)).kind == "pdf"


def test_huge_page_is_bounded_by_the_render_limit() -> None:
    huge = Profile(max_edge=100_000, max_pixels=10**10, max_bytes=10**9)
    f = load(pdf_bytes(1, size=(14_400, 14_400)), profile=huge)
    assert f.width * f.height <= limits.MAX_PDF_RENDER_PIXELS


def test_truncated_pdf() -> None:
    data = pdf_bytes(3, draw=True)
    # PDFium cannot tell a PDF cut in half from any other bytes (it reports a format
    # error either way), and the rest is binary, so no decoder recognises it.
    for cut in (20, len(data) // 4, len(data) // 2):
        with pytest.raises(UnsupportedTypeError):
            load(data[:cut], profile=CLAUDE)
    # A missing tail is repaired by PDFium from the objects it still finds.
    f = load(data[:-10], profile=CLAUDE)
    assert (f.source_kind, f.page_count) == ("pdf", 3)


def test_documents_and_pages_are_closed() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            load(pdf_bytes(2, draw=True), profile=CLAUDE, page=2)
        gc.collect()
    assert pdf_mod.render_pdf(b"not a pdf", page=None, max_edge=10, max_pixels=100) is None
