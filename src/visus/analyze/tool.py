"""The agent tools ``vision_analyze`` and ``video_analyze``.

Each returns the envelope JSON as text; a failure is an error outcome whose text
starts with its code (``FILE_NOT_FOUND: ...``). The tools read from the
:class:`~visus.agent.tools.ToolContext`: ``reach`` bounds ``file_path``; the
agent's own model is the default at the end of the model chain; ``config`` (the
agent's :class:`~visus.config.VisusConfig`, else ``load_config()``),
``result_cache`` (the agent's analyze cache) and ``allow_loopback_http`` (tests) are
its typed fields. Each model call's :class:`~visus.record.Usage` is appended to
``ctx.tool_usage`` so the loop can add it to the turn's usage; the envelope's
``cost_usd`` and token counts say the same.

Example:
    >>> VISION_ANALYZE.name, sorted(VISION_ANALYZE.spec.parameters["required"])
    ('vision_analyze', ['prompt'])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from visus.agent.tools import TOOL_USAGE_KEY, Tool, ToolContext, ToolOutcome
from visus.analyze._values import fail
from visus.analyze.video import DEFAULT_VIDEO_PROMPT, video_analyze
from visus.analyze.vision import vision_analyze
from visus.config import VisusConfig, load_config
from visus.errors import AnalyzeError, PolicyError
from visus.record.messages import ToolSpec, Usage

__all__ = ["TOOL_USAGE_KEY", "VIDEO_ANALYZE", "VISION_ANALYZE", "tool_usage"]


_SOURCE_PROPS: dict[str, Any] = {
    "file_path": {"type": "string", "description": "A file inside the allowed roots"},
    "file_url": {"type": "string", "description": "An https URL (fetched safely)"},
    "file_base64": {
        "type": "string",
        "description": "The file's bytes as base64 (a data:<mime>;base64, prefix is fine)",
    },
}


def tool_usage(ctx: ToolContext) -> Usage:
    """The sum of what the analyze tools spent in ``ctx`` so far."""
    return sum(ctx.tool_usage, Usage())


def _config(ctx: ToolContext) -> VisusConfig:
    cfg = ctx.config if ctx.config is not None else load_config()
    if cfg.auxiliary.vision.model:
        return cfg
    # The end of the chain is the agent's own model, not the file's default.
    spec = ctx.model
    ref = "reference" if spec.provider == "reference" else f"{spec.provider}:{spec.name}"
    return cfg.model_copy(update={"default_model": ref})


def _sink(ctx: ToolContext) -> Any:
    spent = ctx.tool_usage

    def sink(usage: Usage) -> None:
        spent.append(usage)

    return sink


def _opt_str(args: Mapping[str, Any], key: str) -> str | None:
    value = args.get(key)
    if value is not None and not isinstance(value, str):
        raise fail("INVALID_INPUT", f"{key} must be a string")
    return value


def _model(args: Mapping[str, Any], ctx: ToolContext) -> str | None:
    """The ``model`` argument, when the agent's operator lets clients pick it
    (:class:`~visus.errors.PolicyError` naming the allowed ones otherwise)."""
    model = _opt_str(args, "model")
    if model is not None and ctx.models is not None:
        ctx.models.check(model)
    return model


def _pages(args: Mapping[str, Any]) -> tuple[int, int] | None:
    value = args.get("pages")
    if value is None:
        return None
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise fail("INVALID_INPUT", "pages is [first, last], 1-based page numbers")
    return (value[0], value[1])


async def _vision(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
    try:
        prompt = args.get("prompt")
        if not isinstance(prompt, str):
            raise fail("INVALID_INPUT", "prompt must be a non-empty string")
        fmt = args.get("format")
        if fmt is not None and not isinstance(fmt, Mapping):
            raise fail("INVALID_INPUT", "format must be a JSON Schema object")
        files = args.get("files")
        if files is not None and not isinstance(files, list):
            raise fail("INVALID_INPUT", "files must be a list")
        result = await vision_analyze(
            prompt,
            file_path=_opt_str(args, "file_path"),
            file_url=_opt_str(args, "file_url"),
            file_base64=_opt_str(args, "file_base64"),
            files=files,
            model=_model(args, ctx),
            format=fmt,
            pages=_pages(args),
            reach=ctx.reach,
            config=_config(ctx),
            cache=ctx.result_cache,
            allow_loopback_http=ctx.allow_loopback_http,
            on_usage=_sink(ctx),
        )
    except AnalyzeError as e:
        return ToolOutcome.text(str(e), is_error=True)
    except PolicyError as e:
        return ToolOutcome.text(f"refused (forbidden): {e}", is_error=True)
    return ToolOutcome.text(result.to_json())


async def _video(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
    try:
        prompt = args.get("prompt", DEFAULT_VIDEO_PROMPT)
        if not isinstance(prompt, str):
            raise fail("INVALID_INPUT", "prompt must be a string")
        result = await video_analyze(
            _opt_str(args, "file_url"),
            prompt,
            _model(args, ctx),
            file_path=_opt_str(args, "file_path"),
            reach=ctx.reach,
            config=_config(ctx),
            allow_loopback_http=ctx.allow_loopback_http,
            on_usage=_sink(ctx),
        )
    except AnalyzeError as e:
        return ToolOutcome.text(str(e), is_error=True)
    except PolicyError as e:
        return ToolOutcome.text(f"refused (forbidden): {e}", is_error=True)
    return ToolOutcome.text(result.to_json())


VISION_ANALYZE = Tool(
    ToolSpec(
        name="vision_analyze",
        description=(
            "Ask a vision model one question about an image or PDF (or up to 4 files) and "
            "get its answer as JSON {text, parsed?, model, cost_usd, input_tokens, "
            "output_tokens}. Give exactly one of file_path, file_url, file_base64, or files. "
            "With format (a JSON Schema) the answer is validated JSON in 'parsed'. Errors "
            "start with a code such as FILE_NOT_FOUND or VISION_NOT_SUPPORTED."
        ),
        parameters={
            "type": "object",
            "properties": {
                "prompt": {"type": "string", "description": "The question or instruction"},
                **_SOURCE_PROPS,
                "files": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 4,
                    "description": "Several files: each an object with one source key",
                    "items": {
                        "type": "object",
                        "properties": {**_SOURCE_PROPS, "name": {"type": "string"}},
                        "additionalProperties": False,
                    },
                },
                "model": {"type": "string", "description": "Override the vision model"},
                "format": {
                    "type": "object",
                    "description": (
                        "A JSON Schema the answer must satisfy (bare, or "
                        "{type: 'json_schema', schema: {...}})"
                    ),
                },
                "pages": {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 1},
                    "minItems": 2,
                    "maxItems": 2,
                    "description": "PDF pages [first, last], 1-based",
                },
            },
            "required": ["prompt"],
        },
    ),
    _vision,
    read_only=True,
)

VIDEO_ANALYZE = Tool(
    ToolSpec(
        name="video_analyze",
        description=(
            "Ask a vision model about a video (https URL or a file inside the allowed roots). "
            "The model sees timestamped keyframes ('Frame at 0:12'). Answers JSON "
            "{text, model, cost_usd, input_tokens, output_tokens}."
        ),
        parameters={
            "type": "object",
            "properties": {
                "file_url": {"type": "string", "description": "An https URL of the video"},
                "file_path": {"type": "string", "description": "A video inside the roots"},
                "prompt": {"type": "string", "description": DEFAULT_VIDEO_PROMPT},
                "model": {"type": "string", "description": "Override the vision model"},
            },
        },
    ),
    _video,
    read_only=True,
)
