"""video_analyze: keyframes sampled with PyAV reach the model as a timestamped sequence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.analyze.conftest import FakeClient, StaticServer, video_bytes, word_png
from visus.analyze import AnalyzeError, keyframes, video_analyze
from visus.analyze.video import format_time
from visus.analyze.vision import resolve_target
from visus.config import VisusConfig
from visus.models import ModelSpec
from visus.perception import Reach
from visus.providers import aclose, resolve
from visus.providers.base import BlobReader, OnDelta, RefitCache
from visus.record.messages import AssistantMessage, ImagePart, ModelRequest, TextPart
from visus.record.sessions import SessionStore

WORDS = ("BANANA", "PUMPKIN", "ROCKET")


class Recording:
    """Delegates to a real client and keeps each request (to read the captions sent)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.provider, self.wire = inner.provider, inner.wire
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
        return await self.inner.complete(request, model=model, blobs=blobs)


def seen_words(text: str) -> list[list[str]]:
    block = text.split("```json\n", 1)[1].split("\n```", 1)[0]
    return [[w["text"] for w in im["words"]] for im in json.loads(block)["images"]]


@pytest.fixture(scope="module")
def video() -> bytes:
    return video_bytes(WORDS)


def test_keyframes_one_per_second_at_the_right_times(video: bytes) -> None:
    frames, duration = keyframes(video)
    assert duration == pytest.approx(3.0, abs=0.15)
    assert [f.label for f in frames] == ["0:00", "0:01", "0:02"]
    assert [f.seconds for f in frames] == pytest.approx([0.0, 1.0, 2.0], abs=0.11)
    assert all(f.png.startswith(b"\x89PNG") and (f.width, f.height) == (640, 240) for f in frames)


def test_keyframes_are_bounded(video: bytes) -> None:
    frames, _ = keyframes(video, max_frames=2, max_edge=320)
    assert [f.label for f in frames] == ["0:00", "0:01"]  # 0 and 1.5 s
    assert frames[1].seconds == pytest.approx(1.5, abs=0.11)
    assert (frames[0].width, frames[0].height) == (320, 120)


def test_long_video_is_sampled_by_seeking_to_the_right_frames() -> None:
    from visus.reference.model import perceive_cached

    names = ("ALPHA", "BRAVO", "CHARLIE", "DELTA")
    # 5 s per word, keyframes every 7 frames: every seek lands before its time.
    video = video_bytes(names, fps=4, seconds=5, gop=7)
    frames, duration = keyframes(video, max_frames=4)
    assert duration == pytest.approx(20.0, abs=0.3)
    assert [f.label for f in frames] == ["0:00", "0:05", "0:10", "0:15"]
    seen = [[w.text for w in perceive_cached(f.png).words] for f in frames]  # type: ignore[union-attr]
    assert seen == [[n] for n in names]


def test_h264_decodes_too() -> None:
    frames, _ = keyframes(video_bytes(WORDS[:2], codec="libx264"))
    assert [f.label for f in frames] == ["0:00", "0:01"]


def test_format_time() -> None:
    assert [format_time(s) for s in (0, 9.99, 12.2, 61, 3600, 3725.5)] == [
        "0:00",
        "0:09",
        "0:12",
        "1:01",
        "1:00:00",
        "1:02:05",
    ]


async def test_the_reference_model_sees_each_word_at_its_time(
    tmp_path: Path, cfg: VisusConfig, video: bytes
) -> None:
    (tmp_path / "clip.mp4").write_bytes(video)
    target = resolve_target(None, cfg)
    real, _ = resolve(target.ref, config=target.settings)
    client = Recording(real)
    try:
        result = await video_analyze(
            prompt="What is shown at 0:01?",
            file_path="clip.mp4",
            reach=Reach([tmp_path]),
            config=cfg,
            client=client,
        )
    finally:
        await aclose(real)
    parts = client.requests[0].messages[0].parts
    captions = [p.text for p in parts if isinstance(p, TextPart)]
    assert captions[:3] == [
        "Frame at 0:00 (of 0:03)",
        "Frame at 0:01 (of 0:03)",
        "Frame at 0:02 (of 0:03)",
    ]
    assert captions[3].startswith("What is shown at 0:01?")
    # Each caption is followed by its frame, and the model read the right word in each.
    kinds = [p.kind for p in parts]
    assert kinds == ["text", "image"] * 3 + ["text"]
    assert seen_words(result.text) == [[w] for w in WORDS]
    assert result.model == "reference"
    assert result.input_tokens > 0


async def test_video_from_a_url_through_loopback(
    tmp_path: Path, cfg: VisusConfig, video: bytes
) -> None:
    with StaticServer({"/v.mp4": (video, "video/mp4")}) as server:
        result = await video_analyze(
            f"{server.url}/v.mp4", config=cfg, allow_loopback_http=True, reach=Reach([tmp_path])
        )
        with pytest.raises(AnalyzeError) as blocked:
            await video_analyze(f"{server.url}/v.mp4", config=cfg, reach=Reach([tmp_path]))
    assert seen_words(result.text) == [[w] for w in WORDS]
    assert blocked.value.code == "URL_BLOCKED"
    assert server.hits == ["/v.mp4"]


async def test_session_records_the_video_cost(
    tmp_path: Path, cfg: VisusConfig, video: bytes
) -> None:
    (tmp_path / "clip.mp4").write_bytes(video)
    fake = FakeClient(["three words"])
    store = SessionStore(tmp_path / "sessions")
    result = await video_analyze(
        file_path="clip.mp4",
        reach=Reach([tmp_path]),
        config=cfg,
        client=fake,
        session="v1",
        sessions=store,
    )
    messages = store.load("v1").messages
    assert [m.kind for m in messages] == ["user", "assistant"]
    assert messages[1].usage == result.usage
    assert result.cost_usd == 0.5
    assert sum(isinstance(p, ImagePart) for p in fake.requests[0].messages[0].parts) == 3


async def test_errors(tmp_path: Path, cfg: VisusConfig, video: bytes) -> None:
    (tmp_path / "clip.mp4").write_bytes(video)
    (tmp_path / "noise.mp4").write_bytes(bytes(range(256)) * 40)
    kw: dict[str, Any] = {"reach": Reach([tmp_path]), "config": cfg}

    async def code(**more: Any) -> str:
        with pytest.raises(AnalyzeError) as info:
            await video_analyze(**{**kw, **more})
        assert str(info.value).startswith(info.value.code + ": ")
        return info.value.code

    assert await code(file_path="clip.mp4", model="openai-compatible:no-vision") == (
        "VIDEO_NOT_SUPPORTED"
    )
    assert await code(file_path="noise.mp4") == "UNSUPPORTED_FILE_TYPE"
    assert await code(file_path="missing.mp4") == "FILE_NOT_FOUND"
    assert await code() == "INVALID_INPUT"
    assert await code(file_path="clip.mp4", file_url="https://example.com/v.mp4") == (
        "INVALID_INPUT"
    )
    assert await code(file_url="https://10.0.0.1/v.mp4") == "URL_BLOCKED"
    assert await code(file_path="clip.mp4", prompt="") == "INVALID_INPUT"


def test_an_image_is_not_mistaken_for_nothing(tmp_path: Path) -> None:
    # FFmpeg opens a PNG as a one-frame stream: one keyframe, not a crash.
    frames, _ = keyframes(word_png("SOLO"))
    assert len(frames) == 1


class GeminiStub:
    """A loopback stand-in for generateContent: records requests, answers from a script."""

    def __init__(self, replies: list[tuple[int, dict[str, Any]]]) -> None:
        import http.server
        import threading

        self.replies = replies
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(size))
                outer.requests.append((self.path, dict(self.headers), body))
                status, reply = outer.replies[min(len(outer.requests), len(outer.replies)) - 1]
                raw = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def gemini_config(tmp_path: Path, url: str) -> VisusConfig:
    from visus.config import load_config

    path = tmp_path / "gemini.toml"
    path.write_text(
        f'data_dir = "{tmp_path / "data"}"\n[providers.gemini]\n'
        f'api_key = "gm-test-key-0123"\nbase_url = "{url}"\n'
    )
    return load_config(path, env={})


_ANSWER = {
    "candidates": [{"content": {"role": "model", "parts": [{"text": "At 0:01 it says PUMPKIN."}]}}],
    "usageMetadata": {"promptTokenCount": 1000, "candidatesTokenCount": 10},
}


async def test_gemini_gets_the_video_natively(tmp_path: Path, video: bytes) -> None:
    import base64

    from visus.models import get_model

    (tmp_path / "clip.mp4").write_bytes(video)
    stub = GeminiStub([(429, {"error": {"message": "slow down"}}), (200, _ANSWER)])
    try:
        cfg = gemini_config(tmp_path, stub.url)
        result = await video_analyze(
            prompt="What is at 0:01?",
            file_path="clip.mp4",
            model="gemini:gemini-2.5-flash",
            reach=Reach([tmp_path]),
            config=cfg,
        )
    finally:
        stub.close()
    assert len(stub.requests) == 2  # the 429 was retried
    path, headers, body = stub.requests[-1]
    assert path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert headers["x-goog-api-key"] == "gm-test-key-0123"
    video_part, text_part = body["contents"][0]["parts"]
    assert video_part["inlineData"]["mimeType"] == "video/mp4"
    assert base64.b64decode(video_part["inlineData"]["data"]) == video
    assert text_part == {"text": "What is at 0:01?"}
    spec = get_model("gemini:gemini-2.5-flash")
    assert result.text == "At 0:01 it says PUMPKIN."
    assert (result.input_tokens, result.output_tokens) == (1000, 10)
    expected = (1000 * spec.input_price_per_mtok + 10 * spec.output_price_per_mtok) / 1e6
    assert result.cost_usd == pytest.approx(expected)
    assert result.cost_usd > 0


async def test_gemini_native_errors_and_opt_out(tmp_path: Path, video: bytes) -> None:
    (tmp_path / "clip.mp4").write_bytes(video)
    (tmp_path / "noise.mp4").write_bytes(bytes(range(256)) * 40)
    stub = GeminiStub([(400, {"error": {"message": "bad request"}})])
    try:
        cfg = gemini_config(tmp_path, stub.url)
        kw: dict[str, Any] = {
            "model": "gemini:gemini-2.5-flash",
            "reach": Reach([tmp_path]),
            "config": cfg,
        }
        with pytest.raises(AnalyzeError) as info:
            await video_analyze(file_path="clip.mp4", **kw)
        assert info.value.code == "LLM_ERROR"
        assert "bad request" in str(info.value)
        with pytest.raises(AnalyzeError) as info:
            await video_analyze(file_path="noise.mp4", **kw)
        assert info.value.code == "UNSUPPORTED_FILE_TYPE"
        sent = len(stub.requests)
        fake = FakeClient(["from frames"])
        framed = await video_analyze(file_path="clip.mp4", native=False, client=fake, **kw)
    finally:
        stub.close()
    assert sent == 1  # the noise never reached the provider
    assert len(stub.requests) == 1  # native=False: keyframes through the client instead
    assert framed.text == "from frames"
    assert sum(isinstance(p, ImagePart) for p in fake.requests[0].messages[0].parts) == 3
