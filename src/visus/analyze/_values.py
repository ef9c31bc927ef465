"""The values vision_analyze and video_analyze trade in: sources, results, codes.

Example:
    >>> r = AnalyzeResult(text="a cat", model="reference", cost_usd=0.0,
    ...                   input_tokens=10, output_tokens=2)
    >>> sorted(r.to_dict())
    ['cost_usd', 'input_tokens', 'model', 'output_tokens', 'text']
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from visus import limits
from visus.errors import AnalyzeError
from visus.record.messages import Usage

__all__ = [
    "CODES",
    "AnalyzeCode",
    "AnalyzeResult",
    "FileSource",
    "clip",
    "fail",
]

AnalyzeCode: TypeAlias = Literal[
    "INVALID_INPUT",
    "FILE_NOT_FOUND",
    "URL_BLOCKED",
    "FILE_TOO_LARGE",
    "UNSUPPORTED_FILE_TYPE",
    "VISION_NOT_SUPPORTED",
    "PDF_NOT_SUPPORTED",
    "PDF_TOO_MANY_PAGES",
    "VIDEO_NOT_SUPPORTED",
    "LLM_ERROR",
    "RESPONSE_NOT_JSON",
]

#: Every failure code, in the order the issue lists them (video's last but two).
CODES: tuple[AnalyzeCode, ...] = (
    "INVALID_INPUT",
    "FILE_NOT_FOUND",
    "URL_BLOCKED",
    "FILE_TOO_LARGE",
    "UNSUPPORTED_FILE_TYPE",
    "VISION_NOT_SUPPORTED",
    "PDF_NOT_SUPPORTED",
    "PDF_TOO_MANY_PAGES",
    "VIDEO_NOT_SUPPORTED",
    "LLM_ERROR",
    "RESPONSE_NOT_JSON",
)


def fail(code: AnalyzeCode, message: str) -> AnalyzeError:
    """The error to raise: ``raise fail("INVALID_INPUT", "...")``."""
    return AnalyzeError(code, message)


@dataclass(frozen=True, slots=True)
class FileSource:
    """One input file: exactly one of ``path``, ``url`` or ``base64`` is set.

    ``base64`` may carry a ``data:<mime>;base64,`` prefix. ``name`` labels the file
    for the model (default: the path's or URL's last segment).

    Example:
        >>> FileSource.of(file_path="shot.png").path
        'shot.png'
    """

    path: str | None = None
    url: str | None = None
    base64: str | None = None
    name: str | None = None

    @classmethod
    def of(
        cls,
        *,
        file_path: str | None = None,
        file_url: str | None = None,
        file_base64: str | None = None,
        name: str | None = None,
    ) -> FileSource:
        """A source from the tool's argument names, checking there is exactly one."""
        given = [v for v in (file_path, file_url, file_base64) if v is not None]
        if len(given) != 1:
            raise fail(
                "INVALID_INPUT",
                f"give exactly one of file_path, file_url or file_base64 (got {len(given)})",
            )
        for key, value in (("file_path", file_path), ("file_url", file_url)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise fail("INVALID_INPUT", f"{key} must be a non-empty string")
        if file_base64 is not None and not isinstance(file_base64, str):
            raise fail("INVALID_INPUT", "file_base64 must be a string")
        return cls(path=file_path, url=file_url, base64=file_base64, name=name)

    @classmethod
    def from_mapping(cls, item: object) -> FileSource:
        """A source from ``{"file_path"|"file_url"|"file_base64": ..., "name"?: ...}``."""
        if isinstance(item, FileSource):
            return cls.of(
                file_path=item.path, file_url=item.url, file_base64=item.base64, name=item.name
            )
        if not isinstance(item, Mapping):
            raise fail("INVALID_INPUT", "each entry of files is an object with one source key")
        unknown = set(item) - {"file_path", "file_url", "file_base64", "name"}
        if unknown:
            raise fail("INVALID_INPUT", f"unknown keys in a files entry: {sorted(unknown)}")
        name = item.get("name")
        if name is not None and not isinstance(name, str):
            raise fail("INVALID_INPUT", "name must be a string")
        return cls.of(
            file_path=item.get("file_path"),
            file_url=item.get("file_url"),
            file_base64=item.get("file_base64"),
            name=name,
        )

    @property
    def label(self) -> str:
        """How the model and the session log name this file."""
        if self.name:
            return self.name
        if self.path is not None:
            return self.path
        if self.url is not None:
            return self.url
        return "inline file"


@dataclass(frozen=True, slots=True)
class AnalyzeResult:
    """One answer: the envelope ``{"text", "parsed"?, "model", "cost_usd", ...}``.

    ``parsed`` is set (and in the envelope) only when a schema was asked for;
    ``structured`` says whether one was. ``clipped`` marks a text cut at
    ``limits.ANALYZE_MAX_RESULT_CHARS``; ``cached`` a result served from the cache
    (its tokens and cost are then zero: the call cost nothing).
    """

    text: str
    model: str
    cost_usd: float
    input_tokens: int
    output_tokens: int
    parsed: Any = None
    structured: bool = False
    clipped: bool = False
    cached: bool = False

    @classmethod
    def answered(
        cls, text: str, usage: Usage, model: str, *, parsed: Any = None, structured: bool = False
    ) -> AnalyzeResult:
        """The envelope of a model's answer, its text clipped (:func:`clip`).

        Example:
            >>> r = AnalyzeResult.answered("x" * 9, Usage(3, 1, 0.5), "m")
            >>> r.input_tokens, r.cost_usd, r.clipped
            (3, 0.5, False)
        """
        shown, clipped = clip(text)
        return cls(
            text=shown,
            model=model,
            cost_usd=usage.cost_usd,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            parsed=parsed,
            structured=structured,
            clipped=clipped,
        )

    @property
    def usage(self) -> Usage:
        """What this call cost, as the record's :class:`Usage`."""
        return Usage(self.input_tokens, self.output_tokens, self.cost_usd)

    def to_dict(self) -> dict[str, Any]:
        """The envelope (``cached: true`` added only for a cache hit)."""
        out: dict[str, Any] = {"text": self.text}
        if self.structured:
            out["parsed"] = self.parsed
        out.update(
            model=self.model,
            cost_usd=round(self.cost_usd, 10),
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
        )
        if self.cached:
            out["cached"] = True
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)


def clip(text: str, max_chars: int = limits.ANALYZE_MAX_RESULT_CHARS) -> tuple[str, bool]:
    """``text`` cut to at most ``max_chars`` characters, marker included.

    Example:
        >>> out, cut = clip("x" * 100, 60)
        >>> cut, len(out) <= 60, out.endswith("]")
        (True, True, True)
    """
    if len(text) <= max_chars:
        return text, False
    marker = f"\n[… clipped: showing {{}} of {len(text)} characters]"
    keep = max(0, max_chars - len(marker.format(max_chars)))
    return text[:keep] + marker.format(keep), True
