"""Conversations, images, model specs and a counting blob store for the wire tests.

Images are tiny fixed PNGs (bytes pinned here, so snapshots never depend on an
encoder's version). Model specs are fixed values, not catalog entries, so a catalog
change cannot move a snapshot.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace

from visus.errors import NotFoundError
from visus.models.spec import GeminiTiles, ModelSpec
from visus.record.messages import (
    AssistantMessage,
    AttachmentOrigin,
    DocumentPart,
    ImagePart,
    ModelRequest,
    PerceptionOrigin,
    TextPart,
    ToolCall,
    ToolResult,
    ToolSpec,
    UserMessage,
)
from visus.wire import Wire

RED_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAQAAAADCAIAAAA7ljmRAAAAFElEQVR42mO8o6HBAANMDEgAhQMALKwBMnJ5/KwAAAAASUVORK5CYII="
)  # 4x3
BLUE_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAMAAAAECAIAAADETxJQAAAAF0lEQVR42mPUCLjDwMDAwMDAxAAD2FgAMowBXGAolFgAAAAASUVORK5CYII="
)  # 3x4
GREEN_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAFklEQVR42mOUW2DDwMDAxMDAwMDAAAALxAD+QZCamwAAAABJRU5ErkJggg=="
)  # 2x2
MISSING_DIGEST = "0" * 64
#: Two blank 72 x 72 pt pages, written once by pypdfium2 (``PdfDocument.new()``,
#: ``new_page(72, 72)`` twice, ``save``) and pinned so snapshots never move.
TWO_PAGE_PDF = base64.b64decode(
    "JVBERi0xLjcNCiWhs8XXDQoxIDAgb2JqDQo8PC9QYWdlcyAyIDAgUiAvVHlwZS9DYXRhbG9nPj4NCmVuZG9iag0KMiAw"
    "IG9iag0KPDwvQ291bnQgMi9LaWRzWyA0IDAgUiAgNSAwIFIgXS9UeXBlL1BhZ2VzPj4NCmVuZG9iag0KMyAwIG9iag0K"
    "PDwvQ3JlYXRpb25EYXRlKEQ6MjAyNjExMjIwNzM5MTkrMDAnMDAnKS9DcmVhdG9yKFBERml1bSk+Pg0KZW5kb2JqDQo0"
    "IDAgb2JqDQo8PC9NZWRpYUJveFsgMCAwIDcyIDcyXS9QYXJlbnQgMiAwIFIgL1Jlc291cmNlczw8Pj4vUm90YXRlIDAv"
    "VHlwZS9QYWdlPj4NCmVuZG9iag0KNSAwIG9iag0KPDwvTWVkaWFCb3hbIDAgMCA3MiA3Ml0vUGFyZW50IDIgMCBSIC9S"
    "ZXNvdXJjZXM8PD4+L1JvdGF0ZSAwL1R5cGUvUGFnZT4+DQplbmRvYmoNCnhyZWYNCjAgNg0KMDAwMDAwMDAwMCA2NTUz"
    "NSBmDQowMDAwMDAwMDE3IDAwMDAwIG4NCjAwMDAwMDAwNjYgMDAwMDAgbg0KMDAwMDAwMDEyOSAwMDAwMCBuDQowMDAw"
    "MDAwMjA2IDAwMDAwIG4NCjAwMDAwMDAyOTcgMDAwMDAgbg0KdHJhaWxlcg0KPDwNCi9Sb290IDEgMCBSDQovSW5mbyAz"
    "IDAgUg0KL1NpemUgNi9JRFs8NDMwNjQwNUFDMkM0OThCMUQzNDZFQUZBQTlFQUVERDU+PDQzMDY0MDVBQzJDNDk4QjFE"
    "MzQ2RUFGQUE5RUFFREQ1Pl0+Pg0Kc3RhcnR4cmVmDQozODgNCiUlRU9GDQo="
)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class CountingStore:
    """A dict-backed blob store that counts reads (``get``) and writes (``put``)."""

    def __init__(self, *blobs: tuple[bytes, str]) -> None:
        self.data: dict[str, bytes] = {}
        self.types: dict[str, str] = {}
        self.reads: list[str] = []
        self.puts = 0
        for data, media_type in blobs:
            self.put(data, media_type)
        self.puts = 0

    def get(self, key: str) -> bytes:
        self.reads.append(key)
        try:
            return self.data[key]
        except KeyError:
            raise NotFoundError(f"blob sha256:{key} not found") from None

    def put(self, data: bytes, media_type: str) -> str:
        key = digest(data)
        self.puts += 1
        self.data.setdefault(key, data)
        self.types.setdefault(key, media_type)
        return key

    def has(self, key: str) -> bool:
        return key in self.data


class ReadOnlyStore:
    """Only ``get``: lowering must still work (refits are then not kept)."""

    def __init__(self, store: CountingStore) -> None:
        self._store = store

    def get(self, key: str) -> bytes:
        return self._store.get(key)


def store() -> CountingStore:
    return CountingStore(
        (RED_PNG, "image/png"),
        (BLUE_PNG, "image/png"),
        (GREEN_PNG, "image/png"),
        (TWO_PAGE_PDF, "application/pdf"),
    )


def view_image(data: bytes, source: str, w: int, h: int, page: int | None = None) -> ImagePart:
    return ImagePart(
        digest=digest(data),
        media_type="image/png",
        size=len(data),
        width=w,
        height=h,
        origin=PerceptionOrigin(source=source, page=page),
    )


def attachment(data: bytes, filename: str, w: int, h: int) -> ImagePart:
    return ImagePart(
        digest=digest(data),
        media_type="image/png",
        size=len(data),
        width=w,
        height=h,
        origin=AttachmentOrigin(filename=filename),
    )


def document(
    origin: AttachmentOrigin | PerceptionOrigin, data: bytes = TWO_PAGE_PDF
) -> DocumentPart:
    return DocumentPart(
        digest=digest(data),
        media_type="application/pdf",
        size=len(data),
        page_count=2,
        origin=origin,
    )


RED = view_image(RED_PNG, "red.png", 4, 3)
BLUE = view_image(BLUE_PNG, "blue.png", 3, 4)
GREEN_ATTACHMENT = attachment(GREEN_PNG, "chart.png", 2, 2)

VIEW_TOOL = ToolSpec(
    name="view",
    description="Look at a file as an image.",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string", "description": "File to view."}},
        "required": ["path"],
    },
)
READ_TOOL = ToolSpec(
    name="read",
    description="Read a text file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def call(call_id: str, name: str, path: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments={"path": path})


def text_only() -> ModelRequest:
    return ModelRequest(
        messages=(
            UserMessage((TextPart("hello"),), turn=1),
            AssistantMessage((TextPart("Hi! How can I help?"),), turn=1),
            UserMessage((TextPart("Say bye."),), turn=2),
        )
    )


def one_view() -> ModelRequest:
    return ModelRequest(
        messages=(
            UserMessage((TextPart("What colour is red.png?"),), turn=1),
            AssistantMessage(tool_calls=(call("call_1", "view", "red.png"),), turn=1),
            ToolResult("call_1", "view", (TextPart("red.png: 4x3 png"), RED), turn=1),
        ),
        tools=(VIEW_TOOL,),
    )


def parallel_views() -> ModelRequest:
    return ModelRequest(
        messages=(
            UserMessage((TextPart("Compare red.png and blue.png."),), turn=1),
            AssistantMessage(
                (TextPart("Looking at both."),),
                tool_calls=(call("call_a", "view", "red.png"), call("call_b", "view", "blue.png")),
                turn=1,
            ),
            ToolResult("call_a", "view", (TextPart("red.png: 4x3 png"), RED), turn=1),
            ToolResult("call_b", "view", (TextPart("blue.png: 3x4 png"), BLUE), turn=1),
            AssistantMessage((TextPart("One is red, one is blue."),), turn=1),
            UserMessage((TextPart("Which is taller?"),), turn=2),
        ),
        tools=(VIEW_TOOL,),
    )


def attachment_and_view() -> ModelRequest:
    return ModelRequest(
        messages=(
            UserMessage((TextPart("Here is my chart."), GREEN_ATTACHMENT), turn=1),
            AssistantMessage(tool_calls=(call("call_v", "view", "blue.png"),), turn=1),
            ToolResult("call_v", "view", (BLUE,), turn=1),
            UserMessage((TextPart("Do they match?"),), turn=2),
        ),
        tools=(VIEW_TOOL,),
    )


ELIDED_TEXT = '[image elided: viewed red.png in turn 1; call view("red.png") to see it again]'


def elided() -> ModelRequest:
    return ModelRequest(
        messages=(
            UserMessage((TextPart("Look at red.png."),), turn=1),
            AssistantMessage(tool_calls=(call("call_1", "view", "red.png"),), turn=1),
            ToolResult(
                "call_1",
                "view",
                (TextPart("red.png: 4x3 png"), TextPart(ELIDED_TEXT, note=True)),
                turn=1,
            ),
            AssistantMessage((TextPart("It is red."),), turn=1),
            UserMessage((TextPart("Now blue.png."),), turn=2),
            AssistantMessage(tool_calls=(call("call_2", "view", "blue.png"),), turn=2),
            ToolResult("call_2", "view", (TextPart("blue.png: 3x4 png"), BLUE), turn=2),
        ),
        tools=(VIEW_TOOL,),
    )


def missing_blob() -> ModelRequest:
    gone = ImagePart(
        digest=MISSING_DIGEST,
        media_type="image/png",
        size=100,
        width=10,
        height=10,
        origin=PerceptionOrigin(source="gone.png"),
    )
    return ModelRequest(
        messages=(
            UserMessage((TextPart("Look at gone.png."),), turn=1),
            AssistantMessage(tool_calls=(call("call_1", "view", "gone.png"),), turn=1),
            ToolResult("call_1", "view", (TextPart("gone.png: 10x10 png"), gone), turn=1),
        ),
        tools=(VIEW_TOOL,),
    )


def error_result() -> ModelRequest:
    return ModelRequest(
        messages=(
            UserMessage((TextPart("Look at nope.png."),), turn=1),
            AssistantMessage(tool_calls=(call("call_1", "view", "nope.png"),), turn=1),
            ToolResult(
                "call_1",
                "view",
                (TextPart("not_found: nope.png does not exist"),),
                is_error=True,
                turn=1,
            ),
        ),
        tools=(VIEW_TOOL,),
    )


def system_and_tools() -> ModelRequest:
    return ModelRequest(
        messages=(UserMessage((TextPart("What tools do you have?"),), turn=1),),
        system="You are a careful assistant with eyes.",
        tools=(VIEW_TOOL, READ_TOOL),
        max_tokens=512,
    )


def mixed_parallel() -> ModelRequest:
    """Two parallel calls; the image comes from a tool NOT named view (shape, not name)."""
    return ModelRequest(
        messages=(
            UserMessage((TextPart("Screenshot the app and read notes.txt."),), turn=1),
            AssistantMessage(
                tool_calls=(
                    ToolCall("call_s", "screenshot", {}),
                    call("call_r", "read", "notes.txt"),
                ),
                turn=1,
            ),
            ToolResult("call_s", "screenshot", (RED,), turn=1),
            ToolResult("call_r", "read", (TextPart("1\tbuy milk"),), turn=1),
        ),
        tools=(VIEW_TOOL, READ_TOOL),
    )


FETCH_TOOL = ToolSpec(
    name="fetch_pdf",
    description="Fetch a PDF for the model to read natively.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def pdf_document() -> ModelRequest:
    """A PDF the user attached and one a tool returned (beside an image) in one run."""
    return ModelRequest(
        messages=(
            UserMessage(
                (
                    TextPart("Compare my report with the spec."),
                    document(AttachmentOrigin("Q3 report_final.v2.pdf")),
                ),
                turn=1,
            ),
            AssistantMessage(
                tool_calls=(
                    call("call_d", "fetch_pdf", "docs/spec.pdf"),
                    call("call_i", "view", "red.png"),
                ),
                turn=1,
            ),
            ToolResult(
                "call_d",
                "fetch_pdf",
                (
                    TextPart("docs/spec.pdf: 2 pages"),
                    document(PerceptionOrigin("docs/spec.pdf", tool="fetch_pdf")),
                ),
                turn=1,
            ),
            ToolResult("call_i", "view", (TextPart("red.png: 4x3 png"), RED), turn=1),
        ),
        tools=(FETCH_TOOL, VIEW_TOOL),
    )


CASES: dict[str, Callable[[], ModelRequest]] = {
    "text_only": text_only,
    "one_view": one_view,
    "parallel_views": parallel_views,
    "attachment_and_view": attachment_and_view,
    "elided": elided,
    "missing_blob": missing_blob,
    "error_result": error_result,
    "system_and_tools": system_and_tools,
    "mixed_parallel": mixed_parallel,
    "pdf_document": pdf_document,
}


@dataclass(frozen=True)
class Variant:
    name: str
    wire: Wire
    spec: ModelSpec


CLAUDE = ModelSpec(
    name="claude-test",
    provider="anthropic",
    vision=True,
    images_in_tool_results=True,
    max_edge=1568,
    max_pixels=1568 * 1568,
    max_images=100,
)
GPT = ModelSpec(name="gpt-test", provider="openai", vision=True, max_images=500)
GEMINI_3 = ModelSpec(
    name="gemini-3-test",
    provider="gemini",
    vision=True,
    images_in_tool_results=True,
    media_types=frozenset({"image/png", "image/jpeg", "image/webp"}),
    # Like the catalog's Gemini 3 models: each image carries its media resolution.
    tokens=GeminiTiles(media_resolution="high"),
)
GEMINI_2 = ModelSpec(
    name="gemini-2.5-test",
    provider="gemini",
    vision=True,
    media_types=frozenset({"image/png", "image/jpeg", "image/webp"}),
)
LLAVA = ModelSpec(name="llava-test", provider="ollama", vision=True)
BEDROCK_NATIVE = ModelSpec(  # a Claude on Bedrock: images in toolResult, cache points
    name="anthropic.claude-test",
    provider="bedrock",
    vision=True,
    images_in_tool_results=True,
    cache_points=True,
)
BEDROCK_HOISTED = ModelSpec(name="amazon.nova-test", provider="bedrock", vision=True)

VARIANTS: tuple[Variant, ...] = (
    Variant("anthropic", "anthropic", CLAUDE),
    Variant("openai-chat", "openai-chat", GPT),
    Variant("openai-responses", "openai-responses", GPT),
    Variant("gemini-3", "gemini", GEMINI_3),
    Variant("gemini-2", "gemini", GEMINI_2),
    Variant("ollama", "ollama", LLAVA),
    Variant("bedrock-native", "bedrock", BEDROCK_NATIVE),
    Variant("bedrock-hoisted", "bedrock", BEDROCK_HOISTED),
)

#: The same variants on models that take PDFs natively (Ollama's wire still has none).
PDF_VARIANTS: tuple[Variant, ...] = tuple(
    replace(v, spec=replace(v.spec, pdf=True)) for v in VARIANTS
)
