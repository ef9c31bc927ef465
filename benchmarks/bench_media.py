"""visus.media: view-equivalent ``load()`` of five sources fitted for a Claude model.

Each case runs in a fresh subprocess (so one case's allocations cannot hide
another's): imports, read the input, one warm-up call, then one measured call for peak memory
(the kernel's peak-RSS mark ``VmHWM``, reset just before the call, minus the
resident size before it; Pillow's C allocations are invisible to tracemalloc) and
``_REPEATS`` timed calls (median).

Baseline, same run: the plain Pillow path (open, convert RGB, thumbnail LANCZOS to the
same size, save in the same format). PDF and SVG baselines render at a fixed
resolution (300 dpi; the SVG's own canvas) and then shrink; text has no baseline.

Targets: the 12 MP JPEG at least 2.5x faster than its baseline, and its peak memory
under half the full-size RGB buffer (12e6 * 3 bytes / 2 = 18 MB).
"""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

_REPEATS = 5
_PROFILE = {"max_edge": 1568, "max_pixels": 1_150_000, "max_bytes": 5 * 1024 * 1024}

_CHILD = r"""
import gc, io, json, statistics, sys, time
mode, kind, path = sys.argv[1], sys.argv[2], sys.argv[3]
profile_args = json.loads(sys.argv[4])
repeats = int(sys.argv[5])
from PIL import Image
from visus.media import Profile, load
import pypdfium2 as pdfium
import resvg_py

profile = Profile(**profile_args)
data = open(path, "rb").read()

def fitted_box(w, h):
    from visus.media import target_size
    return target_size(w, h, profile.max_edge, profile.max_pixels)

def baseline():
    if kind in ("jpeg", "png"):
        im = Image.open(io.BytesIO(data)).convert("RGB")
        im.thumbnail(fitted_box(*im.size), Image.Resampling.LANCZOS)
    elif kind == "pdf":
        doc = pdfium.PdfDocument(data)
        page = doc[0]
        bitmap = page.render(scale=300 / 72)
        im = bitmap.to_pil().convert("RGB")
        bitmap.close(); page.close(); doc.close()
        im.thumbnail(fitted_box(*im.size), Image.Resampling.LANCZOS)
    elif kind == "svg":
        im = Image.open(io.BytesIO(resvg_py.svg_to_bytes(svg_string=data.decode())))
        im = im.convert("RGB")
        im.thumbnail(fitted_box(*im.size), Image.Resampling.LANCZOS)
    else:
        raise SystemExit("no baseline")
    out = io.BytesIO()
    if kind == "jpeg":
        im.save(out, "JPEG", quality=85)
    else:
        im.save(out, "PNG")
    return im.size, len(out.getvalue())

def visus():
    f = load(data, profile=profile, name="module.py" if kind == "text" else None)
    return (f.width, f.height), f.size

run = visus if mode == "visus" else baseline
def status(field):
    with open("/proc/self/status") as f:
        line = next(l for l in f if l.startswith(field + ":"))
    return int(line.split()[1]) * 1024

run()  # warm-up: lazy plugin imports and first-call caches are not per-call memory
gc.collect()
# Reset the peak-RSS mark (VmHWM) so it measures this call only; ru_maxrss would
# also count the parent's pages from before exec.
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
rss_before = status("VmRSS")
size, nbytes = run()
peak = status("VmHWM") - rss_before
times = []
for _ in range(repeats):
    t = time.perf_counter(); run(); times.append(time.perf_counter() - t)
median = statistics.median(times)
print(json.dumps({"seconds": median, "peak": peak, "size": size, "bytes": nbytes}))
"""


def _photo(w: int, h: int) -> bytes:
    from PIL import Image, ImageFilter

    rng = random.Random(12)
    noise = Image.frombytes("RGB", (w // 4, h // 4), rng.randbytes(w * h * 3 // 16))
    noise = noise.resize((w, h), Image.Resampling.BICUBIC).filter(ImageFilter.GaussianBlur(1))
    grad = Image.linear_gradient("L").resize((w, h))
    base = Image.merge("RGB", (grad, grad.transpose(Image.Transpose.FLIP_LEFT_RIGHT), grad))
    fine = Image.frombytes("RGB", (w, h), rng.randbytes(w * h * 3))
    im = Image.blend(Image.blend(base, noise, 0.5), fine, 0.08)
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _screenshot(w: int, h: int) -> bytes:
    from PIL import Image, ImageDraw, ImageFont

    im = Image.new("RGB", (w, h), (246, 247, 249))
    d = ImageDraw.Draw(im)
    d.rectangle((0, 0, w, 60), fill=(36, 41, 47))
    d.rectangle((0, 60, 320, h), fill=(230, 233, 238))
    font = ImageFont.load_default(18)
    for i, y in enumerate(range(90, h - 40, 28)):
        d.text(
            (360, y),
            f"Row {i}: the quick brown fox jumps over the lazy dog {i * 37}",
            fill=(20, 20, 20),
            font=font,
        )
        d.text((20, y), f"Item {i}", fill=(60, 60, 60), font=font)
    d.rectangle((w - 900, 200, w - 100, 700), fill=(52, 120, 246))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def _pdf() -> bytes:
    from matplotlib.backends.backend_pdf import FigureCanvasPdf
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.5, 11))
    FigureCanvasPdf(fig)
    ax = fig.add_subplot(2, 1, 1)
    rng = random.Random(3)
    for k in range(5):
        ax.plot([rng.gauss(0, 1) + k for _ in range(400)], linewidth=0.8, label=f"series {k}")
    ax.legend()
    ax.set_title("Quarterly measurements")
    fig.text(
        0.08,
        0.42,
        "\n".join(f"Line {i}: body text of the report, paragraph {i}." for i in range(30)),
        fontsize=9,
        va="top",
    )
    buf = io.BytesIO()
    fig.savefig(buf, format="pdf")
    return buf.getvalue()


def _svg() -> bytes:
    """A map-like drawing: thousands of small shapes, as exported by drawing tools."""
    rng = random.Random(5)
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="2400" height="1800">']
    while sum(map(len, parts)) < 500_000:
        cx, cy = rng.uniform(0, 2400), rng.uniform(0, 1800)
        points = " ".join(
            f"{cx + rng.uniform(-40, 40):.1f},{cy + rng.uniform(-40, 40):.1f}" for _ in range(6)
        )
        colour = f"#{rng.randrange(0x1000000):06x}"
        parts.append(f'<polygon points="{points}" fill="{colour}" stroke="#333"/>')
    parts.append('<text x="40" y="80" font-size="64">Benchmark SVG</text></svg>')
    return "".join(parts).encode()


def _source() -> bytes:
    lines = []
    for i in range(400):
        lines += [
            f"def handler_{i}(request, *, retries: int = 3) -> dict[str, int]:",
            f'    """Handle request {i} and return counters."""',
            f"    total = sum(item.size for item in request.items if item.kind == {i % 7})",
            f"    return {{'total': total, 'retries': retries, 'id': {i}}}  # handler {i}",
            "",
        ]
    return ("\n".join(lines) + "\n").encode()


def _measure(mode: str, kind: str, path: Path) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, kind, str(path), json.dumps(_PROFILE), str(_REPEATS)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    cases = {
        "jpeg": ("12 MP JPEG photo (4000x3000)", lambda: _photo(4000, 3000)),
        "png": ("4K PNG screenshot (3840x2160)", lambda: _screenshot(3840, 2160)),
        "pdf": ("PDF page (letter, chart + text)", _pdf),
        "svg": ("~500 KB SVG (2400x1800)", _svg),
        "text": ("2000-line source file", _source),
    }
    print(f"profile: {_PROFILE}; median of {_REPEATS} runs; peak = VmHWM - VmRSS before")
    print(
        f"{'case':34} {'visus':>9} {'baseline':>9} {'ratio':>6} {'peak':>9} {'base peak':>9}"
        "  output"
    )
    results: dict[str, tuple[dict[str, object], dict[str, object] | None]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind, (label, make) in cases.items():
            path = Path(tmp) / kind
            data = make()
            path.write_bytes(data)
            mine = _measure("visus", kind, path)
            base = None if kind == "text" else _measure("baseline", kind, path)
            results[kind] = (mine, base)
            t = float(mine["seconds"])  # type: ignore[arg-type]
            peak = int(mine["peak"]) / 1e6  # type: ignore[call-overload]
            if base is not None:
                bt = float(base["seconds"])  # type: ignore[arg-type]
                bpeak = int(base["peak"]) / 1e6  # type: ignore[call-overload]
                cols = f"{bt * 1000:8.0f}ms {bt / t:5.1f}x {peak:7.1f}MB {bpeak:7.1f}MB"
            else:
                cols = f"{'-':>9} {'-':>6} {peak:7.1f}MB {'-':>9}"
            size = mine["size"]
            print(
                f"{label + f' [{len(data) // 1024} KB]':34} {t * 1000:7.0f}ms {cols}  "
                f"{size[0]}x{size[1]} {int(mine['bytes']) // 1024} KB",  # type: ignore[index,call-overload]
                flush=True,
            )
    jpeg, jpeg_base = results["jpeg"]
    assert jpeg_base is not None
    ratio = float(jpeg_base["seconds"]) / float(jpeg["seconds"])  # type: ignore[arg-type]
    peak = int(jpeg["peak"])  # type: ignore[call-overload]
    half = 12_000_000 * 3 // 2
    print(f"target 12 MP JPEG >= 2.5x faster: {ratio:.1f}x {'OK' if ratio >= 2.5 else 'MISSED'}")
    print(
        f"target 12 MP JPEG peak < {half / 1e6:.0f} MB: {peak / 1e6:.1f} MB "
        f"{'OK' if peak < half else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
