"""``visus view`` through the real typer app: JSON shape, exit codes, --out, --root."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import random
import subprocess
import sys
from pathlib import Path

import pypdfium2 as pdfium
import pytest
from PIL import Image
from typer.testing import CliRunner

from visus.cli import app

runner = CliRunner()


@functools.cache
def noise_png(width: int, height: int) -> bytes:
    rng = random.Random(3)
    img = Image.frombytes("RGB", (width, height), rng.randbytes(width * height * 3))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def pdf(pages: int) -> bytes:
    doc = pdfium.PdfDocument.new()
    try:
        for _ in range(pages):
            doc.new_page(200, 300).close()
        buf = io.BytesIO()
        doc.save(buf)
    finally:
        doc.close()
    return buf.getvalue()


def source_code(lines: int) -> bytes:
    return "".join(f"x{i} = {i}\n" for i in range(lines)).encode()


def decode(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data))
    img.load()
    return img


def run(args: list[str]) -> tuple[int, str, str]:
    result = runner.invoke(app, args)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    (r / "shot.png").write_bytes(noise_png(2000, 1000))
    (r / "doc.pdf").write_bytes(pdf(5))
    (r / "code.py").write_bytes(source_code(300))
    return r


def test_json_perception(root: Path) -> None:
    code, out, _ = run(["view", "shot.png", "--json", "--root", str(root)])
    assert code == 0
    payload = json.loads(out)  # exactly one JSON object
    assert payload["ok"] is True
    for key in [
        "media_type",
        "width",
        "height",
        "source_width",
        "source_height",
        "bytes",
        "digest",
        "source_kind",
        "tokens",
    ]:
        assert key in payload
    assert (payload["source_width"], payload["source_height"]) == (2000, 1000)
    assert payload["width"] <= 1568
    assert payload["digest"].startswith("sha256:")
    assert len(payload["digest"]) == len("sha256:") + 64
    assert payload["source_kind"] == "raster"


def test_json_refusal_exit_3(root: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.png").write_bytes(noise_png(40, 30))
    for ref, reason in [("missing.png", "not_found"), ("../outside.png", "outside_reach")]:
        code, out, _ = run(["view", ref, "--json", "--root", str(root)])
        assert code == 3
        payload = json.loads(out)
        assert payload == {"ok": False, "reason": reason, "message": payload["message"]}
        assert payload["message"]


def test_out_writes_the_fitted_image(root: Path, tmp_path: Path) -> None:
    target = tmp_path / "fitted.bin"
    code, out, _ = run(["view", "shot.png", "--json", "--out", str(target), "--root", str(root)])
    assert code == 0
    payload = json.loads(out)
    data = target.read_bytes()
    assert payload["digest"] == "sha256:" + hashlib.sha256(data).hexdigest()
    assert payload["bytes"] == len(data)
    assert decode(data).size == (payload["width"], payload["height"])


def test_page_offset_limit_model(root: Path) -> None:
    code, out, _ = run(["view", "doc.pdf", "--page", "5", "--json", "--root", str(root)])
    assert code == 0
    assert (json.loads(out)["page"], json.loads(out)["page_count"]) == (5, 5)
    code, out, _ = run(["view", "doc.pdf", "--page", "6", "--json", "--root", str(root)])
    assert code == 3
    assert json.loads(out)["reason"] == "invalid_input"
    code, out, _ = run(
        ["view", "code.py", "--offset", "10", "--limit", "20", "--json", "--root", str(root)]
    )
    assert code == 0
    assert (json.loads(out)["line_start"], json.loads(out)["line_end"]) == (11, 30)
    code, out, _ = run(["view", "shot.png", "--model", "gpt-4o", "--json", "--root", str(root)])
    assert json.loads(out)["model"] == "gpt-4o"
    code, out, _ = run(["view", "shot.png", "--model", "mystery", "--json", "--root", str(root)])
    assert code == 2  # not in the catalog: an unknown model (see the typo test)
    local = "openai-compatible:mystery"  # a local server's model: known, but not to see
    code, out, _ = run(["view", "shot.png", "--model", local, "--json", "--root", str(root)])
    assert code == 3
    assert "cannot see images" in json.loads(out)["message"]


def test_no_render(root: Path) -> None:
    code, out, _ = run(["view", "code.py", "--no-render", "--json", "--root", str(root)])
    assert code == 3
    assert json.loads(out)["reason"] == "unsupported_type"


def test_without_root_any_file_the_user_names_opens(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The person at the terminal is the operator (issue 36): their own files open,
    relative or absolute, inside the current directory or not."""
    monkeypatch.chdir(root)
    (tmp_path / "outside.png").write_bytes(noise_png(40, 30))
    for ref in ("shot.png", "../outside.png", str(tmp_path / "outside.png")):
        code, out, _ = run(["view", ref, "--json"])
        assert code == 0, ref
        assert json.loads(out)["ok"] is True
    code, out, _ = run(["view", "missing.png", "--json"])
    assert code == 3
    assert json.loads(out)["reason"] == "not_found"


def test_several_roots(root: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "b.png").write_bytes(noise_png(40, 30))
    args = ["--root", str(root), "--root", str(other), "--json"]
    assert run(["view", str(other / "b.png"), *args])[0] == 0
    assert run(["view", "shot.png", *args])[0] == 0


def test_human_summary(root: Path) -> None:
    code, out, _ = run(["view", "shot.png", "--root", str(root)])
    assert code == 0
    assert "shot.png" in out
    assert "2000x1000 raster" in out
    assert "sha256:" in out
    code, _, err = run(["view", "missing.png", "--root", str(root)])
    assert code == 3
    assert "not_found" in err


def test_console_script_subprocess(root: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "visus.cli", "view", "shot.png", "--json"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0 and "No module named visus.cli.__main__" in proc.stderr:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                "from visus.cli import main; main()",
                "view",
                "shot.png",
                "--json",
            ],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["source_width"] == 2000


def test_out_unwritable_exit_1(root: Path, tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "dir" / "x.png"
    code, out, _ = run(["view", "shot.png", "--json", "--out", str(target), "--root", str(root)])
    assert code == 1
    payload = json.loads(out)
    assert payload["ok"] is False
    assert "cannot write" in payload["message"]


def test_markup_in_names_is_printed_literally(root: Path) -> None:
    (root / "[bold]x.png").write_bytes(noise_png(40, 30))
    code, out, _ = run(["view", "[bold]x.png", "--root", str(root)])
    assert code == 0
    assert "[bold]x.png" in out
    code, _, err = run(["view", "[b]missing[/b].png", "--root", str(root)])
    assert code == 3
    assert "[b]missing[/b].png" in err


# --- sha256: refs within a session ---------------------------------------------------


def _session_with_image(data: Path, sid: str, png: bytes) -> str:
    from visus.record.blobs import FileBlobStore
    from visus.record.messages import AttachmentOrigin, ImagePart, TextPart, UserMessage
    from visus.record.sessions import SessionStore

    digest = FileBlobStore(data / "blobs").put(png, "image/png")
    store = SessionStore(data / "sessions")
    store.create(sid)
    part = ImagePart(digest, "image/png", len(png), 64, 48, AttachmentOrigin("p.png"))
    store.append(sid, UserMessage(parts=(TextPart("look"), part), turn=1))
    return digest


def test_view_by_digest_within_a_session_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    mine = _session_with_image(data, "a", noise_png(64, 48))
    theirs = _session_with_image(data, "b", noise_png(48, 64))
    base = ["view", "--data", str(data), "--json", "--root", str(tmp_path)]

    ok = runner.invoke(app, [*base, f"sha256:{mine[:12]}", "--session", "a"])
    assert ok.exit_code == 0, ok.stdout
    out = json.loads(ok.stdout)
    assert (out["width"], out["height"], out["source"]) == (64, 48, f"sha256:{mine}")

    other = runner.invoke(app, [*base, f"sha256:{theirs}", "--session", "a"])
    assert other.exit_code == 3
    assert json.loads(other.stdout)["reason"] == "not_found"

    no_session = runner.invoke(app, [*base, f"sha256:{mine}"])
    assert no_session.exit_code == 3
    assert "--session" in json.loads(no_session.stdout)["message"]


def test_a_model_typo_is_not_a_blind_one(root: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Issue 34: a model of a known provider is never refused; a name the catalog does
    # not list takes a Claude profile (it sees), and the hint names the listed one (on
    # stderr from a terminal: the logger's last-resort handler; here in caplog).
    code, out, err = run(
        ["view", str(root / "shot.png"), "--root", str(root), "--model", "claude-sonet-4-6"]
    )
    assert code == 0
    said = caplog.text
    assert "claude-sonet-4-6 is not in the catalog (did you mean claude-sonnet-4-6?)" in said
    assert "[[models]]" in said
    assert "cannot see images" not in err + out
    code, out, _ = run(
        ["view", str(root / "shot.png"), "--root", str(root), "--model", "claude-sonnet-4-6"]
    )
    assert code == 0


def test_region_zooms_and_the_zoomed_image_reads_what_the_plain_one_cannot(
    tmp_path: Path,
) -> None:
    from tests.zoomshot import HEIGHT, REGION, WIDTH, WORDS, words_read, write_screen

    write_screen(tmp_path)
    plain, zoomed = tmp_path / "plain.png", tmp_path / "zoomed.png"
    base = ["view", "screen.png", "--root", str(tmp_path)]
    code, out, _ = run([*base, "--out", str(plain)])
    assert code == 0
    assert f"{WIDTH}x{HEIGHT}, sent 1429x804" in out
    assert "zoom: region=[x0,y0,x1,y1]" in out
    assert not set(WORDS) & set(words_read(plain.read_bytes()))
    box = ",".join(map(str, REGION))
    code, out, _ = run([*base, "--region", box, "--json", "--out", str(zoomed)])
    assert code == 0
    payload = json.loads(out)
    assert payload["region"] == REGION
    assert (payload["source_width"], payload["source_height"]) == (WIDTH, HEIGHT)
    assert set(WORDS) <= set(words_read(zoomed.read_bytes()))


@pytest.mark.parametrize(
    ("region", "code", "words"),
    [
        ("0,0,5000,10", 3, "outside the image, which is 2000x1000"),
        ("10,10,5,5", 3, "empty or inverted"),
        ("1,2,3", 2, "--region takes x0,y0,x1,y1"),
        ("a,b,c,d", 2, "--region takes x0,y0,x1,y1"),
    ],
)
def test_a_bad_region_is_refused(root: Path, region: str, code: int, words: str) -> None:
    got, out, err = run(["view", "shot.png", "--region", region, "--json", "--root", str(root)])
    assert got == code
    if code == 3:
        payload = json.loads(out)
        assert payload["reason"] == "invalid_input"
        assert words in payload["message"]
    else:
        assert words in err
