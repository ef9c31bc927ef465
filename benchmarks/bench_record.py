"""Record and retention costs.

1. JSONL bytes per stored image: a view result holding a 10 KB image and one holding a
   10 MB image are appended to a session log; the bytes each line adds must not depend
   on the image's size (the log holds a reference, never pixels). Baselines in the
   same run: the same tool result without its image, and the line the image would
   cost if it were stringified into the log as base64.
2. Retention cost: ``model_view`` (default window) over a 2000-message session with
   400 viewed images against one of the same length with 40.
3. Loading those sessions from disk, with the blob-presence check.

Run: ``.venv/bin/python -m benchmarks record``
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import io
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from PIL import Image

from visus.record.blobs import FileBlobStore, MemoryBlobStore
from visus.record.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    PerceptionOrigin,
    TextPart,
    ToolCall,
    ToolResult,
    UserMessage,
)
from visus.record.sessions import SessionStore
from visus.retention import model_view

KB = 1024
MB = 1024 * 1024


def _noise_png(target_bytes: int) -> tuple[bytes, int, int]:
    """A PNG of random RGB pixels close to ``target_bytes`` (noise does not compress)."""
    side = max(8, int((target_bytes / 3) ** 0.5))
    img = Image.frombytes("RGB", (side, side), os.urandom(side * side * 3))
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=1)
    return buf.getvalue(), side, side


def _view_result(turn: int, image: ImagePart | None) -> ToolResult:
    # Realistic ids: providers hand out call ids of ~30 characters.
    parts: tuple[TextPart | ImagePart, ...] = (TextPart(f"Viewed screenshots/step-{turn}.png"),)
    if image is not None:
        parts += (image,)
    return ToolResult(f"toolu_01{turn:022d}", "view", parts, turn=turn)


def bytes_per_image() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        blobs = FileBlobStore(root / "blobs")
        store = SessionStore(root / "sessions")
        sid = store.create("bench")
        log = store.path(sid)

        def appended(message: Message) -> int:
            before = log.stat().st_size
            store.append(sid, message)
            return log.stat().st_size - before

        rows = []
        for label, size in (("10 KB", 10 * KB), ("10 MB", 10 * MB)):
            data, w, h = _noise_png(size)
            digest = blobs.put(data, "image/png")
            image = ImagePart(
                digest, "image/png", len(data), w, h, PerceptionOrigin(f"screenshots/{label}.png")
            )
            without = appended(_view_result(7, None))
            with_image = appended(_view_result(7, image))
            as_base64 = with_image + len(base64.b64encode(data)) + len(',"data":""')
            rows.append((label, len(data), with_image, with_image - without, as_base64))

        print("(1) JSONL bytes per stored image (one view tool result per line)")
        print(
            f"{'image':>8} {'image bytes':>12} {'line bytes':>11} {'image part':>11} "
            f"{'if base64 inlined':>18}"
        )
        for label, n, line, part, b64 in rows:
            print(f"{label:>8} {n:>12,} {line:>11,} {part:>11,} {b64:>18,}")
        (_, small_n, small_line, small_part, _), (_, big_n, big_line, big_part, big_b64) = rows
        print(
            f"    image {big_n / small_n:,.0f}x larger -> line x{big_line / small_line:.3f}, "
            f"image part x{big_part / small_part:.3f}; "
            f"inlining the 10 MB image would cost x{big_b64 / big_line:,.0f} the line"
        )
        target = 300
        verdict = "under" if max(small_part, big_part) < target else "OVER"
        print(
            f"    image part {max(small_part, big_part)} bytes: {verdict} the {target}-byte target"
        )


def _payload(turn: int) -> bytes:
    # Stand-in blob bytes the size of a fitted screenshot (load hashes each one; the
    # hash costs the same whatever the content).
    return f"shot {turn}".encode().ljust(256 * 1024, b".")


def _session(messages: int, images: int) -> list[Message]:
    """``messages`` messages in turns of 5; ``images`` of the turns' view results hold an image."""
    turns = messages // 5
    # Spread evenly, counting back from the last turn, so the current turn views one.
    with_image = {turns - (i * turns) // images for i in range(images)} if images else set()
    out: list[Message] = []
    for t in range(1, turns + 1):
        image = None
        if t in with_image:
            digest = hashlib.sha256(_payload(t)).hexdigest()
            image = ImagePart(
                digest, "image/png", 180_000, 1568, 980, PerceptionOrigin(f"shots/{t}.png")
            )
        out += [
            UserMessage((TextPart(f"step {t}: check the page"),), turn=t),
            AssistantMessage(
                (TextPart("Looking."),),
                (ToolCall(f"c{t}", "view", {"path": f"shots/{t}.png"}),),
                turn=t,
            ),
            _view_result(t, image),
            AssistantMessage((TextPart("The page shows the login form."),), turn=t),
            UserMessage((TextPart("ok"),), turn=t),
        ]
    assert len(out) == messages
    assert sum(isinstance(p, ImagePart) for m in out for p in m.parts) == images
    return out


def _median_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def retention_cost() -> None:
    print("\n(2) model_view, default window, 2000-message session")
    print("    cold: fresh message objects each call (a session just loaded);")
    print("    warm: the same objects as the previous view (the agent loop), median of 50")
    cold: dict[int, float] = {}
    warm: dict[int, float] = {}
    for images in (40, 400):
        record = _session(2000, images)
        view = model_view(record)
        live = sum(isinstance(p, ImagePart) for m in view for p in m.parts)
        copies = [[dataclasses.replace(m) for m in record] for _ in range(20)]
        times = []
        for copy in copies:
            start = time.perf_counter()
            model_view(copy)
            times.append(time.perf_counter() - start)
        cold[images] = statistics.median(times) * 1000
        warm[images] = _median_ms(functools.partial(model_view, record), 50)
        print(
            f"    {images:>4} images: cold {cold[images]:7.3f} ms, warm {warm[images]:7.3f} ms, "
            f"{live} live after retention"
        )
    print(
        f"    400 vs 40 images (x10 images, same live count): cold x{cold[400] / cold[40]:.2f}, "
        f"warm x{warm[400] / warm[40]:.2f}"
    )


def load_cost() -> None:
    print("\n(3) SessionStore.load of the same sessions from disk, with blob check (median of 10)")
    with tempfile.TemporaryDirectory() as tmp:
        store = SessionStore(Path(tmp))
        results = {}
        for images in (40, 400):
            record = _session(2000, images)
            blobs = MemoryBlobStore()
            for m in record:
                if any(isinstance(p, ImagePart) for p in m.parts):
                    blobs.put(_payload(m.turn), "image/png")
            sid = store.create(f"s{images}")
            start = time.perf_counter()
            for m in record:
                store.append(sid, m)
            append_ms = (time.perf_counter() - start) * 1000 / len(record)
            size = store.path(sid).stat().st_size
            ms = _median_ms(functools.partial(store.load, sid, blobs=blobs), 10)
            loaded = store.load(sid, blobs=blobs)
            assert loaded.problems == ()
            assert len(loaded.messages) == 2000
            # Every load reads and hashes each referenced blob once (a bit flip is
            # found at load); 12 loads above (a warm-up, ten timed, one checked).
            assert blobs.reads == 12 * len(blobs)
            results[images] = ms
            print(
                f"    {images:>4} images: {ms:7.2f} ms for {size / 1024:,.0f} KiB "
                f"({size / 2000:.0f} B/message), blob reads {len(blobs)} per load; "
                f"append {append_ms:.2f} ms/message (fsync each)"
            )
        print(f"    400 vs 40 images: x{results[400] / results[40]:.2f}")


def main() -> None:
    bytes_per_image()
    retention_cost()
    load_cost()


if __name__ == "__main__":
    main()
