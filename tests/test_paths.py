from __future__ import annotations

from pathlib import Path

import platformdirs
import pytest

from visus.paths import blobs_dir, data_dir, sessions_dir


def test_explicit_wins_over_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VISUS_DATA", str(tmp_path / "env"))
    assert data_dir(tmp_path / "explicit") == tmp_path / "explicit"
    assert data_dir(str(tmp_path / "s")) == tmp_path / "s"


def test_env_wins_over_platform_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VISUS_DATA", str(tmp_path / "env"))
    assert data_dir() == tmp_path / "env"
    assert data_dir("") == tmp_path / "env"  # an empty option falls through


def test_platform_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VISUS_DATA", raising=False)
    expected = Path(platformdirs.user_data_dir("visus", appauthor=False))
    assert data_dir() == expected
    assert expected.name == "visus"
    monkeypatch.setenv("VISUS_DATA", "")
    assert data_dir() == expected


def test_tilde_expanded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert data_dir("~/d") == tmp_path / "d"


def test_layout_does_not_create(tmp_path: Path) -> None:
    assert sessions_dir(tmp_path) == tmp_path / "sessions"
    assert blobs_dir(str(tmp_path)) == tmp_path / "blobs"
    assert not (tmp_path / "sessions").exists()
