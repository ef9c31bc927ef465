"""``visus analyze`` and ``visus analyze-video`` through typer's runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.analyze.conftest import StaticServer, pdf_bytes, video_bytes, word_png
from visus.cli import app


@pytest.fixture
def config_file(tmp_path: Path, reference_url: str) -> Path:
    path = tmp_path / "visus.toml"
    path.write_text(
        f'data_dir = "{tmp_path / "data"}"\n[providers.reference]\nbase_url = "{reference_url}"\n'
    )
    return path


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def words(text: str) -> list[list[str]]:
    block = text.split("```json\n", 1)[1].split("\n```", 1)[0]
    return [[w["text"] for w in im["words"]] for im in json.loads(block)["images"]]


def test_json_envelope(tmp_path: Path, config_file: Path) -> None:
    (tmp_path / "sign.png").write_bytes(word_png("BEACON"))
    code, out, _ = run(
        "analyze",
        str(tmp_path / "sign.png"),
        "-p",
        "Read",
        "--json",
        "--config",
        str(config_file),
    )
    assert code == 0
    envelope = json.loads(out)
    assert envelope["model"] == "reference"
    assert words(envelope["text"]) == [["BEACON"]]


def test_schema_page_range_cache_and_session(tmp_path: Path, config_file: Path) -> None:
    (tmp_path / "doc.pdf").write_bytes(pdf_bytes(["ALPINE", "BEACON"]))
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "required": ["images"]}))
    argv = [
        "analyze",
        str(tmp_path / "doc.pdf"),
        "-p",
        "Read",
        "--schema",
        str(schema),
        "--page-range",
        "2-2",
        "--config",
        str(config_file),
        "--cache",
        "--session",
        "c1",
    ]
    code, out, err = run(*argv)
    assert code == 0, err
    parsed = json.loads(out)  # without --json: the parsed value
    assert [w["text"] for w in parsed["images"][0]["words"]] == ["BEACON"]
    assert "reference" in err
    code, _, err = run(*argv)
    assert code == 0
    assert "cached" in err
    assert list((tmp_path / "data" / "analyze-cache").rglob("*.json"))
    code, out, _ = run("usage", "c1", "--data", str(tmp_path / "data"), "--json")
    assert code == 0
    assert len(json.loads(out)["turns"]) == 2


def test_refused_inputs_exit_3_with_the_code(tmp_path: Path, config_file: Path) -> None:
    code, _, err = run(
        "analyze", str(tmp_path / "nope.png"), "-p", "?", "--config", str(config_file)
    )
    assert code == 3
    assert err.startswith("visus: refused (file_not_found): ")
    code, _, err = run("analyze", "https://10.0.0.1/x.png", "-p", "?", "--config", str(config_file))
    assert (code, err.split(":")[1]) == (3, " refused (url_blocked)")


def test_usage_errors_exit_2(tmp_path: Path, config_file: Path) -> None:
    (tmp_path / "sign.png").write_bytes(word_png("BEACON"))
    png = str(tmp_path / "sign.png")
    assert (
        run("analyze", png, "-p", "?", "--page-range", "x-2", "--config", str(config_file))[0] == 2
    )
    assert run("analyze", png, "-p", "?", "--schema", str(tmp_path / "missing.json"))[0] == 2
    assert run("analyze", png)[0] == 2  # --prompt is required
    assert run("analyze", png, "-p", "?", "--config", str(tmp_path / "absent.toml"))[0] == 2


def test_url_needs_the_loopback_flag(tmp_path: Path, config_file: Path) -> None:
    with StaticServer({"/s.png": (word_png("BEACON"), "image/png")}) as server:
        url = f"{server.url}/s.png"
        code, _, err = run("analyze", url, "-p", "?", "--config", str(config_file))
        assert (code, err.split(":")[1]) == (3, " refused (url_blocked)")
        code, out, _ = run(
            "analyze",
            url,
            "-p",
            "?",
            "--json",
            "--allow-loopback-http",
            "--config",
            str(config_file),
        )
    assert code == 0
    assert words(json.loads(out)["text"]) == [["BEACON"]]


def test_analyze_video(tmp_path: Path, config_file: Path) -> None:
    (tmp_path / "v.mp4").write_bytes(video_bytes(["ALPINE", "BEACON", "CASTLE"]))
    code, out, err = run(
        "analyze-video",
        str(tmp_path / "v.mp4"),
        "--frames",
        "2",
        "--json",
        "--config",
        str(config_file),
    )
    assert code == 0, err
    assert words(json.loads(out)["text"]) == [["ALPINE"], ["BEACON"]]  # frames at 0 and 1.5 s
