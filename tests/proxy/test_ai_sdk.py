"""The real Vercel AI SDK (``ai`` + ``@ai-sdk/openai-compatible`` from npm, run by node).

``@ai-sdk/openai-compatible`` JSON-stringifies a tool's image into the tool message, so
the model gets base64 as text. Against the reference server directly the model cannot
name the grid's words; through the proxy (which turns the text back into an image and
hoists it into a user message) it names every one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .conftest import assert_placed, grid, seen

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
SCRIPT = NODE_DIR / "ai_sdk_tool_image.mjs"

pytestmark = pytest.mark.slow


def _run(base_url: str, png: Path) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "@ai-sdk" / "openai-compatible").is_dir():
        pytest.skip("node or the npm test peers are missing (bash scripts/setup-node.sh)")
    done = subprocess.run(
        [node, str(SCRIPT), base_url, str(png)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def test_ai_sdk_tool_image_is_seen_only_through_the_proxy(
    reference_url: str, proxy_url: str, tmp_path: Path
) -> None:
    g = grid(2, 2, 21)
    png = tmp_path / "shot.png"
    png.write_bytes(g.png)
    words = [word for word, *_ in g.expected]

    direct = _run(f"{reference_url}/v1", png)
    assert direct["steps"] == 2  # the tool ran and its result went back to the model
    assert seen(direct["text"])["images"] == []
    assert not any(word in direct["text"] for word in words)

    through = _run(f"{proxy_url}/v1", png)
    assert through["steps"] == 2
    (image,) = seen(through["text"])["images"]
    assert_placed(image, g)
