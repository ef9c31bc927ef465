"""tether -> Telegram: streamed edits, images first then text, captions, splitting,
fitting to Telegram's photo bounds, and retries, as exact Bot API calls."""

from __future__ import annotations

import io
import json

from fastapi import FastAPI
from PIL import Image

from tests.telegram.conftest import CHAT, Script, bridge, jpeg, png, until
from tests.telegram.fake_bot import FakeBotAPI, parse_entities, text_update
from visus import limits
from visus.telegram.egress import prepare_image
from visus.telegram.split import split_text, tg_len
from visus.tether.runner import ImageIn


def _size(data: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(data)) as im:
        return im.size


async def _ask(fake: FakeBotAPI, app: FastAPI, script: Script, **kw: object) -> list[str]:
    async with bridge(fake, app, **kw) as b:  # type: ignore[arg-type]
        fake.push(text_update(CHAT, "go"))
        await until(lambda: b.gateway.finished(CHAT), what="the reply")
    return fake.methods()


async def test_deltas_stream_into_one_message_edited_in_place_with_throttling(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    words = [f"w{i} " for i in range(24)]
    script.deltas, script.pause = words, 0.05  # ~1.2 s of streaming
    methods = await _ask(fake, scripted_app, script, edit_interval=0.3)
    sends, edits = fake.sent("sendMessage"), fake.sent("editMessageText")
    assert len(sends) == 1  # one message, the rest are edits of it
    # The stream's start (tether joins text within TETHER_DELTA_WINDOW_SECONDS).
    first = sends[0].params["text"].split()
    assert first == [w.strip() for w in words[: len(first)]]
    assert 1 <= len(first) <= 3
    assert 2 <= len(edits) <= 8  # throttled: far fewer edits than the 24 deltas
    assert {e.params["message_id"] for e in edits} == {"1001"}
    gaps = [b.at - a.at for a, b in zip([sends[0], *edits], edits, strict=False)]
    assert all(g >= 0.25 for g in gaps[:-1]), gaps  # the final edit (done) is not throttled
    texts = [e.params["text"] for e in edits]
    assert len(set(texts)) == len(texts)  # never an edit that changes nothing
    assert texts[-1] == "".join(words).strip()
    assert methods.index("sendMessage") < methods.index("editMessageText")


async def test_one_image_carries_a_short_text_as_caption(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    image = png((300, 200))
    script.deltas, script.text, script.images = (
        (),
        "Here is your chart.",
        (ImageIn("image/png", image),),
    )
    methods = await _ask(fake, scripted_app, script)
    photo = fake.sent("sendPhoto")
    assert len(photo) == 1
    assert photo[0].params["caption"] == "Here is your chart."
    ((name, data),) = photo[0].files.values()
    assert data == image  # the agent's bytes, unchanged
    assert name.endswith(".png")
    assert not fake.sent("sendMessage")  # the text rode as the caption
    assert [m for m in methods if m != "sendChatAction"] == ["sendPhoto"]


async def test_streamed_preview_gives_way_to_images_then_text(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    long_text = " ".join(f"word{i}" for i in range(1400))  # ~11.5 K: three messages
    images = (
        ImageIn("image/png", png((64, 64), (255, 0, 0))),
        ImageIn("image/jpeg", jpeg((80, 60))),
    )
    script.deltas, script.text, script.images = ("Thinking ", "about it"), long_text, images
    methods = [m for m in await _ask(fake, scripted_app, script) if m != "sendChatAction"]
    # The preview is sent, never deleted: it becomes a pointer to the images, which
    # precede every text message.
    assert methods[0] == "sendMessage"
    assert "deleteMessage" not in methods
    group = methods.index("sendMediaGroup")
    pointer = fake.sent("editMessageText")[-1]
    assert pointer.params["message_id"] == "1001"
    assert pointer.params["text"] == "⬇ 2 images, then the answer"
    assert methods.index("editMessageText") < group
    after = methods[group + 1 :]
    assert after
    assert set(after) == {"sendMessage"}
    call = fake.sent("sendMediaGroup")[0]
    media = call.json("media")
    assert [m["type"] for m in media] == ["photo", "photo"]
    assert all("caption" not in m for m in media)  # too long for a caption
    refs = [m["media"].removeprefix("attach://") for m in media]
    assert [call.files[r][1] for r in refs] == [im.data for im in images]
    chunks = [c.params["text"] for c in fake.sent("sendMessage")[1:]]
    assert chunks == split_text(long_text)
    assert len(chunks) == 3
    assert all(tg_len(c) <= limits.TELEGRAM_MAX_TEXT_CHARS for c in chunks)
    assert " ".join(chunks).split() == long_text.split()


async def test_long_text_keeps_code_fences_whole_across_messages(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    code = "\n".join(f"print('line {i}')" for i in range(400))  # ~7.6 K of code
    text = f"Run this:\n\n```python\n{code}\n```\n\nDone."
    script.deltas, script.text = (), text
    await _ask(fake, scripted_app, script)
    sent = fake.sent("sendMessage")
    assert len(sent) >= 2
    for call in sent:
        # Sent as Telegram HTML: every message is well formed on its own and its
        # visible text fits the limit.
        assert call.params["parse_mode"] == "HTML"
        visible, error = parse_entities(call.params["text"])
        assert error == ""
        assert tg_len(visible) <= limits.TELEGRAM_MAX_TEXT_CHARS
    raw = [c.params["text"] for c in sent]
    assert raw[0].startswith('Run this:\n\n<pre><code class="language-python">')
    assert raw[1].startswith('<pre><code class="language-python">print(')
    assert raw[-1].endswith("</code></pre>\n\nDone.")
    shown = "\n".join(parse_entities(r)[0] for r in raw)
    assert [ln for ln in shown.splitlines() if ln.startswith("print(")] == code.splitlines()


async def test_four_images_as_one_album_with_the_caption_and_a_note_for_a_fifth(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    images = tuple(ImageIn("image/png", png((40 + i, 40), (i * 40, 0, 0))) for i in range(5))
    script.deltas, script.text, script.images = (), "five", images
    await _ask(fake, scripted_app, script)
    (call,) = fake.sent("sendMediaGroup")
    media = call.json("media")
    assert len(media) == limits.TETHER_MAX_IMAGES_PER_MESSAGE  # tether's egress bound
    assert media[0]["caption"] == "five"
    assert all("caption" not in m for m in media[1:])
    assert [call.files[m["media"][9:]][1] for m in media] == [im.data for im in images[:4]]
    # The image tether dropped is not silently lost: the chat is told.
    (note,) = fake.sent("sendMessage")
    assert "4" in note.params["text"]


async def test_429_is_retried_after_retry_after(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    image = png((120, 90))
    script.deltas, script.text, script.images = (), "ok", (ImageIn("image/png", image),)
    fake.fail("sendPhoto", 429, retry_after=1)
    await _ask(fake, scripted_app, script)
    first, second = fake.sent("sendPhoto")
    assert second.at - first.at >= 0.95  # waited as the server asked
    assert next(iter(second.files.values()))[1] == image
    assert second.params["caption"] == "ok"


async def test_network_errors_are_retried_and_a_lost_caption_goes_as_text(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    image = png((120, 90))
    script.deltas, script.text, script.images = (), "the caption", (ImageIn("image/png", image),)
    # Every retry of sendPhoto fails (502): the image goes as a document, with the caption.
    fake.fail("sendPhoto", 502, times=10)
    await _ask(fake, scripted_app, script)
    assert len(fake.sent("sendPhoto")) == 4  # first try + 3 retries
    (doc,) = fake.sent("sendDocument")
    assert next(iter(doc.files.values()))[1] == image
    assert doc.params["caption"] == "the caption"


async def test_turn_failure_is_reported_to_the_chat(
    fake: FakeBotAPI, tmp_path: object, script: Script
) -> None:
    from pathlib import Path

    from visus.tether.server import create_app

    class Broken:
        async def run_turn(self, **kw: object) -> object:
            raise RuntimeError("provider exploded")

    app = create_app(data_dir=Path(str(tmp_path)) / "t", runner_factory=lambda c: Broken())  # type: ignore[arg-type,return-value]
    async with bridge(fake, app) as b:
        fake.push(text_update(CHAT, "go"))
        await until(lambda: b.gateway.finished(CHAT), what="error note")
    assert "provider exploded" in fake.sent("sendMessage")[0].params["text"]


def test_prepare_keeps_photos_inside_bounds_unchanged() -> None:
    data = jpeg((800, 600))
    out = prepare_image(ImageIn("image/jpeg", data))
    assert (out.kind, out.data) == ("photo", data)


def test_prepare_fits_sides_sum_over_10000() -> None:
    data = png((9600, 600), (0, 0, 255))
    out = prepare_image(ImageIn("image/png", data))
    assert out.kind == "photo"
    w, h = _size(out.data)
    assert w + h <= limits.TELEGRAM_MAX_PHOTO_SIDES_SUM
    assert abs(w / h - 16) < 0.3


def test_prepare_sends_extreme_ratio_as_document() -> None:
    data = png((2500, 100))
    out = prepare_image(ImageIn("image/png", data))
    assert (out.kind, out.data) == ("document", data)


def test_prepare_reencodes_types_telegram_does_not_show_as_photos() -> None:
    buf = io.BytesIO()
    Image.new("RGB", (64, 64), (9, 9, 9)).save(buf, format="WEBP")
    out = prepare_image(ImageIn("image/webp", buf.getvalue()))
    assert out.kind == "photo"
    assert out.media_type in {"image/png", "image/jpeg"}
    assert _size(out.data) == (64, 64)


async def test_oversized_agent_image_is_fitted_before_sendphoto(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    wide = png((9600, 600), (0, 120, 0))
    script.deltas, script.text, script.images = (), "wide", (ImageIn("image/png", wide),)
    await _ask(fake, scripted_app, script)
    (photo,) = fake.sent("sendPhoto")
    data = next(iter(photo.files.values()))[1]
    assert data == prepare_image(ImageIn("image/png", wide)).data
    w, h = _size(data)
    assert w + h <= limits.TELEGRAM_MAX_PHOTO_SIDES_SUM
    assert json.loads(json.dumps(photo.params))["caption"] == "wide"


async def test_a_pause_in_the_stream_still_shows_the_latest_text(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    # "b" arrives inside the throttle window, then the stream pauses: a trailing edit
    # shows "a b" without waiting for the next delta. (0.15 s apart: tether sends text
    # that comes within TETHER_DELTA_WINDOW_SECONDS of the first as one delta.)
    script.deltas, script.pause = ("a ", "b ", "c"), (0.15, 1.2, 0.0)
    await _ask(fake, scripted_app, script, edit_interval=0.3)
    texts = [c.params["text"] for c in fake.sent("sendMessage", "editMessageText")]
    assert texts == ["a", "a b", "a b c"]


async def test_typing_is_renewed_while_the_agent_works_and_stops_with_the_preview(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    # The agent thinks for 1 s before its first delta, then streams for another second.
    script.deltas, script.pause = ("", "first ", "second"), (1.0, 0.5, 0.5)
    await _ask(fake, scripted_app, script, typing_interval=0.2)
    calls = fake.sent("sendChatAction", "sendMessage")
    actions = [c for c in calls if c.method == "sendChatAction"]
    assert all(c.params["action"] == "typing" for c in actions)
    assert 2 <= len(actions) <= 8  # renewed every 0.2 s during the 1 s wait
    first_text = next(i for i, c in enumerate(calls) if c.method == "sendMessage")
    # Once the preview shows, typing stops (at most one renewal was already under way).
    assert sum(c.method == "sendChatAction" for c in calls[first_text:]) <= 1


async def test_an_image_too_elongated_for_a_photo_goes_as_a_document_in_order(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    square, strip = png((200, 200)), png((2500, 100), (0, 0, 0))
    script.deltas, script.text = (), "a square and a strip"
    script.images = (ImageIn("image/png", square), ImageIn("image/png", strip))
    methods = [m for m in await _ask(fake, scripted_app, script) if m != "sendChatAction"]
    assert methods == ["sendPhoto", "sendDocument"]  # runs of one kind, in order
    (photo,) = fake.sent("sendPhoto")
    (doc,) = fake.sent("sendDocument")
    assert next(iter(photo.files.values()))[1] == square
    assert photo.params["caption"] == "a square and a strip"
    assert next(iter(doc.files.values())) == ("image2.png", strip)
    assert "caption" not in doc.params
