"""Documents (PDF parts) of a request: sent as they are, or a note saying why not.

Documents are never re-fitted: a model without ``spec.pdf``, a wire without documents
(``rules.documents``), a PDF past the wire's page or byte cap, or one beyond the wire's
document count (oldest leave first) becomes a text note naming it, and so does a
missing blob.

Example:
    >>> from visus.record.messages import AttachmentOrigin
    >>> document_filename(AttachmentOrigin("q3 report"))
    'q3 report.pdf'
"""

from __future__ import annotations

import base64
from typing import assert_never

from visus import limits
from visus.errors import IntegrityError, NotFoundError, StoreError
from visus.models.spec import ModelSpec
from visus.record.messages import (
    AttachmentOrigin,
    DocumentPart,
    ModelRequest,
    PerceptionOrigin,
    TextPart,
    ToolResult,
    UserMessage,
)
from visus.wire._crops import Position
from visus.wire._prepared import WireDocument, WirePart
from visus.wire._refit import BlobReader
from visus.wire._rules import WireRules, max_document_pages

__all__ = ["document_filename", "documents"]


def document_filename(origin: PerceptionOrigin | AttachmentOrigin) -> str:
    """The file name a document goes by on the wire: its own, ending in ``.pdf``."""
    if isinstance(origin, PerceptionOrigin):
        raw = origin.source.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    elif isinstance(origin, AttachmentOrigin):
        raw = origin.filename or ""
    else:
        assert_never(origin)
    name = raw.strip() or "document.pdf"
    return name if name.lower().endswith(".pdf") else f"{name}.pdf"


def _document_what(part: DocumentPart) -> str:
    origin = part.origin
    what = origin.source if isinstance(origin, PerceptionOrigin) else origin.filename
    return f"{what or 'document'}, {part.page_count} pages"


def _note(text: str) -> TextPart:
    return TextPart(text, note=True)


def documents(
    request: ModelRequest, spec: ModelSpec, rules: WireRules, blobs: BlobReader
) -> dict[Position, WirePart]:
    """Every document of the request as a :class:`WireDocument` or a note."""
    docs = [
        ((mi, pi), p)
        for mi, message in enumerate(request.messages)
        if isinstance(message, UserMessage | ToolResult)
        for pi, p in enumerate(message.parts)
        if isinstance(p, DocumentPart)
    ]
    out: dict[Position, WirePart] = {}
    if not docs:
        return out
    page_cap = max_document_pages(spec, rules)
    count_cap = rules.max_documents
    over_count = len(docs) - count_cap if count_cap is not None else 0
    for n, (at, part) in enumerate(docs):
        what = _document_what(part)
        if not spec.pdf:
            out[at] = _note(
                f"[document not sent: {spec.name} does not take PDF documents natively ({what})]"
            )
        elif not rules.documents or part.media_type != "application/pdf":
            out[at] = _note(
                f"[document not sent: this wire carries no {part.media_type} documents ({what})]"
            )
        elif page_cap is not None and part.page_count > page_cap:
            out[at] = _note(
                f"[document not sent: {what}; {spec.name} takes at most {page_cap} pages "
                "per document]"
            )
        elif n < over_count:
            out[at] = _note(
                f"[document not sent: {what}; over the {count_cap}-document limit of one request]"
            )
        else:
            out[at] = _read_document(part, spec, rules, blobs)
    return out


def _read_document(
    part: DocumentPart, spec: ModelSpec, rules: WireRules, blobs: BlobReader
) -> WirePart:
    try:
        data = blobs.get(part.digest)
    except NotFoundError:
        return _note(f"[document unavailable: blob sha256:{part.digest} is missing]")
    except IntegrityError:
        return _note(f"[document unavailable: blob sha256:{part.digest} is corrupt]")
    except StoreError as e:
        return _note(f"[document unavailable: blob sha256:{part.digest} cannot be read ({e})]")
    encoded = base64.b64encode(data).decode("ascii")
    cap = rules.max_document_bytes
    if cap is not None:
        size = len(encoded) if rules.base64_byte_limit else len(data)
        if size > cap:
            return _note(
                f"[document not sent: {_document_what(part)} is {len(data):,} bytes; "
                f"over the {cap / limits.MB:g} MB document limit of {spec.name}]"
            )
    return WireDocument(
        data=encoded,
        size=len(data),
        media_type=part.media_type,
        page_count=part.page_count,
        filename=document_filename(part.origin),
        digest=part.digest,
        origin=part.origin,
    )
