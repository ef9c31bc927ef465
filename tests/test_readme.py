"""README's library snippets run as written, from the checkout, and say what they show."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.timing import within
from visus.reference.server import serve_in_background

ROOT = Path(__file__).resolve().parents[1]
_PYTHON = re.compile(r"```python\n(.*?)```", re.DOTALL)


def snippets() -> list[str]:
    return _PYTHON.findall((ROOT / "README.md").read_text(encoding="utf-8"))


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("VISUS_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    with serve_in_background() as url:
        monkeypatch.setenv("VISUS_REFERENCE_URL", url)
        yield ROOT


def test_readme_has_the_two_library_snippets() -> None:
    assert len(snippets()) == 2


def test_view_snippet_sees_the_shipped_image(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exec(compile(snippets()[0], "README.md", "exec"), {})
    kind, tokens, message = capsys.readouterr().out.split()
    assert (kind, message) == ("perception", "None")
    assert int(tokens) > 0


def test_agent_snippet_reads_the_word_through_the_view_tool(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exec(compile(snippets()[1], "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "LANTERN" in out  # the reference model read the pixels the view tool sent
    assert "input_tokens" in out


def test_the_screenshot_is_of_the_page_and_its_script_is_in_the_repo() -> None:
    from PIL import Image

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](docs/web-chat.png)" in readme
    with Image.open(ROOT / "docs" / "web-chat.png") as shot:
        assert shot.format == "PNG"
        assert shot.size[0] >= 800
    script = (ROOT / "scripts" / "screenshot_web.py").read_text(encoding="utf-8")
    assert "create_main_app" in script  # the real page, not a mock-up
    assert "docs/examples/sign.png" in readme


def test_command_1_says_how_to_take_another_port() -> None:
    """8750 taken (another server, a second checkout): the refusal says `--port`, and the
    README shows it on command 1 itself, whose options go on to `visus serve`."""
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "port 8750 taken? `bash scripts/serve.sh --port 8751`" in readme.replace("# ", "")
    serve_sh = (ROOT / "scripts" / "serve.sh").read_text(encoding="utf-8")
    assert 'exec .venv/bin/visus serve "$@"' in serve_sh


def test_the_tether_shell_example_gets_the_answer(tmp_path: Path) -> None:
    """README's curl example, run by bash as written against `visus serve`'s app on
    loopback (only the port and the token differ): the posted image is answered."""
    import json
    import os
    import subprocess
    import threading
    import time

    import uvicorn

    from visus.app import create_main_app
    from visus.providers import ProviderSettings

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```sh\n(.*?)```", readme, re.DOTALL) if "/tether" in b)
    with serve_in_background() as reference:
        app = create_main_app(
            data=tmp_path / "data",
            model="reference",
            settings=ProviderSettings(reference_url=reference, env={}),
            token="readme-token-0123456789",
        )
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", ws="none")
        server = uvicorn.Server(config)
        config.timeout_graceful_shutdown = 1
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + within(20)
        while not server.started:
            assert thread.is_alive()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        script = block.replace("127.0.0.1:8750", f"127.0.0.1:{port}")
        env = {**os.environ, "TOKEN": "readme-token-0123456789"}
        shell = subprocess.Popen(
            ["bash", "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
        )
        try:
            assert shell.stdout is not None
            posted = json.loads(shell.stdout.readline())
            assert posted["seq"] == 1
            done = None
            for line in shell.stdout:  # the stream stays open: read up to the answer
                if line.startswith("data:") and '"assistant.done"' in line:
                    done = json.loads(line[len("data:") :])
                    break
        finally:
            shell.kill()
            shell.wait()
            server.should_exit = True
            thread.join(timeout=10)
    assert done is not None
    assert "LANTERN" in done["payload"]["text"]
