"""The reference server's prompt caching, as each provider documents it, over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from visus.reference.cache import Block, PromptCache
from visus.reference.server import serve_in_background

LONG = "The quick brown fox jumps over the lazy dog. " * 120  # ~1350 tokens


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serve_in_background() as base:
        yield base


def _anthropic(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/messages",
        json={"model": "claude-sonnet-4-5", "max_tokens": 64, **body},
        headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
    )


def _turns(n: int, tag: str) -> list[dict[str, Any]]:
    """``n`` alternating messages of a conversation, the last one the user's."""
    roles = ["user", "assistant"] * n
    return [
        {"role": r, "content": [{"type": "text", "text": f"{tag} message {i}"}]}
        for i, r in enumerate(roles[: 2 * (n // 2) + 1])
    ]


def _usage(r: httpx.Response) -> dict[str, int]:
    assert r.status_code == 200, r.text
    u = r.json()["usage"]
    assert isinstance(u, dict)
    return u


def test_anthropic_writes_at_a_breakpoint_then_reads_it() -> None:
    with serve_in_background() as url:
        system = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
        first = _usage(_anthropic(url, {"system": system, "messages": _turns(1, "a")}))
        assert first["cache_read_input_tokens"] == 0
        assert first["cache_creation_input_tokens"] > 1024  # the system prompt, written
        again = _usage(_anthropic(url, {"system": system, "messages": _turns(1, "b")}))
        assert again["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
        assert again["cache_creation_input_tokens"] == 0
        assert again["input_tokens"] < 50  # only what follows the breakpoint
        # a changed byte before the breakpoint ends the cached prefix
        other = [{**system[0], "text": LONG + "!"}]
        changed = _usage(_anthropic(url, {"system": other, "messages": _turns(1, "a")}))
        assert changed["cache_read_input_tokens"] == 0


def test_a_prefix_under_the_model_minimum_is_not_cached(url: str) -> None:
    system = [{"type": "text", "text": "short", "cache_control": {"type": "ephemeral"}}]
    for _ in range(2):
        u = _usage(_anthropic(url, {"system": system, "messages": _turns(1, "m")}))
        assert u["cache_creation_input_tokens"] == u["cache_read_input_tokens"] == 0
    # claude-opus-4-5 needs 4096 tokens: ~1350 are not cached either
    big = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    opus = {"model": "claude-opus-4-5", "system": big, "messages": _turns(1, "m")}
    assert _usage(_anthropic(url, opus))["cache_creation_input_tokens"] == 0


def _marked_last(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [dict(m, content=[dict(b) for b in m["content"]]) for m in messages]
    out[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return out


@pytest.mark.parametrize(("added", "hit"), [(5, True), (25, False)])
def test_anthropic_looks_back_20_blocks_from_a_breakpoint(added: int, hit: bool) -> None:
    with serve_in_background() as url:
        head = [{"role": "user", "content": [{"type": "text", "text": LONG}]}, *_turns(2, "x")[1:]]
        first = _usage(_anthropic(url, {"messages": _marked_last(head)}))
        assert first["cache_creation_input_tokens"] > 1024
        longer = [*head, *_turns(added + 1, "y")[1:]]  # the breakpoint `added` blocks on
        later = _usage(_anthropic(url, {"messages": _marked_last(longer)}))
        assert (later["cache_read_input_tokens"] > 0) is hit


def test_more_than_four_breakpoints_are_refused(url: str) -> None:
    marked = {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
    r = _anthropic(url, {"messages": [{"role": "user", "content": [marked] * 5}]})
    assert r.status_code == 400
    assert "maximum of 4 blocks with cache_control" in r.text


def test_openai_caches_from_1024_tokens_in_steps_of_128(url: str) -> None:
    def ask(text: str, key: str = "k1") -> int:
        r = httpx.post(
            f"{url}/v1/chat/completions",
            json={
                "model": "gpt-4.1",
                "prompt_cache_key": key,
                "messages": [
                    {"role": "system", "content": LONG},
                    {"role": "user", "content": text},
                ],
            },
            headers={"authorization": "Bearer k"},
        )
        assert r.status_code == 200, r.text
        return int(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])

    assert ask("one") == 0  # nothing seen before
    cached = ask("two")
    assert cached >= 1024
    assert cached % 128 == 0
    assert ask("three", key="k2") == 0  # another prompt_cache_key: another cache
    short = httpx.post(
        f"{url}/v1/responses",
        json={"model": "gpt-4.1", "input": "hi"},
        headers={"authorization": "Bearer k"},
    ).json()
    again = httpx.post(
        f"{url}/v1/responses",
        json={"model": "gpt-4.1", "input": "hi"},
        headers={"authorization": "Bearer k"},
    ).json()
    assert short["usage"]["input_tokens_details"]["cached_tokens"] == 0
    assert again["usage"]["input_tokens_details"]["cached_tokens"] == 0  # under 1024 tokens


def test_gemini_reports_implicit_cache_hits(url: str) -> None:
    def ask(text: str) -> dict[str, Any]:
        body = {
            "systemInstruction": {"parts": [{"text": LONG}]},
            "contents": [{"role": "user", "parts": [{"text": text}]}],
        }
        r = httpx.post(
            f"{url}/v1beta/models/gemini-2.5-flash:generateContent",
            json=body,
            headers={"x-goog-api-key": "k"},
        )
        assert r.status_code == 200, r.text
        usage = r.json()["usageMetadata"]
        assert isinstance(usage, dict)
        return usage

    assert "cachedContentTokenCount" not in ask("one")
    assert ask("two")["cachedContentTokenCount"] >= 1024


def test_entries_expire_five_minutes_after_their_last_use() -> None:
    now = [0.0]
    cache = PromptCache(clock=lambda: now[0])
    blocks = [Block(b"head", 2000, breakpoint=True)]
    assert cache.breakpoints("m", blocks, total=2000, min_tokens=1024).write == 2000
    now[0] = 299.0
    assert cache.breakpoints("m", blocks, total=2000, min_tokens=1024).read == 2000
    now[0] = 598.0  # a read refreshed it
    assert cache.breakpoints("m", blocks, total=2000, min_tokens=1024).read == 2000
    now[0] = 1000.0
    assert cache.breakpoints("m", blocks, total=2000, min_tokens=1024).read == 0
    hour = [Block(b"head", 2000, breakpoint=True, ttl=3600.0)]
    cache.breakpoints("m", hour, total=2000, min_tokens=1024)
    now[0] = 1000.0 + 3000.0
    assert cache.breakpoints("m", hour, total=2000, min_tokens=1024).read == 2000
