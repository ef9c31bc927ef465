"""Retention of native documents: re-viewable ones elide like images, attached ones stay."""

from __future__ import annotations

from visus.models import get_model
from visus.record.messages import (
    AttachmentOrigin,
    DocumentPart,
    ImagePart,
    PerceptionOrigin,
    TextPart,
    ToolResult,
    UserMessage,
)
from visus.retention import RetentionPolicy, model_view

D = "ab" * 32


def _doc(origin: PerceptionOrigin | AttachmentOrigin) -> DocumentPart:
    return DocumentPart(D, "application/pdf", 5000, 3, origin)


def test_reviewable_document_is_elided_outside_the_window() -> None:
    fetched = _doc(PerceptionOrigin("docs/spec.pdf", tool="fetch_pdf"))
    record = (
        ToolResult("c1", "fetch_pdf", (TextPart("spec"), fetched), turn=1),
        UserMessage((TextPart("next"),), turn=2),
    )
    view = model_view(record)
    assert view[0].parts[0] == TextPart("spec")
    assert view[0].parts[1] == TextPart(
        '[document elided: docs/spec.pdf (3 pages) in turn 1; call fetch_pdf("docs/spec.pdf") '
        "to see it again]"
    )
    assert model_view(view) == view  # idempotent
    # inside the window (two live turns) it stays a document
    assert model_view(record, RetentionPolicy(live_turns=2))[0].parts[1] == fetched


def test_attached_document_is_never_elided() -> None:
    attached = _doc(AttachmentOrigin("report.pdf"))
    record = (
        UserMessage((attached,), turn=1),
        UserMessage((TextPart("a"),), turn=2),
        UserMessage((TextPart("b"),), turn=3),
    )
    assert model_view(record)[0].parts == (attached,)


def test_documents_do_not_count_against_the_image_budget() -> None:
    fetched = _doc(PerceptionOrigin("a.pdf", tool="fetch_pdf"))
    image = ImagePart(D, "image/png", 10, 1000, 1000, PerceptionOrigin("a.png"))
    record = (
        ToolResult("c1", "fetch_pdf", (fetched,), turn=1),
        ToolResult("c2", "view", (image,), turn=1),
    )
    policy = RetentionPolicy(live_turns=1, image_token_budget=0)
    view = model_view(record, policy, model=get_model("claude-sonnet-4-6"))
    assert view[0].parts == (fetched,)  # the budget never touches a document
    assert view[1].parts == (image,)  # the newest image always stays
