"""The catalog's data and model-reference resolution."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from visus.errors import InvalidInputError
from visus.models import (
    CATALOG,
    REFERENCE,
    AnthropicPatches,
    GeminiTiles,
    ModelSpec,
    OpenAIPatches,
    OpenAITiles,
    get_model,
    parse_model_ref,
    register_model,
    unregister_model,
)

REQUIRED = {
    "anthropic": [
        "claude-haiku-4-5",
        "claude-sonnet-4-5",
        "claude-sonnet-4-6",
        "claude-opus-4-5",
        "claude-opus-4-6",
    ],
    "openai": [
        "gpt-4o",
        "gpt-4.1",
        "gpt-4.1-mini",
        "gpt-4.1-nano",
        "gpt-5",
        "gpt-5-mini",
        "gpt-5-nano",
        "o3",
        "o4-mini",
    ],
    "gemini": ["gemini-2.5-pro", "gemini-2.5-flash", "gemini-3-pro", "gemini-3-flash"],
    "ollama": ["llama3.2-vision", "llava", "qwen2.5vl"],
    "reference": ["reference"],
}


@pytest.mark.parametrize(
    ("provider", "name"), [(p, n) for p, names in REQUIRED.items() for n in names]
)
def test_required_models_present_and_consistent(provider: str, name: str) -> None:
    spec = CATALOG[name]
    assert spec.name == name
    assert spec.provider == provider
    assert spec.vision
    assert spec.input_price_per_mtok >= 0
    assert spec.output_price_per_mtok >= 0
    profile = spec.profile()
    assert profile.max_edge == spec.max_edge
    assert profile.max_pixels <= spec.max_edge * spec.max_edge
    assert profile.max_bytes == spec.max_image_bytes
    assert profile.media_types <= {"image/png", "image/jpeg", "image/gif", "image/webp"}


def test_claude_native_limits() -> None:
    for name in REQUIRED["anthropic"]:
        spec = CATALOG[name]
        assert spec.pdf
        assert spec.images_in_tool_results
        assert isinstance(spec.tokens, AnthropicPatches)
        # Fitted to the native edge: bigger images are shrunk by the API anyway.
        assert spec.max_edge == spec.tokens.native_edge
        # 5 MB of base64 holds at most 3.75 MB of image.
        assert spec.max_image_bytes * 4 / 3 <= 5 * 1024 * 1024
    # The vision guide gives Opus 4.7 alone the larger native resolution.
    opus = CATALOG["claude-opus-4-7"]
    assert isinstance(opus.tokens, AnthropicPatches)
    assert (opus.tokens.native_edge, opus.tokens.native_tokens) == (2576, 4784)
    assert opus.max_edge == 2576
    assert 3_700_000 <= opus.max_pixels <= 4784 * 28 * 28  # about 3.75 MP
    for name in ("claude-opus-4-6", "claude-sonnet-4-6"):
        tokens = CATALOG[name].tokens
        assert isinstance(tokens, AnthropicPatches)
        assert (tokens.native_edge, tokens.native_tokens) == (1568, 1568)


def test_claude_image_counts_follow_the_context_window() -> None:
    # 100 images a request on 200k-context models, 600 on the others.
    for name, spec in CATALOG.items():
        if spec.provider == "anthropic":
            assert spec.max_images == (100 if spec.context_tokens <= 200_000 else 600), name
    assert CATALOG["claude-haiku-4-5"].max_images == 100
    assert CATALOG["claude-opus-4-7"].max_images == 600


def test_openai_formulas_and_limits() -> None:
    for name in ["gpt-4o", "gpt-4.1", "gpt-5", "o3"]:
        assert isinstance(CATALOG[name].tokens, OpenAITiles)
    for name in ["gpt-4.1-mini", "gpt-4.1-nano", "gpt-5-mini", "gpt-5-nano", "o4-mini"]:
        assert isinstance(CATALOG[name].tokens, OpenAIPatches)
    assert all(CATALOG[n].max_edge == 2048 for n in REQUIRED["openai"])


def test_gpt5_family_and_detail_original() -> None:
    for name in ["gpt-5.2", "gpt-5.2-codex", "gpt-5.3-codex", "gpt-5.4-mini", "gpt-5.4-nano"]:
        spec = CATALOG[name]
        assert spec.reasoning
        assert spec.vision
        assert isinstance(spec.tokens, OpenAIPatches)
        assert (spec.tokens.budget, spec.tokens.original_budget) == (1536, None)
    for name in ["gpt-5.4", "gpt-5.5"]:
        spec = CATALOG[name]
        assert isinstance(spec.tokens, OpenAIPatches)
        # high: 2500 patches or 2048 px; original: 10,000 patches or 6000 px.
        assert (spec.tokens.budget, spec.tokens.max_edge) == (2500, 2048)
        assert (spec.tokens.original_budget, spec.tokens.original_edge) == (10_000, 6000)
        assert (spec.max_edge, spec.max_pixels) == (6000, 10_000 * 32 * 32)


def test_nova_takes_images_in_tool_results() -> None:
    for name in ["nova-lite", "nova-pro", "nova-premier", "nova-2-lite"]:
        assert CATALOG[name].images_in_tool_results
    assert get_model("bedrock:us.amazon.nova-pro-v1:0").images_in_tool_results


def test_every_catalog_figure_names_a_source() -> None:
    import visus.models

    text = (Path(visus.models.__file__).parent / "catalog.toml").read_text()
    for name in CATALOG:
        if CATALOG[name].provider != "reference":
            assert f'[models."{name}"]' in text
    # Every source cited is defined in the header.
    cited = set(re.findall(r"\[([a-z]+-[a-z]+)\]", text))
    for source in cited:
        assert re.search(rf"^#\s+\[{source}\]\s+https://", text, re.M), source


def test_gemini_flags() -> None:
    for name in ["gemini-2.5-pro", "gemini-2.5-flash"]:
        spec = CATALOG[name]
        assert spec.video
        assert not spec.images_in_tool_results
        assert isinstance(spec.tokens, GeminiTiles)
        assert spec.tokens.media_resolution is None
    for name in ["gemini-3-pro", "gemini-3-flash"]:
        spec = CATALOG[name]
        assert spec.video
        assert spec.images_in_tool_results
        assert isinstance(spec.tokens, GeminiTiles)
        assert spec.tokens.media_resolution == "high"
    # Gemini takes no gif.
    assert "image/gif" not in CATALOG["gemini-2.5-flash"].media_types


def test_reference_model() -> None:
    spec = get_model("reference")
    assert spec is REFERENCE
    assert spec.vision
    assert not spec.pdf
    assert spec.images_in_tool_results
    assert spec.max_edge == 2576  # the newest large models' edge; bigger only slows OCR
    assert spec.input_price_per_mtok == spec.output_price_per_mtok == 0
    assert get_model("reference:openai-chat") is REFERENCE


def test_catalog_is_read_only() -> None:
    with pytest.raises(TypeError):
        CATALOG["x"] = REFERENCE  # type: ignore[index]


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("openai:gpt-4.1", ("openai", "gpt-4.1")),
        ("anthropic:claude-sonnet-4-6", ("anthropic", "claude-sonnet-4-6")),
        ("gemini:gemini-2.5-flash", ("gemini", "gemini-2.5-flash")),
        ("ollama:llama3.2-vision", ("ollama", "llama3.2-vision")),
        ("ollama:llava:13b", ("ollama", "llava:13b")),
        ("openai-compatible:Qwen/Qwen2.5-VL-7B", ("openai-compatible", "Qwen/Qwen2.5-VL-7B")),
        ("reference", ("reference", "reference")),
        ("gpt-4.1", ("openai", "gpt-4.1")),
        ("claude-opus-4-6", ("anthropic", "claude-opus-4-6")),
        ("llama3.2-vision:11b", ("ollama", "llama3.2-vision:11b")),
        ("  gpt-5  ", ("openai", "gpt-5")),
        ("mystery-model", ("openai-compatible", "mystery-model")),
    ],
)
def test_parse_model_ref(ref: str, expected: tuple[str, str]) -> None:
    assert parse_model_ref(ref) == expected


@pytest.mark.parametrize("ref", ["", "   ", "openai:", "anthropic:  "])
def test_parse_model_ref_rejects(ref: str) -> None:
    with pytest.raises(InvalidInputError):
        parse_model_ref(ref)


def test_get_model_prefixed_and_bare_agree() -> None:
    assert get_model("openai:gpt-4.1") == get_model("gpt-4.1") == CATALOG["gpt-4.1"]
    assert get_model("anthropic:claude-sonnet-4-6") is CATALOG["claude-sonnet-4-6"]


def test_get_model_normalises_tags_and_snapshots() -> None:
    tagged = get_model("ollama:llama3.2-vision:11b")
    assert tagged.vision
    assert tagged.name == "llama3.2-vision:11b"
    assert tagged.provider == "ollama"
    dated = get_model("claude-sonnet-4-5-20250929")
    assert dated.vision
    assert dated.tokens == CATALOG["claude-sonnet-4-5"].tokens
    assert dated.name == "claude-sonnet-4-5-20250929"
    assert get_model("gpt-4.1-2025-04-14").tokens == CATALOG["gpt-4.1"].tokens
    preview = get_model("gemini:gemini-3-pro-preview")
    assert preview.images_in_tool_results
    assert preview.name == "gemini-3-pro-preview"
    assert get_model("gemini-2.5-flash-preview-05-20").tokens == GeminiTiles()
    assert get_model("claude-sonnet-4-20250514").vision
    assert get_model("bedrock:us.anthropic.claude-sonnet-4-20250514-v1:0").vision


def test_get_model_bedrock_claude() -> None:
    for ref in [
        "bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0",
        "bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "bedrock:global.anthropic.claude-sonnet-4-5-20250929-v1:0",
    ]:
        spec = get_model(ref)
        assert spec.provider == "bedrock"
        assert spec.name == ref.split(":", 1)[1]
        assert spec.vision
        assert spec.tokens == CATALOG["claude-sonnet-4-5"].tokens
        assert spec.max_image_bytes <= 3_750_000
        assert spec.max_images <= 20
    # An id only the pattern knows.
    assert get_model("bedrock:eu.anthropic.claude-opus-4-6-v1").tokens == (
        CATALOG["claude-opus-4-6"].tokens
    )
    assert parse_model_ref("us.anthropic.claude-haiku-4-5-20251001-v1:0")[0] == "bedrock"


def test_unknown_models_cannot_see() -> None:
    # Ids that name no family visus knows (a family's new model takes its nearest
    # listed relative's profile: tests/models/test_families.py).
    for ref in ["openai-compatible:some-local-model", "gpt-oss-120b", "ollama:tinyllama", "x"]:
        spec = get_model(ref)
        assert not spec.vision
        assert spec.name == parse_model_ref(ref)[1]
    assert get_model("anthropic:claude-future-9").provider == "anthropic"


def test_openai_compatible_known_model_keeps_capabilities() -> None:
    spec = get_model("openai-compatible:gpt-4.1")
    assert spec.provider == "openai-compatible"
    assert spec.vision
    assert spec.tokens == CATALOG["gpt-4.1"].tokens


@pytest.fixture
def _cleanup() -> Iterator[None]:
    yield
    unregister_model("my-vlm")
    unregister_model("gpt-4o")


@pytest.mark.usefixtures("_cleanup")
def test_register_model() -> None:
    assert not get_model("openai-compatible:my-vlm").vision
    register_model(ModelSpec(name="my-vlm", provider="openai-compatible", vision=True))
    assert get_model("openai-compatible:my-vlm").vision
    assert get_model("my-vlm").provider == "openai-compatible"
    # Configuration overrides a built-in entry.
    cheaper = dataclasses.replace(CATALOG["gpt-4o"], input_price_per_mtok=0.01)
    register_model(cheaper)
    assert get_model("openai:gpt-4o").input_price_per_mtok == 0.01
    unregister_model("gpt-4o")
    assert get_model("openai:gpt-4o") is CATALOG["gpt-4o"]


def test_register_model_rejects_non_specs() -> None:
    with pytest.raises(TypeError):
        register_model("gpt-4o")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ref", "vendor_model"),
    [
        ("openai-compatible:openai/gpt-4.1", "gpt-4.1"),  # OpenRouter's default in visus
        ("openai-compatible:anthropic/claude-sonnet-4.5", "claude-sonnet-4-5"),
        ("anthropic/claude-sonnet-4-6", "claude-sonnet-4-6"),
        ("openai-compatible:google/gemini-2.5-flash", "gemini-2.5-flash"),
        ("openai-compatible:openai/gpt-4.1-2025-04-14", "gpt-4.1"),
    ],
)
def test_a_router_id_gets_its_vendor_model_s_limits(ref: str, vendor_model: str) -> None:
    spec = get_model(ref)
    vendor = get_model(vendor_model)
    # Sent under the router's id, to the OpenAI-compatible provider, seen as the vendor's.
    assert spec.name == ref.removeprefix("openai-compatible:")
    assert spec.provider == "openai-compatible"
    assert spec.vision
    assert (spec.max_edge, spec.max_image_bytes, spec.max_images) == (
        vendor.max_edge,
        vendor.max_image_bytes,
        vendor.max_images,
    )


def test_a_router_id_the_catalog_lacks_is_still_not_called_a_vision_model() -> None:
    spec = get_model("openai-compatible:qwen/qwen2.5-vl-72b-instruct")
    assert not spec.vision  # visus never guesses that a model can see
    assert parse_model_ref("anthropic/claude-sonnet-4-6")[0] == "openai-compatible"


def test_view_shows_an_image_to_the_openrouter_default_model(tmp_path: Path) -> None:
    from visus.perception import Perception, Reach, view

    Image.new("RGB", (64, 32), "red").save(tmp_path / "a.png")
    seen = view(
        str(tmp_path / "a.png"), reach=Reach([tmp_path]), model="openai-compatible:openai/gpt-4.1"
    )
    assert isinstance(seen, Perception), seen
