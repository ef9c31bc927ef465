"""LangChain's content blocks as the dicts it passes on, read and written without LangChain.

A LangChain message's content is a string or a list of blocks; an image block comes
in any of the shapes LangChain hands a chat model: its standard ``image`` block
(``base64`` and ``mime_type``, or a ``url``), OpenAI's ``image_url``, Anthropic's
base64 ``source`` and the v0 ``source_type``/``data``. A ``view`` of visus's records
what it showed in its tool message's ``artifact`` (never sent to the model), which a
later request reads back to name the image's source in its descriptor.
:mod:`visus.integrations.langchain` is the framework's glue and holds its messages.

Example:
    >>> openai = {"type": "image_url", "image_url": {"url": "data:image/png;base64,UE5H"}}
    >>> image_bytes(image_block(b"PNG", "image/png")), image_bytes(openai)
    ((b'PNG', 'image/png'), (b'PNG', 'image/png'))
    >>> view_of(view_artifact("ab" * 32, {"path": "shot.png"})["visus"]).source
    'shot.png'
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

from visus.integrations.core import NO_VIEW, ViewCall
from visus.integrations.memo import ImageMemo
from visus.retention import sealed_reasoning
from visus.wire._thinking import is_claude_thinking

__all__ = [
    "artifact_of",
    "image_block",
    "image_bytes",
    "image_data",
    "image_key",
    "image_url",
    "is_image_block",
    "marked",
    "reasoned",
    "text_block",
    "thinking_blocks",
    "view_artifact",
    "view_of",
]

# The key of visus's record in a tool message's artifact.
_ARTIFACT = "visus"


def image_block(data: bytes, media_type: str) -> dict[str, Any]:
    """An image as LangChain's standard content block."""
    return {
        "type": "image",
        "base64": base64.b64encode(data).decode("ascii"),
        "mime_type": media_type,
    }


def text_block(text: str) -> dict[str, Any]:
    """``text`` as a content block."""
    return {"type": "text", "text": text}


def is_image_block(block: object) -> TypeGuard[dict[str, Any]]:
    """Whether ``block`` is an image block (LangChain's ``image`` or OpenAI's ``image_url``)."""
    return isinstance(block, dict) and block.get("type") in {"image", "image_url"}


def image_url(block: dict[str, Any]) -> str | None:
    """The URL an image block names (LangChain's ``url`` or OpenAI's ``image_url``)."""
    url = block.get("url")
    inner = block.get("image_url")
    if url is None and inner is not None:
        url = inner.get("url") if isinstance(inner, dict) else inner
    return url if isinstance(url, str) else None


def image_bytes(block: dict[str, Any], memo: ImageMemo | None = None) -> tuple[bytes, str] | None:
    """(bytes, media type) of an inline image block in any shape LangChain passes on
    (with ``memo``, an integration's, its base64 decoded once)."""
    b64: Any = block.get("base64")
    media_type: Any = block.get("mime_type")
    if b64 is None and block.get("source_type") == "base64":  # LangChain v0 blocks
        b64 = block.get("data")
    source = block.get("source")
    if b64 is None and isinstance(source, dict) and source.get("type") == "base64":
        b64, media_type = source.get("data"), source.get("media_type")  # Anthropic's shape
    url = image_url(block)
    if b64 is None and url is not None and url.startswith("data:") and "," in url:
        head, b64 = url[5:].split(",", 1)
        if not head.endswith(";base64"):
            return None
        media_type = head.split(";", 1)[0]
    if not isinstance(b64, str):
        return None
    data = _decoded(b64) if memo is None else memo.decoded(b64, _decoded)
    if data is None:
        return None
    return data, media_type if isinstance(media_type, str) and media_type else "image/png"


def _decoded(b64: str) -> bytes | None:
    try:
        return base64.b64decode(b64, validate=True)
    except ValueError:
        return None


def image_data(block: dict[str, Any], memo: ImageMemo | None = None) -> bytes | None:
    """The bytes of an inline image block (None for a web URL or a malformed block)."""
    found = image_bytes(block, memo)
    return None if found is None else found[0]


def image_key(block: dict[str, Any], meta: Mapping[str, Any] | None, memo: ImageMemo) -> str:
    """What tells two tool images apart: the bytes' digest (a view's names the same),
    or a web image's URL."""
    found = image_bytes(block, memo)
    if found is not None:
        return memo.digest(found[0])
    if meta is not None:
        return str(meta["digest"])
    return image_url(block) or ""


def artifact_of(message: object) -> dict[str, Any] | None:
    """What a view's tool message records in its artifact (:func:`view_artifact`), if it
    is one."""
    artifact = getattr(message, "artifact", None)
    if isinstance(artifact, dict):
        meta = artifact.get(_ARTIFACT)
        if isinstance(meta, dict) and isinstance(meta.get("digest"), str):
            return meta
    return None


def view_of(meta: Mapping[str, Any] | None) -> ViewCall:
    """The view call a tool message's visus artifact records (none without one)."""
    if meta is None:
        return NO_VIEW
    args = {"path": meta.get("source"), "page": meta.get("page"), "region": meta.get("region")}
    return ViewCall.of(args)


def view_artifact(digest: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """The artifact of a view's tool message: the digest it showed and the call's
    source, page and region (what :func:`view_of` reads back)."""
    record = {
        "digest": digest,
        "source": args.get("path"),
        "page": args.get("page"),
        "region": args.get("region"),
    }
    return {_ARTIFACT: record}


def marked(content: Sequence[Any], cache_control: Any) -> list[Any]:
    """``content`` (a message's blocks, not empty) with ``cache_control`` on its last block.

    Example:
        >>> marked(["hi"], {"type": "ephemeral"})
        [{'type': 'text', 'text': 'hi', 'cache_control': {'type': 'ephemeral'}}]
    """
    last = content[-1]
    last = text_block(last) if isinstance(last, str) else dict(last)
    last["cache_control"] = cache_control
    return [*content[:-1], last]


def thinking_blocks(content: object) -> list[dict[str, Any]]:
    """Claude's thinking blocks (``thinking``, ``redacted_thinking``) in a content list.

    Example:
        >>> thinking_blocks([{"type": "thinking", "signature": "x"}, text_block("hi")])
        [{'type': 'thinking', 'signature': 'x'}]
    """
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and is_claude_thinking(b)]


def reasoned(content: object, output_tokens: int) -> int:
    """The reasoning a reply holds bound to the prefix: none without thinking blocks,
    else its ``output_tokens`` when known, else as the blocks' sealed payloads hold it
    (signature, a redacted block's data: :func:`~visus.retention.sealed_reasoning`).

    Example:
        >>> thought = [{"type": "thinking", "signature": "A" * 1600}]
        >>> reasoned(thought, 900), reasoned(thought, 0), reasoned([text_block("hi")], 900)
        (900, 300, 0)
    """
    blocks = thinking_blocks(content)
    if blocks and output_tokens:
        return output_tokens
    return sealed_reasoning(*(b.get("signature") or b.get("data") for b in blocks))
