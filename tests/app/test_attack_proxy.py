"""Issue 33, hostile pass: what a compressed request body holds in `visus proxy`.

The proxy's body budget counts the bytes as sent; a gzip body of 130 KB decodes to
128 MB (``PROXY_MAX_BODY_BYTES`` bounds one), which the proxy decoded, parsed and then
held, with its parse, for as long as the upstream took to answer: four such requests
to an upstream still thinking held about 1 GB of the proxy. What it decodes now counts
against the memory budget while it is edited, and is let go before the forward waits:
only what goes upstream (here the 130 KB as sent) is held meanwhile.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests import hostile
from tests.timing import within

pytestmark = pytest.mark.slow

#: Bodies at once, and what each decodes to: far more, held, than the growth allowed.
BODIES = 4
DECODED = 128 * hostile.MB
#: What the proxy may hold over its idle size while they wait on the upstream (about
#: 1 GB on the old code): the compressed bodies, the allocator's slack.
GROWTH = 200 * hostile.MB


def _bomb() -> bytes:
    text = "x" * (DECODED - 200)
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": text}],
    }
    return gzip.compress(json.dumps(body).encode(), compresslevel=9)


def test_gzip_bodies_waiting_on_the_upstream_hold_only_what_was_sent(tmp_path: Path) -> None:
    bomb = _bomb()
    hold = threading.Event()
    answer = b'{"type": "message", "content": []}'
    with (
        hostile.Recorder(answer, hold=hold) as upstream,
        hostile.proxy(tmp_path, upstream.url) as proxy,
    ):
        before = proxy.rss()
        headers = {
            "x-api-key": "k",
            "anthropic-version": "2023-06-01",
            "content-type": "application/json",
            "content-encoding": "gzip",
        }
        statuses: list[int] = []

        def post() -> None:
            with httpx.Client(base_url=proxy.url, timeout=within(300)) as http:
                statuses.append(
                    http.post("/v1/messages", content=bomb, headers=headers).status_code
                )

        posts = [threading.Thread(target=post) for _ in range(BODIES)]
        try:
            for t in posts:
                t.start()
            deadline = time.monotonic() + within(120)
            while len(upstream.seen) + len(statuses) < BODIES:
                assert time.monotonic() < deadline, "the bodies did not reach the upstream"
                time.sleep(0.2)
            time.sleep(0.5)
            held = proxy.rss() - before
            print(f"held while the upstream thinks: {held / hostile.MB:.0f} MB")  # -s shows it
        finally:
            hold.set()
            for t in posts:
                t.join()
        assert held < GROWTH, f"the proxy held {held / hostile.MB:.0f} MB"
        # Each went on as it came (compressed) or, past the budget, was refused busy.
        assert set(statuses) <= {200, 503}, statuses
        assert 200 in statuses, statuses
        assert all(h.get("content-encoding") == "gzip" for h in upstream.seen), upstream.seen
