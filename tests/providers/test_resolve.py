"""resolve(): every ref form, keys from settings or env, clear errors; default_model()."""

from __future__ import annotations

import pytest

from visus.errors import AuthError, ConfigError
from visus.providers import OPENROUTER_BASE_URL, ProviderSettings, default_model, resolve
from visus.providers.anthropic_client import AnthropicClient
from visus.providers.bedrock_client import BedrockClient
from visus.providers.gemini_client import GeminiClient
from visus.providers.ollama_client import OllamaClient
from visus.providers.openai_client import OpenAIClient


def _settings(**kw: object) -> ProviderSettings:
    return ProviderSettings(env=kw.pop("env", {}), **kw)  # type: ignore[arg-type]


def test_openai_ref_uses_responses_wire_and_the_catalog_spec() -> None:
    client, spec = resolve("openai:gpt-4.1", config=_settings(api_keys={"openai": "sk-1"}))
    assert isinstance(client, OpenAIClient)
    assert (client.provider, client.wire) == ("openai", "openai-responses")
    assert client.config.api_key == "sk-1"
    assert spec.name == "gpt-4.1"
    assert spec.vision
    assert spec.input_price_per_mtok > 0


def test_openai_wire_override_and_key_from_env() -> None:
    client, _ = resolve(
        "openai:gpt-4.1",
        config=_settings(wire="openai-chat", env={"OPENAI_API_KEY": "sk-env"}),
    )
    assert client.wire == "openai-chat"
    assert isinstance(client, OpenAIClient)
    assert client.config.api_key == "sk-env"


def test_bare_catalog_id_is_resolved_through_the_catalog() -> None:
    client, spec = resolve("claude-sonnet-4-6", config=_settings(api_keys={"anthropic": "a"}))
    assert isinstance(client, AnthropicClient)
    assert spec.name == "claude-sonnet-4-6"


@pytest.mark.parametrize(
    ("ref", "env", "names"),
    [
        ("openai:gpt-4.1", "OPENAI_API_KEY", ("OPENAI_API_KEY",)),
        ("anthropic:claude-sonnet-4-6", "ANTHROPIC_API_KEY", ("ANTHROPIC_API_KEY",)),
        ("gemini:gemini-2.5-flash", "GEMINI_API_KEY", ("GEMINI_API_KEY", "GOOGLE_API_KEY")),
    ],
)
def test_missing_key_names_the_env_var(ref: str, env: str, names: tuple[str, ...]) -> None:
    with pytest.raises(AuthError) as info:
        resolve(ref, config=_settings())
    for name in names:
        assert name in str(info.value)
    client, _ = resolve(ref, config=_settings(env={env: "k"}))
    assert client.config.api_key == "k"  # type: ignore[attr-defined]


def test_gemini_accepts_google_api_key() -> None:
    client, spec = resolve("gemini:gemini-2.5-flash", config=_settings(env={"GOOGLE_API_KEY": "g"}))
    assert isinstance(client, GeminiClient)
    assert client.config.api_key == "g"
    assert spec.name == "gemini-2.5-flash"


def test_ollama_defaults_to_local_host_and_honours_ollama_host() -> None:
    client, spec = resolve("ollama:llama3.2-vision", config=_settings())
    assert isinstance(client, OllamaClient)
    assert client.config.base_url == "http://127.0.0.1:11434"
    assert spec.name == "llama3.2-vision"
    assert spec.vision
    client, spec = resolve(
        "ollama:llava:13b", config=_settings(env={"OLLAMA_HOST": "http://127.0.0.1:9"})
    )
    assert client.config.base_url == "http://127.0.0.1:9"  # type: ignore[attr-defined]
    assert spec.name == "llava:13b"  # the tag stays part of the id


def test_bedrock_needs_credentials_and_region() -> None:
    ref = "bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    with pytest.raises(AuthError, match="AWS_ACCESS_KEY_ID"):
        resolve(ref, config=_settings(env={"AWS_REGION": "us-east-1"}))
    env = {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "s"}
    with pytest.raises(ConfigError, match="AWS_REGION"):
        resolve(ref, config=_settings(env=env))
    client, spec = resolve(ref, config=_settings(env={**env, "AWS_REGION": "eu-west-1"}))
    assert isinstance(client, BedrockClient)
    assert (client.config.api_key, client.config.region) == ("AKID", "eu-west-1")
    assert spec.name == "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    assert spec.provider == "bedrock"
    assert spec.vision


def test_openai_compatible_needs_a_base_url() -> None:
    with pytest.raises(ConfigError, match="VISUS_OPENAI_COMPATIBLE_BASE_URL"):
        resolve("openai-compatible:qwen2-vl", config=_settings())
    client, spec = resolve(
        "openai-compatible:qwen2-vl",
        config=_settings(base_urls={"openai-compatible": "http://127.0.0.1:8000/v1"}),
    )
    assert isinstance(client, OpenAIClient)
    assert (client.provider, client.wire) == ("openai-compatible", "openai-chat")
    assert client.config.base_url == "http://127.0.0.1:8000/v1"
    assert spec.name == "qwen2-vl"


def test_openai_compatible_with_openrouter_uses_openrouter_key() -> None:
    ref = "openai-compatible:meta-llama/llama-3.2-11b-vision-instruct"
    client, spec = resolve(ref, config=_settings(env={"OPENROUTER_API_KEY": "or-key"}))
    assert client.config.base_url == OPENROUTER_BASE_URL  # type: ignore[attr-defined]
    assert client.config.api_key == "or-key"  # type: ignore[attr-defined]
    assert spec.name == "meta-llama/llama-3.2-11b-vision-instruct"
    with pytest.raises(AuthError, match="OPENROUTER_API_KEY"):
        resolve(ref, config=_settings(base_urls={"openai-compatible": OPENROUTER_BASE_URL}))


@pytest.mark.parametrize(
    ("ref", "cls", "wire", "base"),
    [
        ("reference", OpenAIClient, "openai-chat", "http://127.0.0.1:8760/v1"),
        ("reference:openai-chat", OpenAIClient, "openai-chat", "http://127.0.0.1:8760/v1"),
        (
            "reference:openai-responses",
            OpenAIClient,
            "openai-responses",
            "http://127.0.0.1:8760/v1",
        ),
        ("reference:anthropic", AnthropicClient, "anthropic", "http://127.0.0.1:8760"),
        ("reference:gemini", GeminiClient, "gemini", "http://127.0.0.1:8760"),
        ("reference:ollama", OllamaClient, "ollama", "http://127.0.0.1:8760"),
        ("reference:bedrock", BedrockClient, "bedrock", "http://127.0.0.1:8760"),
    ],
)
def test_reference_refs_pick_the_wire(ref: str, cls: type, wire: str, base: str) -> None:
    client, spec = resolve(
        ref, config=_settings(env={"VISUS_REFERENCE_URL": "http://127.0.0.1:8760/"})
    )
    assert isinstance(client, cls)
    assert client.wire == wire
    assert client.config.base_url == base  # type: ignore[attr-defined]
    assert spec.name == "reference"
    assert spec.provider == "reference"
    assert spec.vision


def test_reference_needs_its_url() -> None:
    with pytest.raises(ConfigError, match="VISUS_REFERENCE_URL"):
        resolve("reference", config=_settings())
    client, _ = resolve("reference", config=_settings(reference_url="http://127.0.0.1:1"))
    assert client.config.base_url == "http://127.0.0.1:1/v1"  # type: ignore[attr-defined]


@pytest.mark.parametrize("ref", ["reference:nonsense", "openai:", "  "])
def test_malformed_refs_are_config_errors(ref: str) -> None:
    with pytest.raises(ConfigError):
        resolve(ref, config=_settings(api_keys={"openai": "k"}, reference_url="http://127.0.0.1:1"))


def test_settings_pass_transport_knobs_to_the_client() -> None:
    client, _ = resolve(
        "anthropic:claude-sonnet-4-6",
        config=_settings(
            api_keys={"anthropic": "a"},
            timeout=12.0,
            max_retries=7,
            backoff_base=0.01,
            headers={"x-trace": "1"},
        ),
    )
    cfg = client.config  # type: ignore[attr-defined]
    assert (cfg.timeout, cfg.max_retries, cfg.backoff_base) == (12.0, 7, 0.01)
    assert dict(cfg.headers) == {"x-trace": "1"}


def test_default_model_prefers_a_configured_provider_else_reference() -> None:
    assert default_model(_settings()) == "reference"
    assert default_model(_settings(env={"OPENAI_API_KEY": "k"})) == "openai:gpt-6.1-sol"
    assert default_model(_settings(env={"GEMINI_API_KEY": "k"})) == "gemini:gemini-3.5-flash"
    assert default_model(_settings(api_keys={"anthropic": "k"})) == "anthropic:claude-sonnet-5-5"
    assert default_model(_settings(env={"OPENAI_API_KEY": ""})) == "reference"
    openrouter = default_model(_settings(env={"OPENROUTER_API_KEY": "k"}))
    assert openrouter == "openai-compatible:openai/gpt-6.1-sol"
    client, _ = resolve(openrouter, config=_settings(env={"OPENROUTER_API_KEY": "k"}))
    assert client.config.base_url == OPENROUTER_BASE_URL  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("ref", "wire"), [("reference-pdf", "openai-chat"), ("reference-pdf:anthropic", "anthropic")]
)
def test_reference_pdf_is_the_reference_model_that_reads_pdfs(ref: str, wire: str) -> None:
    client, spec = resolve(ref, config=ProviderSettings(reference_url="http://127.0.0.1:9", env={}))
    assert client.wire == wire
    assert (spec.name, spec.pdf, spec.vision) == ("reference-pdf", True, True)


def test_profile_rows_drive_keys_urls_and_default_wires() -> None:
    from visus.providers import PROFILES, PROVIDERS, wire_for_provider

    assert set(PROVIDERS) | {"openrouter"} == set(PROFILES)
    for row in PROFILES.values():
        for i, var in enumerate(row.key_env):
            env = {var: f"key-{i}"}
            assert ProviderSettings(env=env).key(row.name) == f"key-{i}"
        for var in row.url_env:
            assert ProviderSettings(env={var: "http://h:1"}).url(row.name) == "http://h:1"
        assert wire_for_provider(row.name) == row.default_wire
    # The first key set picks the default model, in the rows' order.
    env = {"OPENROUTER_API_KEY": "or", "GEMINI_API_KEY": "g"}
    assert default_model(ProviderSettings(env=env)) == "gemini:gemini-3.5-flash"
