"""Wrong turns a newcomer took copying the README and docs (issue 27, from outside).

Help says what the code does, at a plain 80-column terminal: nothing cut to "…", no
``<token>`` swallowed as HTML, the exit-code table whole; docs name only commands and
flags that exist.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from visus.cli import app
from visus.cli._help import EXIT_CODES

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _commands() -> list[tuple[list[str], Any]]:
    found: list[tuple[list[str], Any]] = []

    def walk(command: Any, path: list[str]) -> None:
        found.append((path, command))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


def _flat(text: str) -> str:
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def _help(path: list[str], columns: int = 80) -> str:
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, (path, result.stdout)
    return result.stdout


@pytest.mark.parametrize("columns", [80, 100])
def test_no_help_text_is_cut_at_a_plain_terminal(columns: int) -> None:
    for path, _ in _commands():
        shown = _help(path, columns)
        assert "…" not in shown, (path, [ln for ln in shown.splitlines() if "…" in ln])


@pytest.mark.parametrize("command", ["run", "chat"])
def test_the_model_rule_reads_whole_at_80_columns(command: str) -> None:
    """The options' help column is wide enough for a model id on one line."""
    shown = _help([command], 80)
    for model in ("(anthropic:claude-sonnet-5-5),", "(openai-compatible:openai/gpt-6.1-sol);"):
        assert model in shown, shown


def test_angle_bracket_words_in_help_are_shown_not_taken_for_html() -> None:
    checked = 0
    for path, command in _commands():
        texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
        words = {w for t in texts for w in re.findall(r"<[a-z][a-z_ -]*>", t)}
        flat = _flat(_help(path, 200))
        for word in words:
            checked += 1
            assert word in flat, (path, word)
    assert checked >= 2  # serve's <token> and <data> at least


def test_the_exit_code_table_has_every_code_the_commands_use() -> None:
    assert [code for code, _ in EXIT_CODES] == [0, 1, 2, 3, 4, 130]
    flat = _flat(_help([], 100))
    assert "4 the step budget ran out" in flat
    run = _flat(_help(["run"], 200))
    assert "says so and exits 4" in run
    assert "exits 3" not in run


# --- the docs name only commands and flags that exist ----------------------------------------

_FENCE = re.compile(r"```([^\n]*)\n(.*?)```", re.DOTALL)
_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _command_lines(text: str) -> list[str]:
    """Shell lines of fenced blocks, and inline code spans, that run ``visus``."""
    shell = [body for lang, body in _FENCE.findall(text) if lang in ("", "sh", "bash", "console")]
    lines = [ln for body in shell for ln in body.replace("\\\n", " ").splitlines()]
    spans = re.findall(r"`(visus [^`\n]+)`", _FENCE.sub("", text))
    found = []
    for line in [*lines, *spans]:
        line = line.split(" #")[0].strip()
        start = re.search(r"(?:^|[\s(])visus\s+[a-z-]", line)
        if start:
            found.append(line[start.start() :].strip(" (").split("|")[0].split("&")[0])
    return found


def _unknown(words: list[str], root: Any) -> list[str]:
    command, depth = root, 1
    while depth < len(words) and words[depth] in getattr(command, "commands", {}):
        command = command.commands[words[depth]]
        depth += 1
    rest = words[depth:]
    if hasattr(command, "commands") and rest and not rest[0].startswith("-"):
        return [f"no command {rest[0]!r}"]
    known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
    flags = [w.split("=")[0] for w in rest if re.match(r"^--?[A-Za-z]", w)]
    return [f"no option {f}" for f in flags if f not in known]


def test_every_visus_command_the_docs_show_exists_with_its_flags() -> None:
    root = typer.main.get_command(app)
    seen, wrong = 0, []
    for doc in _DOCS:
        for line in _command_lines(doc.read_text(encoding="utf-8")):
            try:
                words = shlex.split(line)
            except ValueError:
                words = line.split()
            # Global options come before the command.
            while len(words) > 2 and words[1] in ("--config",):
                del words[1:3]
            seen += 1
            wrong += [f"{doc.name}: {line}: {why}" for why in _unknown(words, root)]
    assert seen > 40
    assert not wrong, "\n".join(wrong)


# --- a wrong command line is one line too -----------------------------------------------------


def _main(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    from visus.cli import main

    monkeypatch.setattr(sys, "argv", ["visus", *args])
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as leaving:
        main()
    code = leaving.value.code
    return code if isinstance(code, int) else (0 if code is None else 1)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["run", "--bogus", "hi"], "visus: run: no such option: --bogus (visus run --help)"),
        (
            ["sesion", "list"],
            "visus: no such command 'sesion'. Did you mean 'session'? (visus --help)",
        ),
        (["view"], "visus: view: missing argument 'path' (visus view --help)"),
        (["run", "--max-steps", "0", "hi"], "visus: run: invalid value for '--max-steps': "),
        (
            ["session", "show", "a", "b"],
            "visus: session show: got unexpected extra argument(s) (b)",
        ),
    ],
)
def test_a_wrong_command_line_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    said: str,
) -> None:
    assert _main(monkeypatch, *args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(said), err
    assert err.count("\n") == 1, err


@pytest.mark.parametrize("args", [[], ["session"], ["config"], ["run", "--help"], ["--version"]])
def test_asking_for_help_or_a_group_alone_prints_it_and_exits_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    assert _main(monkeypatch, *args) == 0
    out, err = capsys.readouterr()
    assert ("Usage: visus" in out) or out.startswith("visus "), out
    assert err == ""


# --- removing a session, then gc -------------------------------------------------------------


def test_gc_right_after_session_rm_says_why_the_images_stayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from visus.record.messages import ImagePart, PerceptionOrigin, UserMessage
    from visus.store import FileStore

    data = tmp_path / "data"
    monkeypatch.setenv("VISUS_DATA", str(data))
    monkeypatch.setenv("VISUS_CONFIG", "/dev/null")
    store = FileStore(data)
    digest = store.blobs().put(b"\x89PNG\r\n\x1a\n" + b"x" * 32, "image/png")
    store.sessions().create("demo")
    image = ImagePart(digest, "image/png", 4, 2, 2, PerceptionOrigin("chart.png"))
    store.sessions().append("demo", UserMessage(parts=(image,), turn=1))

    removed = runner.invoke(app, ["session", "rm", "demo"])
    assert removed.exit_code == 0, removed.stderr
    assert "`visus gc --grace 0`" in removed.stdout
    first = runner.invoke(app, ["gc"])
    assert first.exit_code == 0, first.stderr
    assert "removed 0 unreferenced blobs" in first.stdout
    assert "kept 1 unreferenced blob written in the last 3600 s" in _flat(first.stdout)
    assert "--grace 0 removes them" in _flat(first.stdout)
    assert store.blobs().has(digest)
    now = runner.invoke(app, ["gc", "--grace", "0"])
    assert "removed 1 unreferenced blob from" in now.stdout
    assert "kept" not in now.stdout
    assert not store.blobs().has(digest)


# --- config show -----------------------------------------------------------------------------


def test_config_show_masks_the_mcp_servers_headers_and_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tomllib

    config = tmp_path / "visus.toml"
    config.write_text(
        '[[mcp.servers]]\nname = "gh"\ncommand = "gh-mcp"\n'
        'env = { GITHUB_TOKEN = "ghp_LEAK0123456789abcdef" }\n'
        '[[mcp.servers]]\nname = "docs"\nurl = "https://mcp.example.com/mcp"\n'
        'headers = { Authorization = "Bearer sk-LEAK-0123456789", X-Key = "${DOCS_KEY}" }\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("VISUS_CONFIG", str(config))
    for args in (["config", "show"], ["config", "show", "--json"]):
        shown = runner.invoke(app, args)
        assert shown.exit_code == 0, shown.stderr
        assert "LEAK" not in shown.stdout
        assert "${DOCS_KEY}" in shown.stdout  # a reference is not the secret: it stays
    servers = tomllib.loads(runner.invoke(app, ["config", "show"]).stdout)["mcp"]["servers"]
    assert servers[0]["env"] == {"GITHUB_TOKEN": "ghp…cdef"}
    assert servers[1]["headers"] == {"Authorization": "Bea…6789", "X-Key": "${DOCS_KEY}"}


def test_a_missing_key_says_where_a_key_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "VISUS_DEFAULT_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VISUS_CONFIG", "/dev/null")
    monkeypatch.setenv("VISUS_DATA", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", "--model", "openai:gpt-4.1", "hi"])
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr == (
        "visus: openai:gpt-4.1 needs an API key: set OPENAI_API_KEY, or api_key under "
        "[providers.openai] in visus.toml (--model reference runs the offline model)\n"
    )


def test_every_model_visus_models_lists_is_one_model_takes(tmp_path: Path) -> None:
    import json

    from visus.cli._common import check_model_ref
    from visus.models import get_model

    listed = json.loads(runner.invoke(app, ["models", "--json"]).stdout)
    refs = [row["model"] for row in listed]
    assert "reference" in refs  # not reference:reference
    assert "reference-pdf" in refs
    for ref in refs:
        check_model_ref(ref)  # exits 2 on a spelling --model refuses
        assert get_model(ref).ref == ref

    log = tmp_path / "sessions"
    log.mkdir()
    from visus.record.sessions import SessionStore

    SessionStore(log).create("s", meta={"model": "reference"})
    shown = runner.invoke(app, ["session", "show", "s", "--data", str(tmp_path)])
    assert shown.exit_code == 0, shown.stderr
    assert "model reference;" in shown.stdout


# --- the README's --save-images example, offline ---------------------------------------------


def test_the_readmes_save_images_example_saves_the_image_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from visus.reference.server import serve_in_background

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    line = next(ln for ln in readme.splitlines() if ln.startswith("visus run --save-images"))
    args = shlex.split(line.split("  #")[0])[1:]
    (tmp_path / "docs" / "examples").mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "examples" / "sign.png", tmp_path / "docs" / "examples")
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VISUS_CONFIG", "/dev/null")
    monkeypatch.setenv("VISUS_DATA", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    with serve_in_background() as url:
        monkeypatch.setenv("VISUS_REFERENCE_URL", url)
        result = runner.invoke(app, args)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    saved = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert saved == ["1-sign.png"], result.stderr
    assert (tmp_path / "out" / "1-sign.png").read_bytes() == (
        tmp_path / "docs" / "examples" / "sign.png"
    ).read_bytes()


def test_no_doc_or_hint_installs_visus_from_pypi() -> None:
    """visus is not on PyPI: `pip install 'visus[postgres]'` fails; the checkout's
    `pip install -e '.[postgres]'` works."""
    said = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in [*_DOCS, *sorted((ROOT / "src").rglob("*.py")), *(ROOT / "scripts").iterdir()]
        if path.is_file()
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
        if re.search(r"pip install\s+['\"]?visus\b", line)
    ]
    assert not said, "\n".join(said)


# --- visus proxy's banner says what to point clients at --------------------------------------


@pytest.mark.parametrize("token", [None, "s3cret-proxy-token"])
def test_the_proxy_banner_names_the_base_urls_and_its_mcp(
    token: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    from starlette.testclient import TestClient

    from visus.cli.proxy import _banner
    from visus.proxy.app import ProxyConfig, create_proxy_app

    config = ProxyConfig(upstream="http://127.0.0.1:9", token=token)
    _banner(config, "127.0.0.1", 8790)
    shown = capsys.readouterr().out
    assert "ANTHROPIC_BASE_URL=http://127.0.0.1:8790 " in shown
    assert "OPENAI_BASE_URL=http://127.0.0.1:8790/v1" in shown
    assert "http://127.0.0.1:8790/mcp  (restore_image" in shown
    assert ("x-visus-token" in shown) == (token is not None)
    assert token is None or token not in shown
    headers = {"x-visus-token": token} if token else {}
    app = create_proxy_app(config)
    with TestClient(app, base_url="http://127.0.0.1:8790") as client:  # the /mcp it names
        listed = client.post(
            "/mcp",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
            headers={**headers, "accept": "application/json, text/event-stream"},
        )
        assert listed.status_code == 200, listed.text


def test_telegram_without_a_token_says_only_that(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    monkeypatch.setenv("VISUS_CONFIG", "/dev/null")
    result = runner.invoke(app, ["telegram", "--data", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.startswith("visus: telegram.bot_token: no bot token; set ")
    assert result.stderr.count("\n") == 1, result.stderr
