"""An id the catalog does not list: the profile its family's nearest listed model has.

Tomorrow's release (``claude-sonnet-7-1``, ``gpt-7``, ``gemini-5-pro``), a dated snapshot
or a fine-tune of a known provider is not refused and not taken for a text-only model:
it gets the profile (image limits and formula, context, thinking rules, prices) of the
listed model of its family whose version is nearest (the newer one on a tie), else a
profile every model of that provider accepts (Claude and Gemini: they all see, at the
oldest current limits; OpenAI: text only, as some of its models are). genai-prices still
prices the id itself where it knows it (:mod:`visus.models.prices`). visus says once per
id which profile it assumed and how to set the model's own (a ``[[models]]`` entry).

Example:
    >>> from visus.models.catalog import CATALOG
    >>> nearest("anthropic", "claude-sonnet-7-1", CATALOG.values()).name
    'claude-sonnet-5-5'
    >>> nearest("openai", "gpt-7", CATALOG.values()).name
    'gpt-6.1-sol'
    >>> nearest("gemini", "gemini-5-pro", CATALOG.values()).name
    'gemini-3.1-pro'
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import re
import threading
from collections.abc import Iterable

from visus.models.spec import AnthropicPatches, GeminiTiles, ModelSpec, Provider

__all__ = ["assume", "baseline", "nearest"]

log = logging.getLogger(__name__)

_CLAUDE = re.compile(r"^claude-([a-z]+)-(\d+)(?:-(\d{1,2}))?$")
_CLAUDE_OLD = re.compile(r"^claude-(\d+)(?:-(\d))?-([a-z]+)$")  # claude-3-5-sonnet
_GPT = re.compile(r"^gpt-(\d+)(?:\.(\d+))?(?:-([a-z][a-z-]*))?$")
_O_SERIES = re.compile(r"^o(\d+)(?:-([a-z][a-z-]*))?$")
_GEMINI = re.compile(r"^gemini-(\d+)(?:\.(\d+))?-([a-z][a-z-]*?)$")
#: What ends an id but names no other model: a date, a Bedrock version, a Vertex
#: ``@date``, a preview tag.
_TAIL = re.compile(
    r"(?:[-@]\d{8}|-\d{4}-\d{2}-\d{2}|-v\d+(?::\d+)?|-(?:preview|exp|latest)(?:-[\w-]*)?)$"
)
_REGION = re.compile(r"^(?:us|eu|apac|global|jp|au|us-gov|regional)\.")
#: OpenAI's ``sol`` tier is what the unsuffixed id was in earlier GPT-5 families
#: (OpenAI's gpt-5.6-sol page: "the gpt-5.6 alias routes requests to GPT-5.6 Sol").
_SAME_TIER = {"sol": ""}

_said: set[str] = set()
_said_lock = threading.Lock()


def _bare(model: str) -> str:
    """The id without what names no other model: a region, a vendor prefix, an OpenAI
    fine-tune's wrapper (``ft:gpt-4.1-mini:org::id``), a date or version tail."""
    bare = _REGION.sub("", model)
    bare = bare.removeprefix("anthropic.").removeprefix("models/")
    if bare.startswith("ft:"):
        bare = bare[3:].split(":", 1)[0]
    while (stripped := _TAIL.sub("", bare)) != bare:
        bare = stripped
    return bare


def _family(model: str) -> tuple[str, float] | None:
    """A family key and a version to compare (``claude:sonnet``, 5.5), or None."""
    bare = _bare(model)
    if m := _CLAUDE.match(bare):
        return f"claude:{m.group(1)}", int(m.group(2)) + int(m.group(3) or 0) / 100
    if m := _CLAUDE_OLD.match(bare):
        return f"claude:{m.group(3)}", int(m.group(1)) + int(m.group(2) or 0) / 100
    if m := _GPT.match(bare):
        tier = m.group(3) or ""
        return f"gpt:{_SAME_TIER.get(tier, tier)}", int(m.group(1)) + int(m.group(2) or 0) / 100
    if m := _O_SERIES.match(bare):
        return f"o:{m.group(2) or ''}", float(m.group(1))
    if m := _GEMINI.match(bare):
        return f"gemini:{m.group(3)}", int(m.group(1)) + int(m.group(2) or 0) / 100
    return None


def _closest(version: float, found: list[tuple[float, ModelSpec]]) -> ModelSpec | None:
    if not found:
        return None
    return min(found, key=lambda vs: (abs(vs[0] - version), -vs[0]))[1]


def nearest(provider: str, model: str, catalog: Iterable[ModelSpec]) -> ModelSpec | None:
    """The listed model of ``model``'s family nearest in version (the newer on a tie);
    for an unknown tier, the nearest of the family's main line (OpenAI's unsuffixed or
    ``sol`` tier, any Gemini). None when the id names no family visus knows."""
    family = _family(model)
    if family is None:
        return None
    key, version = family
    kind = key.split(":", 1)[0]
    home = "anthropic" if provider == "bedrock" and kind == "claude" else provider
    listed = [s for s in catalog if s.provider == home and not s.name.endswith("-cyber")]
    same: list[tuple[float, ModelSpec]] = []
    line: list[tuple[float, ModelSpec]] = []
    for spec in listed:
        theirs = _family(spec.name)
        if theirs is None:
            continue
        if theirs[0] == key:
            same.append((theirs[1], spec))
        if theirs[0] in ("gpt:", f"{kind}:") or (kind == "gemini" and theirs[0].startswith(kind)):
            line.append((theirs[1], spec))
    return _closest(version, same) or _closest(version, line)


#: A profile every current model of the provider accepts (when no family matches).
_BASELINES: dict[str, ModelSpec] = {
    # Every Claude model sees: the native 1568 px / 1568-token images every one takes,
    # 100 images (the 200k-context models' cap), no thinking settings sent.
    "anthropic": ModelSpec(
        name="",
        provider="anthropic",
        vision=True,
        images_in_tool_results=True,
        max_edge=1568,
        max_pixels=1_150_000,
        max_image_bytes=3_932_160,
        max_images=100,
        media_types=frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"}),
        tokens=AnthropicPatches(),
        context_tokens=200_000,
        cache_points=True,
        cache_min_tokens=4096,
    ),
    # Every Gemini model sees: Gemini 2's tiled formula, images after function responses.
    "gemini": ModelSpec(
        name="",
        provider="gemini",
        vision=True,
        max_edge=3072,
        max_pixels=9_437_184,
        max_image_bytes=7_340_032,
        max_images=3000,
        media_types=frozenset({"image/png", "image/jpeg", "image/webp"}),
        tokens=GeminiTiles(),
        context_tokens=1_048_576,
    ),
}


def baseline(provider: str, model: str) -> ModelSpec | None:
    """The profile every model of ``provider`` accepts, named ``model`` (None: text only)."""
    home = "anthropic" if provider == "bedrock" and "claude" in model else provider
    spec = _BASELINES.get(home)
    return None if spec is None else dataclasses.replace(spec, name=model)


def assume(provider: Provider, model: str, catalog: Iterable[ModelSpec]) -> ModelSpec | None:
    """The profile an unlisted ``model`` of a known ``provider`` takes (module docstring),
    said once per id on the ``visus.models.families`` logger; None: none fits (the caller
    treats it as text only)."""
    found = nearest(provider, model, catalog)
    spec = found if found is not None else baseline(provider, model)
    if spec is None:
        return None
    source = found.name if found is not None else f"any {provider} model"
    assumed = dataclasses.replace(
        spec, name=model, provider=provider, legacy=False, assumed_from=source
    )
    said = f"the profile of {found.name}" if found else f"a profile every {provider} model takes"
    _say_once(f"{provider}:{model}", said, _close(model, catalog))
    return assumed


def _close(model: str, catalog: Iterable[ModelSpec]) -> str | None:
    """The listed id spelled most like ``model`` (a typo's hint), if one is close."""
    names = sorted({s.name for s in catalog if s.provider != "reference"})
    found = difflib.get_close_matches(model, names, n=1, cutoff=0.9)
    return found[0] if found else None


def _say_once(ref: str, source: str, close: str | None) -> None:
    with _said_lock:
        if ref in _said:
            return
        _said.add(ref)
    name = ref.split(":", 1)[1]
    hint = f" (did you mean {close}?)" if close else ""
    log.warning(
        "visus: %s is not in the catalog%s; assuming %s (image limits, context and "
        "thinking rules; genai-prices prices %s where it knows it). To set its own, add "
        "a [[models]] entry named %r to visus.toml.",
        ref,
        hint,
        source,
        name,
        name,
    )
