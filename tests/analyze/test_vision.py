"""vision_analyze against the reference model over real HTTP (and a client double
where the reference model cannot produce the answer a test needs)."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.analyze.conftest import (
    FakeClient,
    StaticServer,
    make_config,
    pdf_bytes,
    png_bytes,
    word_png,
)
from visus import limits
from visus.analyze import (
    CODES,
    AnalyzeError,
    FileAnalyzeCache,
    MemoryAnalyzeCache,
    vision_analyze,
    vision_analyze_sync,
)
from visus.config import VisusConfig, load_config
from visus.models import unregister_model
from visus.perception import Reach
from visus.record.messages import ImagePart, TextPart, Usage
from visus.record.sessions import SessionStore
from visus.reference.server import serve_in_background

_JSON_BLOCK_SCHEMA = {
    "type": "object",
    "properties": {"images": {"type": "array", "minItems": 1}},
    "required": ["images"],
}


def words_seen(text: str) -> list[list[str]]:
    """Per image, the words the reference model read (from its JSON block)."""
    block = text.split("```json\n", 1)[1].split("\n```", 1)[0]
    return [[w["text"] for w in im["words"]] for im in json.loads(block)["images"]]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


async def expect(code: str, **kwargs: Any) -> AnalyzeError:
    with pytest.raises(AnalyzeError) as info:
        await vision_analyze(kwargs.pop("prompt", "What does it say?"), **kwargs)
    assert info.value.code == code
    assert str(info.value).startswith(f"{code}: ")
    return info.value


# --- success paths ----------------------------------------------------------------------


async def test_envelope_from_a_file_the_model_really_saw(root: Path, cfg: VisusConfig) -> None:
    (root / "sign.png").write_bytes(word_png("HARBOUR"))
    result = await vision_analyze(
        "What does the sign say?", file_path="sign.png", reach=Reach([root]), config=cfg
    )
    env = result.to_dict()
    assert list(env) == ["text", "model", "cost_usd", "input_tokens", "output_tokens"]
    assert words_seen(env["text"]) == [["HARBOUR"]]
    assert env["model"] == "reference"
    assert env["input_tokens"] > 0
    assert env["output_tokens"] > 0
    assert env["cost_usd"] == 0.0  # the reference model is free


async def test_base64_with_a_data_prefix(root: Path, cfg: VisusConfig) -> None:
    data = "data:image/png;base64," + base64.b64encode(word_png("MEADOW")).decode()
    result = await vision_analyze("Read it", file_base64=data, reach=Reach([root]), config=cfg)
    assert words_seen(result.text) == [["MEADOW"]]


async def test_big_image_is_fitted_not_refused(root: Path, cfg: VisusConfig) -> None:
    big = Image.new("RGB", (9000, 3000), "white")  # past the reference's 8000 px edge
    (root / "big.png").write_bytes(png_bytes(big))
    fake = FakeClient(["ok"])
    await vision_analyze("?", file_path="big.png", reach=Reach([root]), config=cfg, client=fake)
    images = [p for p in fake.requests[0].messages[0].parts if isinstance(p, ImagePart)]
    assert len(images) == 1
    assert max(images[0].width, images[0].height) <= 8000


async def test_several_files_in_one_call_in_order(root: Path, cfg: VisusConfig) -> None:
    (root / "a.png").write_bytes(word_png("FALCON"))
    (root / "b.png").write_bytes(word_png("GARDEN"))
    b64 = base64.b64encode(word_png("VELVET")).decode()
    result = await vision_analyze(
        "Read each",
        files=[{"file_path": "a.png"}, {"file_path": "b.png"}, {"file_base64": b64}],
        reach=Reach([root]),
        config=cfg,
    )
    assert words_seen(result.text) == [["FALCON"], ["GARDEN"], ["VELVET"]]


async def test_pdf_pages_go_to_the_reference_model_as_images(root: Path, cfg: VisusConfig) -> None:
    (root / "doc.pdf").write_bytes(pdf_bytes(["COPPER", "SILVER"]))
    result = await vision_analyze("Read", file_path="doc.pdf", reach=Reach([root]), config=cfg)
    assert words_seen(result.text) == [["COPPER"], ["SILVER"]]
    ranged = await vision_analyze(
        "Read", file_path="doc.pdf", reach=Reach([root]), config=cfg, pages=(2, 2)
    )
    assert words_seen(ranged.text) == [["SILVER"]]


async def test_pdf_pages_are_captioned(root: Path, cfg: VisusConfig) -> None:
    (root / "doc.pdf").write_bytes(pdf_bytes(["COPPER", "SILVER"]))
    fake = FakeClient(["ok"])
    await vision_analyze("Read", file_path="doc.pdf", reach=Reach([root]), config=cfg, client=fake)
    texts = [p.text for p in fake.requests[0].messages[0].parts if isinstance(p, TextPart)]
    assert texts[:2] == ["File: doc.pdf, page 1 of 2", "File: doc.pdf, page 2 of 2"]
    assert texts[-1] == "Read"


async def test_url_through_loopback_with_the_allowance(root: Path, cfg: VisusConfig) -> None:
    with StaticServer({"/pic.png": (word_png("ISLAND"), "image/png")}) as server:
        result = await vision_analyze(
            "Read",
            file_url=f"{server.url}/pic.png",
            allow_loopback_http=True,
            reach=Reach([root]),
            config=cfg,
        )
        assert server.hits == ["/pic.png"]
    assert words_seen(result.text) == [["ISLAND"]]


def test_sync_wrapper(root: Path, cfg: VisusConfig) -> None:
    (root / "s.png").write_bytes(word_png("SUMMIT"))
    result = vision_analyze_sync("Read", file_path="s.png", reach=Reach([root]), config=cfg)
    assert words_seen(result.text) == [["SUMMIT"]]


# --- structured answers -------------------------------------------------------------------


async def test_schema_success_with_the_reference_models_json_block(
    root: Path, cfg: VisusConfig
) -> None:
    (root / "sign.png").write_bytes(word_png("ORCHID"))
    result = await vision_analyze(
        "List the words",
        file_path="sign.png",
        reach=Reach([root]),
        config=cfg,
        format={"type": "json_schema", "schema": _JSON_BLOCK_SCHEMA},
    )
    env = result.to_dict()
    assert list(env)[:2] == ["text", "parsed"]
    assert [w["text"] for w in env["parsed"]["images"][0]["words"]] == ["ORCHID"]


async def test_schema_retry_then_success(root: Path, cfg: VisusConfig) -> None:
    (root / "sign.png").write_bytes(word_png("ORCHID"))
    fake = FakeClient(
        ['It says ORCHID: {"wrd": "ORCHID"}', '{"word": "ORCHID"}'], usage=Usage(10, 5, 0.25)
    )
    schema = {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}
    result = await vision_analyze(
        "Which word?",
        file_path="sign.png",
        reach=Reach([root]),
        config=cfg,
        format=schema,
        client=fake,
    )
    assert result.parsed == {"word": "ORCHID"}
    assert len(fake.requests) == 2
    retry = fake.requests[1].messages
    assert [m.kind for m in retry] == ["user", "assistant", "user"]
    assert "'word' is a required property" in retry[-1].text
    assert json.dumps(schema) in retry[0].text  # the schema was in the first ask
    assert (result.input_tokens, result.output_tokens, result.cost_usd) == (20, 10, 0.5)


async def test_schema_failure_after_one_retry_is_response_not_json(
    root: Path, cfg: VisusConfig
) -> None:
    (root / "sign.png").write_bytes(word_png("ORCHID"))
    spent: list[Usage] = []
    schema = {"type": "object", "required": ["total", "vendor"]}
    err = await expect(
        "RESPONSE_NOT_JSON",
        file_path="sign.png",
        reach=Reach([root]),
        config=cfg,
        format=schema,
        on_usage=spent.append,
    )
    assert "'total' is a required property" in str(err)
    assert len(spent) == 2  # asked once more before giving up, and both calls counted


async def test_invalid_schema_is_invalid_input_before_any_call(
    root: Path, cfg: VisusConfig
) -> None:
    (root / "sign.png").write_bytes(word_png("ORCHID"))
    fake = FakeClient(["{}"])
    for bad in ({"type": "objekt"}, {"type": "json_schema"}, {"required": "total"}, [1]):
        await expect(
            "INVALID_INPUT",
            file_path="sign.png",
            reach=Reach([root]),
            config=cfg,
            format=bad,
            client=fake,
        )
    assert fake.requests == []


# --- clipping and cache ----------------------------------------------------------------


async def test_long_answers_are_clipped_with_a_marker(root: Path, cfg: VisusConfig) -> None:
    (root / "s.png").write_bytes(word_png("ORCHID"))
    long = "word " * 5000
    fake = FakeClient([long])
    result = await vision_analyze(
        "?", file_path="s.png", reach=Reach([root]), config=cfg, client=fake
    )
    assert result.clipped
    assert len(result.text) <= limits.ANALYZE_MAX_RESULT_CHARS
    assert result.text.startswith(long[:1000])
    assert f"of {len(long)} characters]" in result.text
    short = await vision_analyze(
        "?", file_path="s.png", reach=Reach([root]), config=cfg, client=FakeClient(["short"])
    )
    assert (short.text, short.clipped) == ("short", False)


@pytest.mark.parametrize("kind", ["memory", "file"])
async def test_cache_hit_costs_no_model_call(
    root: Path, cfg: VisusConfig, tmp_path: Path, kind: str
) -> None:
    (root / "s.png").write_bytes(word_png("ORCHID"))
    (root / "copy.png").write_bytes(word_png("ORCHID"))
    (root / "other.png").write_bytes(word_png("WALNUT"))
    cache = MemoryAnalyzeCache() if kind == "memory" else FileAnalyzeCache(tmp_path / "c")
    fake = FakeClient(lambda req: f"answer {len(fake.requests)}")
    common: dict[str, Any] = {"reach": Reach([root]), "config": cfg, "client": fake}

    first = await vision_analyze("?", file_path="s.png", cache=cache, **common)
    assert (first.text, first.cached, first.cost_usd) == ("answer 1", False, 0.5)
    if kind == "file":  # survives a new instance over the same folder
        cache = FileAnalyzeCache(tmp_path / "c")
    again = await vision_analyze("?", file_path="copy.png", cache=cache, **common)
    assert len(fake.requests) == 1  # same bytes, prompt and model: no call
    assert (again.text, again.cached, again.cost_usd, again.input_tokens) == (
        "answer 1",
        True,
        0.0,
        0,
    )
    assert again.to_dict()["cached"] is True
    # Anything that decides the answer is part of the key.
    await vision_analyze("?", file_path="other.png", cache=cache, **common)
    await vision_analyze("other prompt", file_path="s.png", cache=cache, **common)
    await vision_analyze(
        "?",
        file_path="s.png",
        cache=cache,
        format={"type": "object"},
        **{**common, "client": FakeClient(["{}"])},
    )
    await vision_analyze("?", file_path="s.png", **common)  # no cache: always a call
    assert len(fake.requests) == 4


# --- model chain -------------------------------------------------------------------------


@pytest.fixture
def chain_config(tmp_path: Path, reference_url: str) -> Iterator[Path]:
    path = tmp_path / "visus.toml"
    models = "".join(
        f'[[models]]\nname = "{n}"\nprovider = "openai-compatible"\nvision = true\n'
        f"input_price_per_mtok = {p}\noutput_price_per_mtok = {p}\n\n"
        for n, p in (("vis-call", 0), ("vis-aux", 0), ("vis-default", 1_000_000))
    )
    models += '[[models]]\nname = "text-only"\nprovider = "openai-compatible"\n\n'
    path.write_text(
        f'default_model = "openai-compatible:vis-default"\ndata_dir = "{tmp_path / "data"}"\n\n'
        f'[providers."openai-compatible"]\nbase_url = "{reference_url}/v1"\n'
        f'api_key = "local-key-0000"\n\n' + models
    )
    yield path
    for name in ("vis-call", "vis-aux", "vis-default", "text-only", "vis-only-aux"):
        unregister_model(name)


async def test_model_chain_call_then_aux_then_default(
    root: Path, chain_config: Path, reference_url: str
) -> None:
    (root / "s.png").write_bytes(word_png("ORCHID"))
    base = chain_config.read_text()
    cfg = load_config(chain_config, env={})
    kw: dict[str, Any] = {"file_path": "s.png", "reach": Reach([root])}

    default = await vision_analyze("?", config=cfg, **kw)
    assert default.model == "vis-default"
    assert default.cost_usd == default.input_tokens + default.output_tokens  # $1 a token
    assert words_seen(default.text) == [["ORCHID"]]

    chain_config.write_text(base + '[auxiliary.vision]\nmodel = "openai-compatible:vis-aux"\n')
    cfg = load_config(chain_config, env={})
    assert (await vision_analyze("?", config=cfg, **kw)).model == "vis-aux"
    called = await vision_analyze("?", config=cfg, model="openai-compatible:vis-call", **kw)
    assert called.model == "vis-call"


async def test_aux_provider_and_base_url_apply_to_the_aux_model(
    root: Path, tmp_path: Path, reference_url: str
) -> None:
    (root / "s.png").write_bytes(word_png("ORCHID"))
    path = tmp_path / "aux.toml"
    path.write_text(
        'default_model = "reference"\n'
        f'[providers.reference]\nbase_url = "{reference_url}"\n'
        "[auxiliary.vision]\n"
        'model = "vis-only-aux"\nprovider = "openai-compatible"\n'
        f'base_url = "{reference_url}/v1"\n'
        '[[models]]\nname = "vis-only-aux"\nprovider = "openai-compatible"\nvision = true\n'
    )
    try:
        cfg = load_config(path, env={})
        result = await vision_analyze("?", file_path="s.png", reach=Reach([root]), config=cfg)
        assert result.model == "vis-only-aux"
        assert words_seen(result.text) == [["ORCHID"]]
        # The aux base URL is the aux model's: the same provider named by the call has none.
        await expect(
            "VISION_NOT_SUPPORTED",
            file_path="s.png",
            reach=Reach([root]),
            config=cfg,
            model="openai-compatible:vis-only-aux",
        )
    finally:
        unregister_model("vis-only-aux")


async def test_unknown_or_text_only_model_is_vision_not_supported(
    root: Path, chain_config: Path
) -> None:
    (root / "s.png").write_bytes(word_png("ORCHID"))
    cfg = load_config(chain_config, env={})
    kw: dict[str, Any] = {"file_path": "s.png", "reach": Reach([root]), "config": cfg}
    await expect("VISION_NOT_SUPPORTED", model="openai-compatible:never-heard-of-it", **kw)
    await expect("VISION_NOT_SUPPORTED", model="openai-compatible:text-only", **kw)
    chain_config.write_text(
        chain_config.read_text() + '[auxiliary.vision]\nmodel = "openai-compatible:text-only"\n'
    )
    err = await expect(
        "VISION_NOT_SUPPORTED",
        file_path="s.png",
        reach=Reach([root]),
        config=load_config(chain_config, env={}),
    )
    assert "text-only" in str(err)


# --- session usage -------------------------------------------------------------------------


async def test_cost_lands_in_the_sessions_usage(root: Path, chain_config: Path) -> None:
    from typer.testing import CliRunner

    from visus.cli import app

    (root / "s.png").write_bytes(word_png("ORCHID"))
    cfg = load_config(chain_config, env={})
    store = SessionStore(cfg.data_dir / "sessions")
    first = await vision_analyze(
        "?", file_path="s.png", reach=Reach([root]), config=cfg, session="s-1", sessions=store
    )
    second = await vision_analyze(
        "again", file_path="s.png", reach=Reach([root]), config=cfg, session="s-1"
    )  # default store: the config's data folder
    assert first.cost_usd > 0
    loaded = store.load("s-1")
    assert [m.kind for m in loaded.messages] == ["user", "assistant"] * 2
    assert loaded.messages[1].text == first.text

    out = CliRunner().invoke(app, ["usage", "s-1", "--data", str(cfg.data_dir), "--json"])
    assert out.exit_code == 0, out.output
    usage = json.loads(out.stdout)
    assert usage["cost_usd"] == pytest.approx(first.cost_usd + second.cost_usd)
    assert usage["input_tokens"] == first.input_tokens + second.input_tokens
    assert len(usage["turns"]) == 2


# --- every error code ------------------------------------------------------------------------


def test_every_code_is_documented_once() -> None:
    assert len(set(CODES)) == len(CODES) == 11


async def test_invalid_input(root: Path, cfg: VisusConfig) -> None:
    (root / "s.png").write_bytes(word_png("ORCHID"))
    kw: dict[str, Any] = {"reach": Reach([root]), "config": cfg}
    await expect("INVALID_INPUT", **kw)  # no source
    await expect("INVALID_INPUT", file_path="s.png", file_base64="aGk=", **kw)
    await expect("INVALID_INPUT", prompt="  ", file_path="s.png", **kw)
    await expect("INVALID_INPUT", file_base64="not base64 at all!", **kw)
    await expect("INVALID_INPUT", files=[{"file_path": "s.png"}] * 5, **kw)
    await expect("INVALID_INPUT", files=[{"file_path": "s.png", "file_url": "https://a/"}], **kw)
    await expect("INVALID_INPUT", files=[{"path": "s.png"}], **kw)
    await expect("INVALID_INPUT", files=[], **kw)
    await expect("INVALID_INPUT", files=[{"file_path": "s.png"}], file_path="s.png", **kw)
    fake = FakeClient(["never"])
    await expect("INVALID_INPUT", file_path="s.png", session="../escape", client=fake, **kw)
    assert fake.requests == []  # refused before anything was paid for


async def test_file_not_found_missing_or_outside_the_reach(
    root: Path, cfg: VisusConfig, tmp_path: Path
) -> None:
    outside = tmp_path / "secret.png"
    outside.write_bytes(word_png("SECRET"))
    (root / "link.png").symlink_to(outside)
    kw: dict[str, Any] = {"reach": Reach([root]), "config": cfg}
    await expect("FILE_NOT_FOUND", file_path="missing.png", **kw)
    await expect("FILE_NOT_FOUND", file_path=str(outside), **kw)
    await expect("FILE_NOT_FOUND", file_path="../secret.png", **kw)
    await expect("FILE_NOT_FOUND", file_path="link.png", **kw)


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/a.png",
        "https://192.168.1.1/a.png",
        "https://169.254.169.254/latest/meta-data",
        "https://127.0.0.1/a.png",
        "https://[::1]/a.png",
        "https://2130706433/a.png",
        "file:///etc/passwd",
        "ftp://example.com/a.png",
    ],
)
async def test_url_blocked(root: Path, cfg: VisusConfig, url: str) -> None:
    await expect("URL_BLOCKED", file_url=url, reach=Reach([root]), config=cfg)


async def test_plain_http_to_loopback_needs_the_allowance(root: Path, cfg: VisusConfig) -> None:
    with StaticServer({"/pic.png": (word_png("ISLAND"), "image/png")}) as server:
        await expect(
            "URL_BLOCKED", file_url=f"{server.url}/pic.png", reach=Reach([root]), config=cfg
        )
        assert server.hits == []  # refused before a packet left
        err = await expect(
            "FILE_NOT_FOUND",
            file_url=f"{server.url}/gone.png",
            allow_loopback_http=True,
            reach=Reach([root]),
            config=cfg,
        )
        assert "404" in str(err)


async def test_file_too_large(root: Path, cfg: VisusConfig) -> None:
    huge = root / "huge.png"
    with huge.open("wb") as f:  # sparse: past the input cap without writing 32 MB
        f.truncate(limits.ANALYZE_MAX_INPUT_BYTES + 1)
    tall = Image.new("L", (1, limits.MAX_SOURCE_EDGE + 1), 255)  # past the pixel bound
    (root / "tall.png").write_bytes(png_bytes(tall))
    kw: dict[str, Any] = {"reach": Reach([root]), "config": cfg}
    await expect("FILE_TOO_LARGE", file_path="huge.png", **kw)
    await expect("FILE_TOO_LARGE", file_path="tall.png", **kw)
    too_big = "A" * ((limits.ANALYZE_MAX_INPUT_BYTES // 3 + 10) * 4)
    await expect("FILE_TOO_LARGE", file_base64=too_big, **kw)
    body = os.urandom(1024)
    with StaticServer({"/big": (body, "image/png")}) as server:
        from visus.analyze._inputs import load_source
        from visus.analyze._values import FileSource

        with pytest.raises(AnalyzeError) as info:
            await load_source(
                FileSource(url=f"{server.url}/big"),
                reach=Reach([root]),
                max_bytes=100,
                allow_loopback_http=True,
            )
        assert info.value.code == "FILE_TOO_LARGE"


async def test_unsupported_file_type(root: Path, cfg: VisusConfig) -> None:
    (root / "noise.bin").write_bytes(bytes(range(256)) * 20)
    (root / "notes.txt").write_text("just some text\n")
    kw: dict[str, Any] = {"reach": Reach([root]), "config": cfg}
    await expect("UNSUPPORTED_FILE_TYPE", file_path="noise.bin", **kw)
    err = await expect("UNSUPPORTED_FILE_TYPE", file_path="notes.txt", **kw)
    assert "read it as text" in str(err)
    await expect(
        "UNSUPPORTED_FILE_TYPE", file_base64=base64.b64encode(b"\x89PNG\r\n\x1a\nxx").decode(), **kw
    )


async def test_pdf_not_supported_when_pages_cannot_be_rendered(
    root: Path, cfg: VisusConfig
) -> None:
    (root / "doc.pdf").write_bytes(pdf_bytes(["COPPER"]))
    (root / "s.png").write_bytes(word_png("ORCHID"))
    no_render = Reach([root], render=False)
    await expect("PDF_NOT_SUPPORTED", file_path="doc.pdf", reach=no_render, config=cfg)
    fake = FakeClient(["fine"])  # rasters need no rendering: still fine
    ok = await vision_analyze("?", file_path="s.png", reach=no_render, config=cfg, client=fake)
    assert ok.text == "fine"


async def test_pdf_too_many_pages(root: Path, cfg: VisusConfig) -> None:
    pages = [f"P{i}" for i in range(limits.ANALYZE_MAX_PDF_PAGES + 1)]
    (root / "long.pdf").write_bytes(pdf_bytes(pages))
    kw: dict[str, Any] = {"file_path": "long.pdf", "reach": Reach([root]), "config": cfg}
    err = await expect("PDF_TOO_MANY_PAGES", **kw)
    assert "pages=(first, last)" in str(err)
    await expect("PDF_TOO_MANY_PAGES", pages=(1, limits.ANALYZE_MAX_PDF_PAGES + 1), **kw)
    await expect("INVALID_INPUT", pages=(3, 2), **kw)
    await expect("INVALID_INPUT", pages=(1, 99), **kw)
    fake = FakeClient(["ok"])
    await vision_analyze("?", pages=(2, 3), client=fake, **kw)
    captions = [p.text for p in fake.requests[0].messages[0].parts if isinstance(p, TextPart)]
    assert captions[:2] == ["File: long.pdf, page 2 of 21", "File: long.pdf, page 3 of 21"]


async def test_llm_error_when_the_provider_refuses(root: Path, tmp_path: Path) -> None:
    (root / "s.png").write_bytes(word_png("ORCHID"))
    with serve_in_background(context_tokens=50) as tiny:
        cfg = make_config(tmp_path, tiny)
        err = await expect("LLM_ERROR", file_path="s.png", reach=Reach([root]), config=cfg)
    assert "context" in str(err).lower()


async def test_llm_error_when_the_key_is_missing(root: Path, tmp_path: Path) -> None:
    (root / "s.png").write_bytes(word_png("ORCHID"))
    cfg = load_config(env={"VISUS_DATA": str(tmp_path / "d")})
    os_key = os.environ.pop("ANTHROPIC_API_KEY", None)
    try:
        err = await expect(
            "LLM_ERROR",
            file_path="s.png",
            reach=Reach([root]),
            config=cfg,
            model="anthropic:claude-sonnet-4-6",
        )
    finally:
        if os_key is not None:
            os.environ["ANTHROPIC_API_KEY"] = os_key
    assert "ANTHROPIC_API_KEY" in str(err)


async def test_pages_without_a_pdf_is_invalid_input(root: Path, cfg: VisusConfig) -> None:
    (root / "s.png").write_bytes(word_png("ORCHID"))
    fake = FakeClient(["ok"])
    await expect(
        "INVALID_INPUT",
        file_path="s.png",
        pages=(1, 1),
        reach=Reach([root]),
        config=cfg,
        client=fake,
    )
    assert fake.requests == []


async def test_a_failed_structured_call_still_counts_its_cost(root: Path, cfg: VisusConfig) -> None:
    (root / "s.png").write_bytes(word_png("ORCHID"))
    store = SessionStore(cfg.data_dir / "sessions")
    fake = FakeClient(["no json", "still none"], usage=Usage(7, 3, 0.125))
    await expect(
        "RESPONSE_NOT_JSON",
        file_path="s.png",
        format={"type": "object"},
        reach=Reach([root]),
        config=cfg,
        client=fake,
        session="f1",
        sessions=store,
    )
    reply = store.load("f1").messages[-1]
    assert reply.kind == "assistant"
    assert reply.usage == Usage(14, 6, 0.25)
    assert reply.text.startswith("RESPONSE_NOT_JSON: ")


async def test_reference_without_a_url_starts_the_embedded_server(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VISUS_REFERENCE_URL", raising=False)
    (root / "s.png").write_bytes(word_png("TULIP"))
    cfg = load_config(env={"VISUS_DATA": str(tmp_path / "d")})
    assert cfg.provider_settings(env={}).url("reference") is None
    result = await vision_analyze("Read", file_path="s.png", reach=Reach([root]), config=cfg)
    assert words_seen(result.text) == [["TULIP"]]
