"""Telegram -> tether: text, photos, documents, albums, size and allowlist refusals,
checked on the exact Bot API calls the gateway makes against a fake Bot API."""

from __future__ import annotations

import io
import logging

import pytest
from fastapi import FastAPI
from PIL import Image

from tests.telegram.conftest import CHAT, Script, bridge, jpeg, png, until
from tests.telegram.fake_bot import FakeBotAPI, document_update, photo_update, text_update
from visus import limits


async def test_text_message_becomes_a_user_message_in_the_chats_session(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    async with bridge(fake, scripted_app) as b:
        fake.push(text_update(CHAT, "hi there"))
        await until(lambda: script.turns, what="a turn")
        await until(lambda: fake.sent("sendMessage", "editMessageText"), what="reply")
        await b.gateway.drain()
    turn = script.turns[0]
    assert turn.session == f"tg-{CHAT}"
    assert turn.text == "hi there"
    assert turn.images == ()
    assert turn.user is not None
    assert turn.user["id"] == str(CHAT)
    assert not fake.sent("getFile")


async def test_photo_sends_the_largest_size_with_its_caption(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    small, medium, large = jpeg((90, 60)), jpeg((320, 213)), jpeg((1280, 853))
    fake.add_file("p-s", small)
    fake.add_file("p-m", medium)
    fake.add_file("p-l", large)
    sizes = [
        ("p-s", 90, 60, len(small)),
        ("p-l", 1280, 853, len(large)),  # not last: the largest is chosen by size
        ("p-m", 320, 213, len(medium)),
    ]
    async with bridge(fake, scripted_app) as b:
        fake.push(photo_update(CHAT, sizes, caption="what is this?"))
        await until(lambda: script.turns, what="a turn")
        await b.gateway.drain()
    assert [c.params["file_id"] for c in fake.sent("getFile")] == ["p-l"]
    assert fake.downloads == ["photos/p-l.bin"]
    turn = script.turns[0]
    assert turn.text == "what is this?"
    assert len(turn.images) == 1
    assert turn.images[0].media_type == "image/jpeg"
    assert turn.images[0].data == large
    # The user sees that the bot is working on it.
    assert fake.sent("sendChatAction")


async def test_image_documents_are_images_and_odd_types_are_converted(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    picture = png((100, 80))
    buf = io.BytesIO()
    Image.new("RGB", (50, 40), (0, 200, 0)).save(buf, format="BMP")
    bmp = buf.getvalue()
    fake.add_file("doc-png", picture)
    fake.add_file("doc-bmp", bmp)
    async with bridge(fake, scripted_app) as b:
        fake.push(document_update(CHAT, "doc-png", "image/png", len(picture), caption="a png"))
        await until(lambda: len(script.turns) == 1, what="first turn")
        fake.push(document_update(CHAT, "doc-bmp", "image/bmp", len(bmp)))
        await until(lambda: len(script.turns) == 2, what="second turn")
        await b.gateway.drain()
    first, second = script.turns
    assert first.text == "a png"
    assert first.images[0].media_type == "image/png"
    assert first.images[0].data == picture
    assert second.text == ""
    assert second.images[0].media_type in limits.TETHER_MEDIA_TYPES
    with Image.open(io.BytesIO(second.images[0].data)) as im:
        assert im.size == (50, 40)
        assert im.convert("RGB").getpixel((10, 10)) == (0, 200, 0)


async def test_a_non_image_document_is_not_forwarded(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    async with bridge(fake, scripted_app):
        fake.push(document_update(CHAT, "zip", "application/zip", 1000))
        await until(lambda: fake.sent("sendMessage"), what="reply")
    assert not script.turns
    assert not fake.sent("getFile")
    assert "photos and image files" in fake.sent("sendMessage")[0].params["text"]


async def test_a_non_image_document_with_a_caption_is_refused_not_half_sent(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    async with bridge(fake, scripted_app):
        fake.push(document_update(CHAT, "pdf", "application/pdf", 1000, caption="read this"))
        await until(lambda: fake.sent("sendMessage"), what="reply")
    assert not script.turns  # not "read this" alone, as if nothing had been attached
    assert not fake.sent("getFile")
    assert "photos and image files" in fake.sent("sendMessage")[0].params["text"]


async def test_album_of_three_is_one_message_with_three_images(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    images = [jpeg((200 + i, 100), (i * 60, 0, 0)) for i in range(3)]
    for i, data in enumerate(images):
        fake.add_file(f"a{i}", data)
    async with bridge(fake, scripted_app) as b:
        for i, data in enumerate(images):
            caption = "compare these" if i == 0 else None
            fake.push(
                photo_update(
                    CHAT, [(f"a{i}", 200 + i, 100, len(data))], caption=caption, media_group_id="G"
                )
            )
        await until(lambda: script.turns, what="a turn")
        await b.gateway.drain()
    assert len(script.turns) == 1
    turn = script.turns[0]
    assert turn.text == "compare these"
    assert [im.data for im in turn.images] == images


async def test_album_of_five_is_refused_naming_the_limit(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    async with bridge(fake, scripted_app):
        for i in range(5):
            fake.add_file(f"b{i}", jpeg((50, 50)))
            fake.push(photo_update(CHAT, [(f"b{i}", 50, 50, 900)], media_group_id="G5"))
        await until(lambda: fake.sent("sendMessage"), what="refusal")
    text = fake.sent("sendMessage")[0].params["text"]
    assert "5 images" in text
    assert f"at most {limits.TETHER_MAX_IMAGES_PER_MESSAGE}" in text
    assert not fake.sent("getFile")
    assert not script.turns


async def test_oversize_photo_is_refused_before_any_download(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    big = 15 * limits.MB
    async with bridge(fake, scripted_app):
        fake.push(photo_update(CHAT, [("small", 90, 90, 2000), ("huge", 4000, 3000, big)]))
        await until(lambda: fake.sent("sendMessage"), what="refusal")
    text = fake.sent("sendMessage")[0].params["text"]
    assert "15.0 MB" in text
    assert "10 MB per image" in text
    assert not fake.sent("getFile")
    assert not fake.downloads
    assert not script.turns


async def test_file_larger_than_reported_is_refused_after_getfile(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    # The update claims a small size; getFile reports the real one: refused before download.
    fake.add_file("liar", b"\xff" * (limits.TELEGRAM_MAX_PHOTO_BYTES + 1))
    async with bridge(fake, scripted_app):
        fake.push(document_update(CHAT, "liar", "image/jpeg", 100))
        await until(lambda: fake.sent("sendMessage"), what="refusal")
    assert "10 MB per image" in fake.sent("sendMessage")[0].params["text"]
    assert fake.sent("getFile")
    assert not fake.downloads
    assert not script.turns


async def test_disallowed_chat_gets_a_polite_refusal_and_is_logged(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script, caplog: pytest.LogCaptureFixture
) -> None:
    stranger = 999
    fake.add_file("s1", jpeg((40, 40)))
    with caplog.at_level(logging.WARNING, logger="visus.telegram"):
        async with bridge(fake, scripted_app):
            fake.push(text_update(stranger, "let me in"))
            fake.push(photo_update(stranger, [("s1", 40, 40, 500)]))
            await until(lambda: len(fake.sent("sendMessage")) == 2, what="refusals")
    for call in fake.sent("sendMessage"):
        assert call.params["chat_id"] == str(stranger)
        assert call.params["text"].startswith("Sorry")
        assert str(stranger) in call.params["text"]
    assert not script.turns
    assert not fake.sent("getFile")
    assert any("refused" in r.message and str(stranger) in r.message for r in caplog.records)


async def test_allowed_user_by_username_in_any_chat(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    group = -100777
    update = text_update(group, "hello from a group", user_id=55)
    update["message"]["from"]["username"] = "Ann_Admin"
    async with bridge(fake, scripted_app, allowed_chats=(), allowed_users=("@ann_admin",)) as b:
        fake.push(update)
        await until(lambda: script.turns, what="a turn")
        await b.gateway.drain()
    assert script.turns[0].session == f"tg-{group}"


async def test_start_command_is_answered_by_the_gateway_not_the_agent(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    async with bridge(fake, scripted_app):
        fake.push(text_update(CHAT, "/start"))
        await until(lambda: fake.sent("sendMessage"), what="greeting")
    assert "up to 4 photos" in fake.sent("sendMessage")[0].params["text"]
    assert not script.turns


async def test_album_over_the_frame_total_is_refused_before_download(
    fake: FakeBotAPI, scripted_app: FastAPI, script: Script
) -> None:
    six_mb = 6 * limits.MB  # each under the per-image bound; 24 MB together
    async with bridge(fake, scripted_app):
        for i in range(4):
            fake.push(photo_update(CHAT, [(f"t{i}", 3000, 2000, six_mb)], media_group_id="T"))
        await until(lambda: fake.sent("sendMessage"), what="refusal")
    text = fake.sent("sendMessage")[0].params["text"]
    assert "24.0 MB" in text
    assert "20 MB per message" in text
    assert not fake.sent("getFile")
    assert not script.turns
