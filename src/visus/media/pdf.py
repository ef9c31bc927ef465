"""PDF sources: one page rendered by pypdfium2 straight at the size the profile allows.

The page is rasterised at the scale that makes it fit (never at 300 dpi to be shrunk
afterwards). PDFium is not thread-safe, so every call holds one module lock, and every
document, page and bitmap is closed before the lock is released.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from PIL import Image

from visus import limits
from visus.errors import InvalidInputError, TooLargeError, UndecodableError
from visus.media.fitting import target_size
from visus.media.types import Region

__all__ = ["PdfPage", "open_pdf", "render_pdf"]

_LOCK = threading.Lock()
# Load failures that mean "a PDF we cannot open", not "not a PDF".
_RECOGNISED_FAILURES = {
    pdfium_c.FPDF_ERR_PASSWORD: "it is password-protected",
    pdfium_c.FPDF_ERR_SECURITY: "its security handler is unsupported",
}


@dataclass(frozen=True, slots=True)
class PdfPage:
    """A rendered page (``image`` is ``None`` when only probed) and the document's facts."""

    image: Image.Image | None
    page: int
    page_count: int
    width_pt: float
    height_pt: float


def _open(data: bytes) -> pdfium.PdfDocument | None:
    try:
        return pdfium.PdfDocument(data)
    except pdfium.PdfiumError as e:
        reason = _RECOGNISED_FAILURES.get(e.err_code)
        if reason is not None:
            raise UndecodableError(f"PDF cannot be opened: {reason}") from e
        return None


def _checked_size(size: tuple[float, float], number: int) -> tuple[float, float]:
    w_pt, h_pt = size
    if not (w_pt > 0 and h_pt > 0 and math.isfinite(w_pt * h_pt)):
        raise UndecodableError(f"PDF page {number} has no area ({w_pt} x {h_pt})")
    return w_pt, h_pt


def render_pdf(
    data: bytes,
    *,
    page: int | None,
    max_edge: int,
    max_pixels: int,
    render: bool = True,
    region: Region | None = None,
) -> PdfPage | None:
    """Render ``page`` (1-based, default 1) to fit the bounds; ``None`` if not a PDF.

    With ``region`` (in page points, the page's size as reported) only that part is
    rendered, at the resolution that makes it fit: zooming in on a page renders its text
    larger, never crops pixels from a page rendered for the whole. With
    ``render=False`` only the page count and page size are read.

    Example:
        >>> render_pdf(b"plain text", page=None, max_edge=100, max_pixels=10_000) is None
        True
    """
    with _LOCK:
        doc = _open(data)
        if doc is None:
            return None
        try:
            count = len(doc)
            if count > limits.MAX_PDF_PAGES:
                raise TooLargeError(f"PDF has {count} pages, over {limits.MAX_PDF_PAGES}")
            if count == 0:
                raise UndecodableError("PDF has no pages")
            number = 1 if page is None else page
            if not 1 <= number <= count:
                raise InvalidInputError(f"page {number} is out of range 1-{count}")
            if not render:
                # The size without loading the page: loading parses its content stream
                # (3 million operators in 300 KB held a probe here for 19 s).
                w_pt, h_pt = _checked_size(doc.get_page_size(number - 1), number)
                return PdfPage(None, number, count, w_pt, h_pt)
            pdf_page = doc[number - 1]
            try:
                w_pt, h_pt = _checked_size(pdf_page.get_size(), number)
                if region is not None:
                    region.check(max(1, round(w_pt)), max(1, round(h_pt)), what="page (in points)")
                image = _rasterise(pdf_page, (w_pt, h_pt), max_edge, max_pixels, region)
            finally:
                pdf_page.close()
        finally:
            doc.close()
    return PdfPage(image, number, count, w_pt, h_pt)


def open_pdf(data: bytes) -> PdfPage | None:
    """Probe: page count and first-page size, or ``None`` if ``data`` is not a PDF."""
    return render_pdf(data, page=None, max_edge=1, max_pixels=1, render=False)


def _rasterise(
    pdf_page: pdfium.PdfPage,
    page_pt: tuple[float, float],
    max_edge: int,
    max_pixels: int,
    region: Region | None,
) -> Image.Image:
    page_w, page_h = page_pt
    # What is drawn, in points: the page, or the region of it (cut off from each side,
    # left, bottom, right, top, as PDFium takes it; a rounded page size may overhang).
    crop = (0.0, 0.0, 0.0, 0.0)
    w_pt, h_pt = page_w, page_h
    if region is not None:
        crop = (
            float(region.x0),
            max(0.0, page_h - region.y1),
            max(0.0, page_w - region.x1),
            float(region.y0),
        )
        w_pt, h_pt = page_w - crop[0] - crop[2], page_h - crop[1] - crop[3]
    pixels = min(max_pixels, limits.MAX_PDF_RENDER_PIXELS)
    # Vector pages may render larger than 72 dpi: aim at the largest size allowed.
    big = max(max_edge, math.isqrt(pixels)) * 4
    scale_up = big / max(w_pt, h_pt)
    tw, th = target_size(math.ceil(w_pt * scale_up), math.ceil(h_pt * scale_up), max_edge, pixels)
    scale = min(tw / w_pt, th / h_pt)
    bitmap = pdf_page.render(scale=scale, crop=crop)
    try:
        image: Image.Image = bitmap.to_pil().convert("RGB")
    finally:
        bitmap.close()
    return image
