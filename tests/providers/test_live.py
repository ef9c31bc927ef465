"""Live: a short text + image request to each real provider, only when its key is set.

Run with e.g. ``OPENAI_API_KEY=... .venv/bin/pytest -m live tests/providers/test_live.py``.
``VISUS_LIVE_<PROVIDER>_MODEL`` overrides the model tried (e.g. VISUS_LIVE_OLLAMA_MODEL).
"""

from __future__ import annotations

import io
import os

import pytest

from visus.providers import ProviderSettings, aclose, resolve
from visus.record.blobs import MemoryBlobStore
from visus.record.messages import (
    AttachmentOrigin,
    ImagePart,
    ModelRequest,
    TextPart,
    UserMessage,
)
from visus.reference.grid import make_grid

CASES = [
    ("openai", ("OPENAI_API_KEY",), "openai:gpt-4.1-mini"),
    ("anthropic", ("ANTHROPIC_API_KEY",), "anthropic:claude-haiku-4-5"),
    ("gemini", ("GEMINI_API_KEY", "GOOGLE_API_KEY"), "gemini:gemini-2.5-flash"),
    ("openrouter", ("OPENROUTER_API_KEY",), "openai-compatible:google/gemini-2.5-flash"),
    ("ollama", ("OLLAMA_HOST",), "ollama:llama3.2-vision"),
]


@pytest.mark.live
@pytest.mark.parametrize(("name", "env", "ref"), CASES, ids=[c[0] for c in CASES])
async def test_live_text_and_image(name: str, env: tuple[str, ...], ref: str) -> None:
    if not any(os.environ.get(v) for v in env):
        pytest.skip(f"set {' or '.join(env)} to run the live {name} test")
    ref = os.environ.get(f"VISUS_LIVE_{name.upper()}_MODEL", ref)
    png, expected = make_grid(2, 2, seed=99)
    from PIL import Image

    width, height = Image.open(io.BytesIO(png)).size
    store = MemoryBlobStore()
    image = ImagePart(
        store.put(png, "image/png"), "image/png", len(png), width, height, AttachmentOrigin("g.png")
    )
    request = ModelRequest(
        messages=(
            UserMessage(
                (
                    TextPart("List every word written in this image, one per line, nothing else."),
                    image,
                )
            ),
        ),
        max_tokens=200,
    )
    client, spec = resolve(ref, config=ProviderSettings(max_retries=2))
    try:
        deltas: list[str] = []
        reply = await client.complete(request, model=spec, blobs=store, on_delta=deltas.append)
    finally:
        await aclose(client)
    said = reply.text.lower()
    found = [word for word, *_ in expected if word in said]
    assert len(found) >= 3, reply.text
    assert "".join(deltas) == reply.text
    assert reply.usage is not None
    assert reply.usage.input_tokens > 0
