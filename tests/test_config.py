"""visus.toml: discovery, layering, standard keys, masking, errors that name key and line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from visus.cli import app
from visus.config import (
    ProviderEntry,
    VisusConfig,
    config_path,
    load_config,
    mask_secret,
)
from visus.errors import ConfigError
from visus.models.spec import ModelSpec


@pytest.fixture(autouse=True)
def _no_user_config(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A visus.toml in the real user config dir must not leak into these tests."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg")))


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "visus.toml"
    path.write_text(text, encoding="utf-8")
    return path


FULL = """\
default_model = "anthropic:claude-sonnet-4-6"
data_dir = "/srv/visus"

[providers.anthropic]
api_key = "sk-ant-file-0123456789wxyz"

[providers.ollama]
base_url = "http://127.0.0.1:11434"

[auxiliary.vision]
model = "openai:gpt-4.1-mini"

[retention]
live_turns = 2
chunk = 4
image_token_budget = 20000

[reach]
roots = ["/work", "/data"]
render = false

[server]
port = 9001
token = "server-token-abcdef1234"

[telegram]
bot_token = "123456:telegram-token-zz99"
allowed_chats = [42, -100200]
allowed_users = [7, "alice"]

[[models]]
name = "my-vlm"
provider = "openai-compatible"
vision = true
max_edge = 1024
input_price_per_mtok = 0.5
"""


def test_defaults_without_file_or_keys(tmp_path: Path) -> None:
    cfg = load_config(env={"VISUS_DATA": str(tmp_path)})
    assert cfg.default_model == "reference"
    assert cfg.providers == {}
    assert cfg.retention.live_turns == 1
    assert cfg.retention.chunk == 1
    assert cfg.retention.image_token_budget is None
    assert cfg.server.host == "127.0.0.1"
    assert cfg.server.port == 8750
    assert cfg.server.token is None
    assert cfg.reach.roots == ()
    assert cfg.reach.render is True
    assert cfg.data_dir == tmp_path
    assert cfg.models == ()
    target = cfg.vision_target()
    assert (target.model, target.provider, target.api_key) == ("reference", "reference", None)


def test_full_file_is_read(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, FULL), env={})
    assert cfg.default_model == "anthropic:claude-sonnet-4-6"
    assert cfg.data_dir == Path("/srv/visus")
    assert cfg.provider("anthropic").key() == "sk-ant-file-0123456789wxyz"
    assert cfg.providers["ollama"].base_url == "http://127.0.0.1:11434"
    assert (cfg.retention.live_turns, cfg.retention.chunk) == (2, 4)
    assert cfg.retention.image_token_budget == 20000
    assert cfg.reach.roots == (Path("/work"), Path("/data"))
    assert cfg.reach.render is False
    assert cfg.server.port == 9001
    assert cfg.telegram.allowed_chats == (42, -100200)
    assert cfg.telegram.allowed_users == (7, "alice")
    spec = cfg.model_specs()[0]
    assert isinstance(spec, ModelSpec)
    assert (spec.name, spec.provider, spec.vision, spec.max_edge) == (
        "my-vlm",
        "openai-compatible",
        True,
        1024,
    )
    assert spec.input_price_per_mtok == 0.5


def test_config_is_frozen(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, FULL), env={})
    with pytest.raises(ValidationError):
        cfg.default_model = "x"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        cfg.server.port = 1  # type: ignore[misc]


def test_env_overrides_file(tmp_path: Path) -> None:
    path = _write(tmp_path, FULL)
    env = {
        "VISUS_SERVER__PORT": "9555",
        "VISUS_DEFAULT_MODEL": "gemini:gemini-2.5-flash",
        "VISUS_AUXILIARY__VISION__MODEL": "openai:gpt-4.1",
        "VISUS_PROVIDERS__ANTHROPIC__API_KEY": "sk-ant-env-0000000000aaaa",
        "VISUS_RETENTION__LIVE_TURNS": "3",
    }
    cfg = load_config(path, env=env)
    assert cfg.server.port == 9555
    assert cfg.server.token is not None  # the rest of [server] still comes from the file
    assert cfg.default_model == "gemini:gemini-2.5-flash"
    assert cfg.auxiliary.vision.model == "openai:gpt-4.1"
    assert cfg.provider("anthropic").key() == "sk-ant-env-0000000000aaaa"
    assert cfg.retention.live_turns == 3
    assert cfg.retention.chunk == 4


def test_env_var_names_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, 'default_model = "openai:gpt-5"\n')
    assert load_config(env={"VISUS_CONFIG": str(path)}).default_model == "openai:gpt-5"
    # an explicit path wins over the variable
    other = tmp_path / "other.toml"
    other.write_text('default_model = "openai:o3"\n')
    assert load_config(other, env={"VISUS_CONFIG": str(path)}).default_model == "openai:o3"


def test_default_location_is_the_user_config_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert config_path(env={}) == tmp_path / "visus" / "visus.toml"
    (tmp_path / "visus").mkdir()
    (tmp_path / "visus" / "visus.toml").write_text("[server]\nport = 7777\n")
    assert load_config(env={}).server.port == 7777


def test_named_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.toml", env={})
    with pytest.raises(ConfigError, match="not found"):
        load_config(env={"VISUS_CONFIG": str(tmp_path / "gone.toml")})


def test_dev_null_names_an_empty_configuration() -> None:
    # VISUS_CONFIG=/dev/null is how a test or a script says "no configuration file";
    # it is not a regular file, and must not be refused as a missing one.
    assert load_config(env={"VISUS_CONFIG": os.devnull}) == load_config(env={"VISUS_CONFIG": ""})
    assert (
        load_config(os.devnull, env={"VISUS_RETENTION__LIVE_TURNS": "2"}).retention.live_turns == 2
    )


@pytest.mark.parametrize(
    ("var", "provider", "model"),
    [
        ("OPENAI_API_KEY", "openai", "openai:gpt-6.1-sol"),
        ("ANTHROPIC_API_KEY", "anthropic", "anthropic:claude-sonnet-5-5"),
        ("GEMINI_API_KEY", "gemini", "gemini:gemini-3.5-flash"),
        ("GOOGLE_API_KEY", "gemini", "gemini:gemini-3.5-flash"),
        ("OPENROUTER_API_KEY", "openrouter", "openai-compatible:openai/gpt-6.1-sol"),
    ],
)
def test_standard_env_keys(var: str, provider: str, model: str) -> None:
    cfg = load_config(env={var: "key-from-env-0123456789"})
    assert cfg.providers[provider].key() == "key-from-env-0123456789"
    assert cfg.default_model == model
    target = cfg.vision_target()
    assert target.model == model
    assert target.api_key == "key-from-env-0123456789"


def test_openrouter_serves_openai_compatible_models() -> None:
    cfg = load_config(env={"OPENROUTER_API_KEY": "or-0123456789abcdef"})
    assert cfg.provider("openai-compatible").base_url == "https://openrouter.ai/api/v1"
    assert cfg.provider("openai-compatible").key() == "or-0123456789abcdef"
    assert cfg.provider("ollama") == ProviderEntry()


def test_gemini_key_wins_over_google_key() -> None:
    cfg = load_config(
        env={"GOOGLE_API_KEY": "google-key-00000", "GEMINI_API_KEY": "gemini-key-1111"}
    )
    assert cfg.providers["gemini"].key() == "gemini-key-1111"


def test_file_key_wins_over_ambient_standard_key(tmp_path: Path) -> None:
    cfg = load_config(
        _write(tmp_path, FULL), env={"ANTHROPIC_API_KEY": "sk-ant-shell-999999999999"}
    )
    assert cfg.provider("anthropic").key() == "sk-ant-file-0123456789wxyz"
    # and VISUS_* wins over both
    cfg = load_config(
        _write(tmp_path, FULL),
        env={
            "ANTHROPIC_API_KEY": "sk-ant-shell-999999999999",
            "VISUS_PROVIDERS__ANTHROPIC__API_KEY": "sk-ant-visus-88888888888",
        },
    )
    assert cfg.provider("anthropic").key() == "sk-ant-visus-88888888888"


def test_telegram_token_from_standard_env() -> None:
    cfg = load_config(env={"TELEGRAM_BOT_TOKEN": "1:abcdefghijklmnop"})
    assert cfg.telegram.bot_token is not None
    assert cfg.telegram.bot_token.get_secret_value() == "1:abcdefghijklmnop"


def test_auxiliary_vision_defaults_to_main_provider_settings(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """\
default_model = "openai:gpt-4.1"
[providers.openai]
api_key = "sk-main-0123456789"
base_url = "http://127.0.0.1:8760/v1"
[auxiliary.vision]
model = "openai:gpt-4.1-mini"
""",
    )
    target = load_config(path, env={}).vision_target()
    assert target.model == "openai:gpt-4.1-mini"
    assert target.provider == "openai"
    assert target.api_key == "sk-main-0123456789"
    assert target.base_url == "http://127.0.0.1:8760/v1"
    overridden = load_config(
        path,
        env={
            "VISUS_AUXILIARY__VISION__API_KEY": "sk-aux-9999999999",
            "VISUS_AUXILIARY__VISION__BASE_URL": "http://127.0.0.1:9/v1",
        },
    ).vision_target()
    assert overridden.api_key == "sk-aux-9999999999"
    assert overridden.base_url == "http://127.0.0.1:9/v1"


def test_visus_data_sets_the_data_dir(tmp_path: Path) -> None:
    assert load_config(env={"VISUS_DATA": str(tmp_path / "d")}).data_dir == tmp_path / "d"
    # the file wins over the ambient VISUS_DATA, VISUS_DATA_DIR over the file
    path = _write(tmp_path, f'data_dir = "{tmp_path / "f"}"\n')
    assert load_config(path, env={"VISUS_DATA": "/x"}).data_dir == tmp_path / "f"
    assert load_config(path, env={"VISUS_DATA_DIR": "/y"}).data_dir == Path("/y")


def test_masked_hides_every_secret(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, FULL), env={"OPENAI_API_KEY": "sk-proj-0123456789abcd"})
    masked = cfg.masked()
    text = json.dumps(masked)
    for secret in (
        "sk-ant-file-0123456789wxyz",
        "server-token-abcdef1234",
        "123456:telegram-token-zz99",
        "sk-proj-0123456789abcd",
    ):
        assert secret not in text
    assert masked["providers"]["anthropic"]["api_key"] == "sk-…wxyz"
    assert masked["providers"]["openai"]["api_key"] == "sk-…abcd"
    assert masked["server"]["token"] == "ser…1234"
    assert masked["telegram"]["bot_token"] == "123…zz99"
    assert masked["reach"]["roots"] == ["/work", "/data"]
    assert masked["server"]["port"] == 9001
    # the repr of the live object never shows secrets either
    assert "sk-ant-file" not in repr(cfg)


def test_mask_secret_short_values_are_hidden_whole() -> None:
    assert mask_secret("abc") == "****"
    assert mask_secret("sk-0123456789ab") == "sk-…89ab"


def test_invalid_toml_names_line_and_key(tmp_path: Path) -> None:
    path = _write(tmp_path, '[server]\nhost = "127.0.0.1"\nport = 80 80\n')
    with pytest.raises(ConfigError, match=r"line 3: invalid TOML \(key server\.port\)"):
        load_config(path, env={})


def test_invalid_toml_without_key(tmp_path: Path) -> None:
    path = _write(tmp_path, 'default_model = "x"\n[server\n')
    with pytest.raises(ConfigError, match=r"line 2: invalid TOML"):
        load_config(path, env={})


def test_invalid_value_names_key_and_line(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """\
# comment
default_model = "openai:gpt-4.1"

[retention]
live_turns = 0
chunk = 2

[server]
host = "127.0.0.1"
port = "eighty"
""",
    )
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    message = str(info.value)
    assert f"{path} line 5: invalid value for retention.live_turns" in message
    assert f"{path} line 10: invalid value for server.port" in message
    assert "'eighty'" in message


def test_unknown_key_is_named_with_its_line(tmp_path: Path) -> None:
    path = _write(tmp_path, '[server]\nport = 9000\nhots = "0.0.0.0"\n')
    with pytest.raises(ConfigError, match=r"line 3: server\.hots: unknown key"):
        load_config(path, env={})


def test_error_in_array_of_tables_finds_the_right_entry(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """\
[[models]]
name = "a"
provider = "openai"

[[models]]
name = "b"
provider = "martian"
""",
    )
    with pytest.raises(ConfigError, match=r"line 7: invalid value for models\.1\.provider"):
        load_config(path, env={})


def test_dotted_keys_and_quoted_tables_are_located(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """\
server.host = "127.0.0.1"
[providers."openai"]
api_key = "sk-x-0123456789"
bogus = 1
""",
    )
    with pytest.raises(ConfigError, match=r"line 4: providers\.openai\.bogus: unknown key"):
        load_config(path, env={})


def test_invalid_env_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"VISUS_SERVER__PORT: invalid value for server\.port"):
        load_config(env={"VISUS_SERVER__PORT": "not-a-port"})


def test_default_model_from_visus_env_is_not_replaced() -> None:
    cfg = load_config(env={"OPENAI_API_KEY": "sk-0123456789abcdef", "VISUS_DEFAULT_MODEL": "o3"})
    assert cfg.default_model == "o3"


def test_direct_construction_uses_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VISUS_SERVER__PORT", "8123")
    assert VisusConfig().server.port == 8123
    assert load_config(env=None).server.port == 8123


# --- CLI --------------------------------------------------------------------------------


def test_cli_show_json_masks_secrets(tmp_path: Path) -> None:
    path = _write(tmp_path, FULL)
    result = CliRunner().invoke(app, ["config", "show", "--config", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["providers"]["anthropic"]["api_key"] == "sk-…wxyz"
    assert data["server"]["port"] == 9001
    assert "sk-ant-file" not in result.stdout


def test_cli_show_text(tmp_path: Path) -> None:
    path = _write(tmp_path, FULL)
    result = CliRunner().invoke(app, ["config", "show", "--config", str(path)])
    assert result.exit_code == 0, result.output
    assert "server.port = 9001" in result.stdout
    assert 'providers.anthropic.api_key = "sk-…wxyz"' in result.stdout


def test_cli_show_reports_errors(tmp_path: Path) -> None:
    path = _write(tmp_path, "[server]\nport = -1\n")
    result = CliRunner().invoke(app, ["config", "show", "--config", str(path)])
    assert result.exit_code == 2
    assert "line 2" in result.stderr
    assert "server.port" in result.stderr


def test_cli_path(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    result = CliRunner().invoke(app, ["config", "path", "--config", str(path)])
    assert result.exit_code == 0
    assert result.stdout.strip() == str(path)


def test_home_is_expanded_in_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    path = _write(tmp_path, 'data_dir = "~/visus-data"\n[reach]\nroots = ["~/work"]\n')
    cfg = load_config(path, env={})
    assert cfg.data_dir == tmp_path / "visus-data"
    assert cfg.reach.roots == (tmp_path / "work",)


def test_provider_settings_feed_the_provider_resolver(tmp_path: Path) -> None:
    from visus.providers import resolve

    path = _write(
        tmp_path,
        """\
[providers.openai]
api_key = "sk-file-0123456789"
base_url = "http://127.0.0.1:1/v1"
""",
    )
    cfg = load_config(path, env={})
    settings = cfg.provider_settings(max_retries=0)
    assert settings.key("openai") == "sk-file-0123456789"
    assert settings.url("openai") == "http://127.0.0.1:1/v1"
    assert settings.max_retries == 0
    client, spec = resolve(cfg.default_model, config=settings)
    assert spec.name == "gpt-6.1-sol"
    assert client.wire.startswith("openai")


def test_register_models_makes_them_known(tmp_path: Path) -> None:
    from visus.models.registry import get_model, unregister_model

    cfg = load_config(_write(tmp_path, FULL), env={})
    assert get_model("openai-compatible:my-vlm").vision is False
    cfg.register_models()
    try:
        spec = get_model("openai-compatible:my-vlm")
        assert spec.vision is True
        assert spec.max_edge == 1024
    finally:
        unregister_model("my-vlm")


def test_a_models_entry_overrides_a_catalog_model_field_by_field(tmp_path: Path) -> None:
    from visus.models import AnthropicPatches
    from visus.models.catalog import CATALOG

    text = """
[[models]]
name = "claude-opus-4-7"
max_images = 20
tokens = { kind = "anthropic", native_edge = 2000, native_tokens = 4000 }
"""
    spec = load_config(_write(tmp_path, text), env={}).model_specs()[0]
    catalog = CATALOG["claude-opus-4-7"]
    assert spec.max_images == 20
    assert spec.tokens == AnthropicPatches(native_edge=2000, native_tokens=4000)
    # Everything it does not name stays the catalog's.
    assert (spec.provider, spec.vision, spec.max_edge) == ("anthropic", True, catalog.max_edge)
    assert spec.input_price_per_mtok == catalog.input_price_per_mtok


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ('name = "my-new-vlm"\nvision = true', "give its provider"),
        ('name = "gpt-5.4"\ntokens = { kind = "tiles" }', "tokens.kind must be one of"),
        ('name = "gpt-5.4"\ntokens = { kind = "flat", budget = 3 }', "has no field budget"),
    ],
)
def test_a_bad_models_entry_is_refused_at_load(tmp_path: Path, entry: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        load_config(_write(tmp_path, f"[[models]]\n{entry}\n"), env={})


def test_the_removed_allow_remote_commands_says_what_replaced_it(tmp_path: Path) -> None:
    path = tmp_path / "visus.toml"
    path.write_text("[mcp]\nallow_remote_commands = true\n")
    with pytest.raises(ConfigError, match=r"line 1.*allow_remote_commands was removed.*name it"):
        load_config(path, env={})


def test_server_boundary_settings(tmp_path: Path) -> None:
    path = tmp_path / "visus.toml"
    path.write_text(
        "[server]\nroots = ['~/shared']\nwrite_tools = true\n\n[mcp]\nallow_client_urls = true\n"
    )
    cfg = load_config(path, env={})
    assert cfg.server.roots == (Path.home() / "shared",)
    assert cfg.server.write_tools is True
    assert cfg.mcp.allow_client_urls is True
    assert load_config(env={}).server.write_tools is False


def test_a_misspelt_key_names_the_key_it_was_likely_meant_to_be(tmp_path: Path) -> None:
    """Issue 36: the command line suggests a close option for a typo; a configuration
    key now does too, in the file and in a VISUS_* variable, at every depth."""
    path = _write(
        tmp_path,
        'defualt_model = "reference"\n[retention]\nlive_turn = 2\n'
        '[providers.openai]\napi_kye = "x"\n[[mcp.servers]]\nname = "a"\ncomand = "npx"\n'
        "[retention.extra]\n",
    )
    with pytest.raises(ConfigError) as e:
        load_config(path, env={"VISUS_SERVER__PROT": "9"})
    text = str(e.value)
    for line in (
        f"{path} line 1: defualt_model: unknown key; did you mean default_model?",
        f"{path} line 3: retention.live_turn: unknown key; did you mean live_turns?",
        f"{path} line 5: providers.openai.api_kye: unknown key; did you mean api_key?",
        f"{path} line 8: mcp.servers.0.comand: unknown key; did you mean command?",
        "VISUS_SERVER__PROT: server.prot: unknown key; did you mean port?",
    ):
        assert f"  {line}" in text.splitlines(), (line, text)
    # Nothing close: no guess.
    assert f"  {path} line 9: retention.extra: unknown key" in text.splitlines()
