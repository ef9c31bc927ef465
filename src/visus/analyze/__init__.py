"""vision_analyze and video_analyze: single-shot questions about images, PDFs, videos.

Each call answers with one envelope (:meth:`AnalyzeResult.to_dict`):
``{"text", "parsed"?, "model", "cost_usd", "input_tokens", "output_tokens"}``;
failures raise :class:`~visus.errors.AnalyzeError`, whose text starts with its code
(``INVALID_INPUT``, ``FILE_NOT_FOUND``, ``URL_BLOCKED``, ...; see :data:`CODES`).
The agent tools are ``visus.analyze.tool.VISION_ANALYZE`` and ``VIDEO_ANALYZE``.

Example:
    >>> import asyncio, tempfile, pathlib
    >>> from visus.perception import Reach
    >>> asyncio.run(vision_analyze("?", file_path="a.png", file_url="https://x/a.png"))
    Traceback (most recent call last):
    ...
    visus.errors.AnalyzeError: INVALID_INPUT: give exactly one of file_path, file_url or \
file_base64 (got 2)
"""

from __future__ import annotations

from visus.analyze._schema import normalise_format
from visus.analyze._values import CODES, AnalyzeCode, AnalyzeResult, FileSource
from visus.analyze.cache import AnalyzeCache, FileAnalyzeCache, MemoryAnalyzeCache, cache_key
from visus.analyze.video import keyframes, video_analyze, video_analyze_sync
from visus.analyze.vision import (
    allowed_model,
    resolve_target,
    vision_analyze,
    vision_analyze_sync,
)
from visus.errors import AnalyzeError

__all__ = [
    "CODES",
    "AnalyzeCache",
    "AnalyzeCode",
    "AnalyzeError",
    "AnalyzeResult",
    "FileAnalyzeCache",
    "FileSource",
    "MemoryAnalyzeCache",
    "allowed_model",
    "cache_key",
    "keyframes",
    "normalise_format",
    "resolve_target",
    "video_analyze",
    "video_analyze_sync",
    "vision_analyze",
    "vision_analyze_sync",
]
