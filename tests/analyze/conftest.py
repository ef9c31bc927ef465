"""Fixtures for vision_analyze / video_analyze: the reference server, inputs, doubles."""

from __future__ import annotations

import functools
import http.server
import io
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw, ImageFont

from visus.config import VisusConfig, load_config
from visus.models import ModelSpec
from visus.providers.base import BlobReader, OnDelta, RefitCache
from visus.record.messages import AssistantMessage, ModelRequest, TextPart, Usage
from visus.reference.server import serve_in_background


@pytest.fixture(scope="session")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


def make_config(tmp: Path, reference_url: str, **extra_env: str) -> VisusConfig:
    """A configuration isolated from the machine: data under ``tmp``, reference at the URL."""
    env = {
        "VISUS_DATA": str(tmp / "data"),
        "VISUS_PROVIDERS__REFERENCE__BASE_URL": reference_url,
        "VISUS_CONFIG": "",
        **extra_env,
    }
    return load_config(env=env)


@pytest.fixture
def cfg(tmp_path: Path, reference_url: str) -> VisusConfig:
    return make_config(tmp_path, reference_url)


@functools.cache
def _font(size: int) -> ImageFont.FreeTypeFont:
    from visus.media import font_path

    return ImageFont.truetype(font_path("DejaVuSans.ttf"), size)


def word_image(word: str, *, size: tuple[int, int] = (640, 240)) -> Image.Image:
    """Black ``word`` on white, large enough for the reference model's OCR."""
    im = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(im)
    font = _font(72)
    box = draw.textbbox((0, 0), word, font=font)
    x = (size[0] - (box[2] - box[0])) // 2
    y = (size[1] - (box[3] - box[1])) // 2 - box[1]
    draw.text((x, y), word, fill="black", font=font)
    return im


def png_bytes(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def word_png(word: str) -> bytes:
    return png_bytes(word_image(word))


def pdf_bytes(words: Sequence[str]) -> bytes:
    """A PDF with one page per word (Pillow writes it; pypdfium2 renders it back)."""
    pages = [word_image(w) for w in words]
    buf = io.BytesIO()
    pages[0].save(buf, "PDF", save_all=True, append_images=pages[1:], resolution=72)
    return buf.getvalue()


def video_bytes(
    words: Sequence[str],
    *,
    fps: int = 10,
    codec: str = "mpeg4",
    seconds: int = 1,
    gop: int | None = None,
) -> bytes:
    """An MP4 showing each of ``words`` for ``seconds`` (PyAV encodes numpy frames).

    ``gop`` spaces the keyframes (so seeking lands before the wanted time).
    """
    import av
    import numpy as np

    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = 640, 240, "yuv420p"
        stream.bit_rate = 4_000_000
        if gop is not None:
            stream.codec_context.gop_size = gop
        for word in words:
            frame_rgb = np.asarray(word_image(word))
            for _ in range(fps * seconds):
                frame = av.VideoFrame.from_ndarray(frame_rgb, format="rgb24")
                for packet in stream.encode(frame):
                    out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


class FakeClient:
    """A provider double at the client seam: answers from a script, records requests."""

    provider = "fake"
    wire = "openai-chat"

    def __init__(
        self,
        answers: Sequence[str] | Callable[[ModelRequest], str],
        *,
        usage: Usage | None = None,
    ) -> None:
        self.answers = answers
        self.usage = usage if usage is not None else Usage(100, 20, 0.5)
        self.requests: list[ModelRequest] = []

    async def complete(
        self,
        request: ModelRequest,
        *,
        model: ModelSpec,
        blobs: BlobReader,
        on_delta: OnDelta | None = None,
        refit_cache: RefitCache | None = None,
    ) -> AssistantMessage:
        self.requests.append(request)
        if callable(self.answers):
            text = self.answers(request)
        else:
            text = self.answers[min(len(self.requests), len(self.answers)) - 1]
        return AssistantMessage(parts=(TextPart(text),), model=model.name, usage=self.usage)


class StaticServer:
    """Serves given bytes by path on 127.0.0.1 (plain http, for net's loopback allowance)."""

    def __init__(self, files: dict[str, tuple[bytes, str]]) -> None:
        self.files = files
        self.hits: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits.append(self.path)
                found = outer.files.get(self.path)
                if found is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body, ctype = found
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> StaticServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
