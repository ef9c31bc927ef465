"""The reference model describes any image, text or not: dominant colours per region,
in a short answer (a chat bubble, a Telegram caption)."""

from __future__ import annotations

import io
import json

from PIL import Image, ImageDraw

from visus.reference.grid import make_grid
from visus.reference.model import Conversation, InImage, InMessage, respond


def _png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def _answer(data: bytes, w: int, h: int) -> tuple[str, dict[str, object]]:
    conv = Conversation(
        messages=(
            InMessage(role="user", texts=("what is this?",), images=(InImage(data, w, h, "m1"),)),
        )
    )
    text = respond(conv, json_block=True).text
    prose, block = text.split("```json\n")
    return prose, json.loads(block.split("\n```")[0])["images"][0]


def test_a_plain_image_without_text_is_described_by_its_colour() -> None:
    prose, image = _answer(_png(Image.new("RGB", (300, 200), (30, 60, 200))), 300, 200)
    assert "has no text I can read; colours: blue everywhere." in prose
    assert image["words"] == []


def test_colours_are_placed_by_region() -> None:
    im = Image.new("RGB", (600, 300), (220, 30, 30))
    ImageDraw.Draw(im).rectangle((400, 0, 600, 300), fill=(30, 160, 60))
    prose, _ = _answer(_png(im), 600, 300)
    assert "colours: mostly red; green at top-right, right, bottom-right." in prose


def test_a_busy_image_keeps_the_prose_short_and_the_json_whole() -> None:
    png, _ = make_grid(4, 4, seed=5)
    w, h = Image.open(io.BytesIO(png)).size
    prose, image = _answer(png, w, h)
    words = image["words"]
    assert isinstance(words, list)
    assert len(words) >= 14  # the JSON keeps (nearly) every word the OCR read
    # Words in the same region and ink are one phrase: at most eight words in all.
    quoted = [q for i, q in enumerate(prose.split('"')) if i % 2 == 1]
    assert sum(len(q.split()) for q in quoted) == 8
    assert f"and {len(words) - 8} more words" in prose
    assert len(prose) < 1024  # a Telegram caption's limit
