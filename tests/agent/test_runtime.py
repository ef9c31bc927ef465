"""build_agent takes what it is not given from visus.toml."""

from __future__ import annotations

from pathlib import Path

from visus.agent import build_agent
from visus.config import load_config
from visus.providers import ProviderSettings


def test_defaults_come_from_the_config_file(tmp_path: Path) -> None:
    cfg_file = tmp_path / "visus.toml"
    roots = tmp_path / "files"
    roots.mkdir()
    cfg_file.write_text(
        f"""
default_model = "reference:anthropic"
data_dir = "{tmp_path / "data"}"

[retention]
live_turns = 3
chunk = 2

[reach]
roots = ["{roots}"]
render = false
"""
    )
    cfg = load_config(cfg_file, env={})
    agent = build_agent(
        config=cfg, settings=ProviderSettings(reference_url="http://127.0.0.1:9", env={})
    )
    assert agent.model_ref == "reference:anthropic"
    assert agent.client.wire == "anthropic"
    assert agent.policy.live_turns == 3
    assert agent.policy.chunk == 2
    assert agent.reach.roots == (roots.resolve(),)
    assert agent.reach.render is False
    assert agent.sessions.root == tmp_path / "data" / "sessions"


def test_explicit_arguments_win_over_the_config(tmp_path: Path) -> None:
    (tmp_path / "empty.toml").write_text("")
    cfg = load_config(tmp_path / "empty.toml", env={})
    agent = build_agent(
        "reference",
        data=tmp_path / "d",
        roots=[tmp_path],
        render=True,
        config=cfg,
        settings=ProviderSettings(reference_url="http://127.0.0.1:9", env={}),
    )
    assert agent.sessions.root == tmp_path / "d" / "sessions"
    assert agent.reach.roots == (tmp_path.resolve(),)
