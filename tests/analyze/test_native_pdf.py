"""vision_analyze sends PDFs natively to PDF-capable models, rendered pages to the rest.

``reference-pdf`` is the offline reference model with ``pdf=True``: it receives the
PDF as a document part (an OpenAI Chat ``file`` part on its wire) and reads it by
rendering and OCRing each page, reporting each page's ``where`` as ``.../page N``.
Plain ``reference`` is vision-only and gets rendered pages (image parts).
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pypdfium2 as pdfium
import pytest

from tests.analyze.conftest import FakeClient, pdf_bytes, word_png
from visus import limits
from visus.analyze import AnalyzeError, vision_analyze
from visus.analyze._inputs import Document, Loaded, Picture, native_document
from visus.analyze.vision import _inputs_for
from visus.config import VisusConfig
from visus.models import get_model
from visus.perception import Reach
from visus.record.messages import DocumentPart, ImagePart, TextPart

WORDS = ["COPPER", "SILVER"]


def _images(text: str) -> list[dict[str, Any]]:
    block = text.split("```json\n", 1)[1].split("\n```", 1)[0]
    images: list[dict[str, Any]] = json.loads(block)["images"]
    return images


def _blank_pdf(pages: int) -> bytes:
    doc = pdfium.PdfDocument.new()
    for _ in range(pages):
        doc.new_page(72, 72)
    buf = io.BytesIO()
    doc.save(buf)
    doc.close()
    return buf.getvalue()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "doc.pdf").write_bytes(pdf_bytes(WORDS))
    return work


def test_reference_pdf_is_in_the_catalog_and_honest() -> None:
    spec = get_model("reference-pdf")
    assert (spec.name, spec.provider, spec.pdf, spec.vision) == (
        "reference-pdf",
        "reference",
        True,
        True,
    )
    assert get_model("reference").pdf is False


async def test_native_path_reads_both_pages_through_the_reference_server(
    root: Path, cfg: VisusConfig
) -> None:
    result = await vision_analyze(
        "Read", file_path="doc.pdf", model="reference-pdf", reach=Reach([root]), config=cfg
    )
    images = _images(result.text)
    assert [[w["text"] for w in im["words"]] for im in images] == [["COPPER"], ["SILVER"]]
    # the pages came out of one document part of the user message, not two image parts
    wheres = [im["where"] for im in images]
    assert wheres[0].endswith("/page 1")
    assert wheres[1].endswith("/page 2")
    assert wheres[0].rsplit("/", 1)[0] == wheres[1].rsplit("/", 1)[0]
    assert result.model == "reference-pdf"
    assert result.input_tokens > 0


async def test_vision_only_model_gets_rendered_pages(root: Path, cfg: VisusConfig) -> None:
    result = await vision_analyze(
        "Read", file_path="doc.pdf", model="reference", reach=Reach([root]), config=cfg
    )
    images = _images(result.text)
    assert [[w["text"] for w in im["words"]] for im in images] == [["COPPER"], ["SILVER"]]
    assert not any("/page" in im["where"] for im in images)  # two image parts


async def test_the_request_holds_one_document_part(root: Path, cfg: VisusConfig) -> None:
    fake = FakeClient(["ok"])
    await vision_analyze(
        "Read",
        file_path="doc.pdf",
        model="reference-pdf",
        reach=Reach([root]),
        config=cfg,
        client=fake,
    )
    parts = fake.requests[0].messages[0].parts
    docs = [p for p in parts if isinstance(p, DocumentPart)]
    assert len(docs) == 1
    assert (docs[0].page_count, docs[0].media_type) == (2, "application/pdf")
    assert docs[0].size == len((root / "doc.pdf").read_bytes())
    assert not any(isinstance(p, ImagePart) for p in parts)
    texts = [p.text for p in parts if isinstance(p, TextPart)]
    assert texts == ["File: doc.pdf (PDF, 2 pages)", "Read"]


async def test_a_page_range_is_sent_as_rendered_pages(root: Path, cfg: VisusConfig) -> None:
    fake = FakeClient(["ok"])
    await vision_analyze(
        "Read",
        file_path="doc.pdf",
        model="reference-pdf",
        pages=(2, 2),
        reach=Reach([root]),
        config=cfg,
        client=fake,
    )
    parts = fake.requests[0].messages[0].parts
    assert [type(p).__name__ for p in parts] == ["TextPart", "ImagePart", "TextPart"]
    assert parts[0] == TextPart("File: doc.pdf, page 2 of 2")


async def test_native_pdf_past_the_provider_page_cap(root: Path, cfg: VisusConfig) -> None:
    (root / "long.pdf").write_bytes(_blank_pdf(limits.OPENAI_MAX_PDF_PAGES + 1))
    kw: dict[str, Any] = {"file_path": "long.pdf", "reach": Reach([root]), "config": cfg}
    with pytest.raises(AnalyzeError) as info:
        await vision_analyze("Read", model="reference-pdf", **kw)
    assert info.value.code == "PDF_TOO_MANY_PAGES"
    assert f"at most {limits.OPENAI_MAX_PDF_PAGES} pages per PDF" in str(info.value)
    # a page range still works: rendered pages
    fake = FakeClient(["ok"])
    await vision_analyze("Read", model="reference-pdf", pages=(1, 2), client=fake, **kw)
    assert sum(isinstance(p, ImagePart) for p in fake.requests[0].messages[0].parts) == 2


async def test_native_pdf_needs_no_rendering(root: Path, cfg: VisusConfig) -> None:
    no_render = Reach([root], render=False)
    fake = FakeClient(["fine"])
    ok = await vision_analyze(
        "?", file_path="doc.pdf", model="reference-pdf", reach=no_render, config=cfg, client=fake
    )
    assert ok.text == "fine"
    with pytest.raises(AnalyzeError) as info:  # the vision-only model needs the pages rendered
        await vision_analyze(
            "?", file_path="doc.pdf", model="reference", reach=no_render, config=cfg
        )
    assert info.value.code == "PDF_NOT_SUPPORTED"


def test_wire_without_documents_or_oversized_pdf_falls_back_to_pages() -> None:
    spec = replace(get_model("claude-sonnet-4-6"), pdf=True)
    loaded = [Loaded(pdf_bytes(WORDS), "doc.pdf")]
    native = _inputs_for(loaded, spec, "anthropic", render=True, pages=None)
    assert [type(p) for p in native] == [Document]
    on_ollama = _inputs_for(loaded, spec, "ollama", render=True, pages=None)
    assert [type(p) for p in on_ollama] == [Picture, Picture]
    assert (
        native_document(loaded[0], spec=spec, max_pages=None, max_bytes=10, index=1, count=1)
        is None
    )
    image = Loaded(word_png("ORCHID"), "x.png")
    kw: dict[str, Any] = {"spec": spec, "max_pages": None, "max_bytes": None}
    assert native_document(image, index=1, count=1, **kw) is None
