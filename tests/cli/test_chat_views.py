"""``visus chat``'s ``/view`` over a long chat: prompt image tokens stay flat.

Each ``/view`` attaches an image to the next message; attachments now leave the
context after ``attachments_live_turns`` turns (descriptor: ``view("sha256:...")``),
so twelve turns each with a /view send the reference server the same number of images
(and image tokens) from turn 3 on, not one more per turn (ten turns past the third
show it as well as thirty did, in a third of the time).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from visus.cli import app
from visus.models import get_model, image_tokens
from visus.reference.grid import make_grid
from visus.reference.server import serve_in_background

_JSON_BLOCK = re.compile(r"```json\n(.*?)\n```", re.DOTALL)
TURNS = 12


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


def test_twelve_chat_turns_with_a_view_each_keep_image_tokens_flat(
    reference_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "VISUS_DATA"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VISUS_REFERENCE_URL", reference_url)
    (tmp_path / "visus.toml").write_text("")  # defaults only, whatever the user has
    monkeypatch.setenv("VISUS_CONFIG", str(tmp_path / "visus.toml"))
    monkeypatch.chdir(tmp_path)
    for i in range(4):  # a few distinct pictures, cycled (OCR runs once per picture)
        (tmp_path / f"g{i}.png").write_bytes(make_grid(2, 2, seed=200 + i)[0])
    script = "".join(f"/view g{t % 4}.png\nturn {t}\n" for t in range(TURNS)) + "/quit\n"

    result = CliRunner().invoke(
        app, ["chat", "--data", str(tmp_path / "data"), "--new-session", "c"], input=script
    )

    assert result.exit_code == 0, (result.stdout, result.exception)
    answers = [json.loads(b) for b in _JSON_BLOCK.findall(result.stdout)]
    assert len(answers) == TURNS
    received = [len(a["images"]) for a in answers]  # images in each request the server got
    assert received == [1, 2] + [3] * (TURNS - 2)
    elided = [len(a["descriptors"]) for a in answers]
    assert elided == [0, 0, 0, *list(range(1, TURNS - 2))]
    assert all('call view("sha256:' in d for d in answers[-1]["descriptors"])
    # image tokens of each request, from the images the server decoded in it
    model = get_model("reference")
    tokens = [
        sum(image_tokens(model, i["width"], i["height"]) for i in a["images"]) for a in answers
    ]
    assert tokens[2] > 0
    assert set(tokens[2:]) == {tokens[2]}
