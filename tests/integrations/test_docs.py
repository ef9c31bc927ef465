"""docs/integrations.md's examples run as written against the reference server."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "integrations.md"
_PYTHON = re.compile(r"```python\n(.*?)```", re.DOTALL)
_SECTION = re.compile(r"^## (.+)$", re.MULTILINE)


def examples() -> dict[str, str]:
    """Section title -> its python example."""
    text = DOC.read_text(encoding="utf-8")
    heads = list(_SECTION.finditer(text))
    out: dict[str, str] = {}
    for i, head in enumerate(heads):
        body = text[head.end() : heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        found = _PYTHON.findall(body)
        if found:
            out[head.group(1)] = found[0]
    return out


@pytest.mark.parametrize("section", sorted(examples()))
def test_example_runs_offline_and_sees_the_picture(
    section: str,
    reference_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = examples()[section]
    assert len(code.strip().splitlines()) <= 17, "examples stay short"
    pytest.importorskip(
        {"pydantic-ai": "pydantic_ai", "OpenAI Agents SDK": "agents", "LangChain": "langchain"}.get(
            section, "visus"
        )
    )
    shutil.copy(ROOT / "docs" / "examples" / "sign.png", tmp_path / "grid.png")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VISUS_DATA", str(tmp_path / "data"))
    exec(compile(code.replace("http://127.0.0.1:8760", reference_url), str(DOC), "exec"), {})
    out = capsys.readouterr().out
    assert "LANTERN" in out  # the word on the sign: the model got the pixels
    assert '[image elided: call view("sha256:' in out  # then the descriptor
