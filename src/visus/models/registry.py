"""Resolve a model reference (``provider:model`` or a bare id) to a :class:`ModelSpec`.

Lookups try, in order: models added with :func:`register_model`, the built-in
:data:`~visus.models.catalog.CATALOG`, then normalised forms of the id (an Ollama
``:tag``, a dated snapshot suffix, a Bedrock Claude id). An id of a known provider that
none of these names takes the profile of its family's nearest listed model
(:mod:`visus.models.families`, said once); only an id that names no family gets a
text-only spec (``vision=False``) and only an unknown provider is an error.

Example:
    >>> parse_model_ref("openai:gpt-4.1")
    ('openai', 'gpt-4.1')
    >>> get_model("ollama:llava:13b").name, get_model("ollama:llava:13b").vision
    ('llava:13b', True)
    >>> get_model("openai-compatible:some-local-model").vision
    False
    >>> get_model("anthropic:claude-sonnet-7-1").assumed_from
    'claude-sonnet-5-5'
"""

from __future__ import annotations

import dataclasses
import re
import threading
from typing import get_args

from visus.errors import InvalidInputError
from visus.models.catalog import BEDROCK_IDS, CATALOG, REFERENCE
from visus.models.families import assume
from visus.models.spec import ModelSpec, Provider

__all__ = [
    "PROVIDERS",
    "get_model",
    "is_known_model",
    "parse_model_ref",
    "register_model",
    "similar_models",
    "unregister_model",
]

#: Every provider prefix a reference may carry.
PROVIDERS: tuple[Provider, ...] = get_args(Provider)

# Bedrock's own per-image bounds (WIRES.md): 3.75 MB, 8000 px, 20 images.
_BEDROCK_IMAGE_BYTES = 3_750_000
_BEDROCK_EDGE = 8000
_BEDROCK_IMAGES = 20

_REGION = re.compile(r"^(?:us|eu|apac|global|jp|au|us-gov)\.")
_BEDROCK_CLAUDE = re.compile(
    r"^anthropic\.(claude-[a-z]+-\d+(?:-\d{1,2})?)(?:-\d{8})?(?:-v\d+(?::\d+)?)?$"
)
_VERSION_DOT = re.compile(r"(\d)\.(\d)")
_SNAPSHOT = re.compile(r"(?:-\d{8}|@\d{8}|-\d{4}-\d{2}-\d{2}|-latest|-preview(?:-[\d-]+)?)$")

_lock = threading.Lock()
_registered: dict[str, ModelSpec] = {}


def register_model(spec: ModelSpec) -> None:
    """Add or replace a model (from configuration); it wins over the built-in catalog.

    Example:
        >>> register_model(ModelSpec(name="my-vlm", provider="openai-compatible", vision=True))
        >>> get_model("openai-compatible:my-vlm").vision
        True
        >>> unregister_model("my-vlm")
    """
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"register_model takes a ModelSpec, got {type(spec).__name__}")
    if not spec.name:
        raise InvalidInputError("a registered model needs a name")
    with _lock:
        _registered[spec.name] = spec


def unregister_model(name: str) -> None:
    """Forget a model added with :func:`register_model` (no error if absent)."""
    with _lock:
        _registered.pop(name, None)


def parse_model_ref(ref: str) -> tuple[str, str]:
    """Split ``provider:model`` into its parts; a bare id gets its catalog provider.

    A prefix that is not a provider name is part of the id (Ollama tags such as
    ``llava:13b`` contain colons). ``reference`` (and ``reference:<anything>``)
    names the offline reference model.

    Example:
        >>> parse_model_ref("claude-sonnet-4-6")
        ('anthropic', 'claude-sonnet-4-6')
        >>> parse_model_ref("llava:13b")
        ('ollama', 'llava:13b')
        >>> parse_model_ref("anthropic/claude-sonnet-4.5")
        ('openai-compatible', 'anthropic/claude-sonnet-4.5')
    """
    if not isinstance(ref, str):
        raise InvalidInputError(f"a model reference is a string, got {type(ref).__name__}")
    ref = ref.strip()
    if not ref:
        raise InvalidInputError("empty model reference")
    prefix, sep, rest = ref.partition(":")
    if sep and prefix in PROVIDERS:
        if prefix == "reference":
            return "reference", rest.strip() or "reference"
        if not rest.strip():
            raise InvalidInputError(f"model reference {ref!r} names a provider but no model")
        return prefix, rest.strip()
    if ref == "reference":
        return "reference", "reference"
    if _REGION.sub("", ref).startswith(("anthropic.", "amazon.")):
        return "bedrock", ref
    if "/" in ref:
        # vendor/model is a router's id (OpenRouter): served OpenAI-compatibly, even
        # when the model behind it is in the catalog (its limits still apply).
        return "openai-compatible", ref
    known = _lookup(ref)
    return (known.provider if known else _guess_provider(ref)), ref


def get_model(name: str) -> ModelSpec:
    """The spec for a model reference; unknown models get ``vision=False``.

    ``name`` is a bare id (``gpt-4.1``) or ``provider:model`` (``openai:gpt-4.1``,
    ``anthropic:claude-sonnet-4-6``, ``gemini:gemini-2.5-flash``,
    ``ollama:llama3.2-vision``, ``bedrock:us.anthropic.claude-...``,
    ``openai-compatible:<anything>``, ``reference``). The returned spec's ``name``
    is the id to send to the provider and ``provider`` the one asked for.

    Example:
        >>> spec = get_model("bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0")
        >>> spec.provider, spec.vision, spec.max_image_bytes
        ('bedrock', True, 3750000)
    """
    provider, model = parse_model_ref(name)
    if provider == "reference":
        known = _lookup(model)  # a named reference variant (reference-pdf), else the model
        if known is not None and known.provider == "reference" and model != "reference":
            return known
        with _lock:
            return _registered.get("reference", REFERENCE)
    spec = _lookup(model)
    if spec is None:
        # Never refused, never blind by default: the family's nearest listed model.
        with _lock:
            listed = [*CATALOG.values(), *_registered.values()]
        spec = assume(_as_provider(provider), model, listed)
    if spec is None:
        return ModelSpec(name=model, provider=_as_provider(provider), vision=False)
    if provider == "bedrock":
        return dataclasses.replace(
            spec,
            name=model,
            provider="bedrock",
            max_image_bytes=min(spec.max_image_bytes, _BEDROCK_IMAGE_BYTES),
            max_edge=min(spec.max_edge, _BEDROCK_EDGE),
            max_images=min(spec.max_images, _BEDROCK_IMAGES),
        )
    if spec.provider != provider or spec.name != model:
        return dataclasses.replace(spec, name=model, provider=_as_provider(provider))
    return spec


def is_known_model(name: str) -> bool:
    """True when ``name`` is in the catalog or registered (a typo is not: it would get
    a text-only spec from :func:`get_model`). Local providers (``ollama:``,
    ``openai-compatible:``) serve any name, so those count as known.

    Example:
        >>> is_known_model("claude-sonnet-4-6"), is_known_model("claude-sonet-4-6")
        (True, False)
    """
    provider, model = parse_model_ref(name)
    if provider in ("reference", "ollama", "openai-compatible") and ":" in name:
        return True
    return provider == "reference" or _lookup(model) is not None


def similar_models(name: str, n: int = 3) -> list[str]:
    """Catalog (and registered) ids spelled most like ``name``, best first.

    Example:
        >>> similar_models("claude-sonet-4-6")[0]
        'claude-sonnet-4-6'
    """
    import difflib

    with _lock:
        names = set(_registered) | set(CATALOG)
    return difflib.get_close_matches(parse_model_ref(name)[1], sorted(names), n=n, cutoff=0.6)


def _lookup(model: str) -> ModelSpec | None:
    with _lock:
        registered = dict(_registered)
    for candidate in _candidates(model):
        spec = registered.get(candidate) or CATALOG.get(candidate)
        if spec is not None:
            return spec
    return None


def _candidates(model: str) -> list[str]:
    """The id and its normalised forms, most specific first."""
    out = [model]
    if "/" in model and not model.startswith("/"):
        # A router's vendor/model id (OpenRouter: anthropic/claude-sonnet-4.5,
        # openai/gpt-4.1): the vendor's model, whose limits still apply behind it.
        # Claude's version dots are dashes in the vendor's own ids.
        bare = model.rsplit("/", 1)[1]
        out += _candidates(bare)
        if bare.startswith("claude-"):
            out += _candidates(_VERSION_DOT.sub(r"\1-\2", bare))
    if ":" in model:
        out.append(model.split(":", 1)[0])  # an Ollama tag: llava:13b -> llava
    regionless = _REGION.sub("", model)
    if regionless in BEDROCK_IDS:
        out.append(BEDROCK_IDS[regionless])
    m = _BEDROCK_CLAUDE.match(regionless)
    if m:
        out.append(m.group(1))
    stripped = _SNAPSHOT.sub("", model)
    if stripped != model:
        out.append(stripped)  # a snapshot: claude-sonnet-4-5-20250929, gemini-3-pro-preview
    return out


def _guess_provider(model: str) -> Provider:
    """Where an unknown bare id most likely lives (only names the provider, never vision)."""
    if model.startswith("claude"):
        return "anthropic"
    if re.match(r"^(?:gpt-|chatgpt|o\d)", model):
        return "openai"
    if model.startswith("gemini"):
        return "gemini"
    return "openai-compatible"


def _as_provider(name: str) -> Provider:
    for p in PROVIDERS:
        if p == name:
            return p
    raise InvalidInputError(f"unknown provider {name!r}; expected one of {', '.join(PROVIDERS)}")
