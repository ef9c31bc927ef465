"""Redteam (issue 23): a client's JSON Schema cannot hold the process.

``vision_analyze``'s ``format`` is the client's, and the answer checked against it is
text a model wrote, which the same client steers (its prompt, or the words in its
image). Python's ``re`` backtracks without bound and holds the GIL while it does:
``"^(a|a)+$"`` against forty ``a`` and a ``!`` would freeze every thread of a
``visus serve`` for hours. Every check here must end within the schema budget, with a
typed refusal, while other threads keep running.
"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.analyze.conftest import FakeClient, word_png
from tests.timing import load_factor, within
from visus import limits
from visus.analyze import AnalyzeResult
from visus.config import VisusConfig
from visus.errors import AnalyzeError
from visus.reference.structured import answer

#: Backtracks without bound in ``re`` and in ``regex`` alike: only a deadline stops it.
SLOW = "^(a|a)+$"
#: Backtracks without bound in ``re``; ``regex`` sees through it.
SLOW_IN_RE = "^(a+)+$"
HOSTILE = "a" * 40 + "!"


def bound() -> float:
    """Wall time a check may take: the schema budget, and slack for a loaded machine."""
    return limits.SCHEMA_MATCH_SECONDS + within(3.0)


def ticks_a_second() -> float:
    """Ticks a second the counting thread must make while a check runs: it makes 100 on
    a quiet machine, fewer when it waits for a core, and none while the check holds the
    GIL."""
    return 20 / min(load_factor(), 4.0)


@contextmanager
def ticking() -> Iterator[list[int]]:
    """A thread counting while the body runs: it stalls if the body holds the GIL."""
    ticks = [0]
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.01):
            ticks[0] += 1

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield ticks
    finally:
        stop.set()
        thread.join()


SCHEMAS: dict[str, tuple[dict[str, Any], str]] = {
    "pattern": (
        {"type": "object", "properties": {"name": {"type": "string", "pattern": SLOW}}},
        f'{{"name": "{HOSTILE}"}}',
    ),
    "patternProperties": (
        {"type": "object", "patternProperties": {SLOW: {"type": "string"}}},
        f'{{"{HOSTILE}": "x"}}',
    ),
    "additionalProperties": (
        {"type": "object", "patternProperties": {SLOW: {}}, "additionalProperties": False},
        f'{{"{HOSTILE}": "x"}}',
    ),
    "propertyNames": (
        {"type": "object", "propertyNames": {"pattern": SLOW}},
        f'{{"{HOSTILE}": "x"}}',
    ),
}


def _analyze(cfg: VisusConfig, schema: dict[str, Any], fake: FakeClient) -> AnalyzeResult:
    """vision_analyze of a picture with ``schema``, the model answering from ``fake``."""
    from visus.analyze import vision_analyze

    return asyncio.run(
        vision_analyze(
            "Answer exactly as asked",
            file_base64=base64.b64encode(word_png("A42")).decode(),
            format=schema,
            config=cfg,
            client=fake,
        )
    )


@pytest.mark.parametrize("case", sorted(SCHEMAS))
def test_a_catastrophic_pattern_on_a_steered_answer_is_refused_within_the_budget(
    cfg: VisusConfig, case: str
) -> None:
    schema, reply = SCHEMAS[case]
    started = time.monotonic()
    with ticking() as ticks, pytest.raises(AnalyzeError, match=r"INVALID_INPUT.*pattern"):
        _analyze(cfg, schema, FakeClient([reply]))
    took = time.monotonic() - started
    assert took < bound(), took
    assert ticks[0] > took * ticks_a_second()  # the other thread ran all along (no GIL held)


def test_a_pattern_only_re_chokes_on_is_checked_as_usual(cfg: VisusConfig) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string", "pattern": SLOW_IN_RE}}}
    started = time.monotonic()
    with pytest.raises(AnalyzeError, match=r"RESPONSE_NOT_JSON.*does not match"):
        _analyze(cfg, schema, FakeClient([f'{{"name": "{HOSTILE}"}}']))
    assert time.monotonic() - started < bound()


def test_a_valid_pattern_still_validates(cfg: VisusConfig) -> None:
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^A[0-9]+$"}}}
    fake = FakeClient(['{"code": "nope"}', '{"code": "A42"}'])
    assert _analyze(cfg, schema, fake).parsed == {"code": "A42"}
    retry = fake.requests[1].messages[-1].parts[0].text  # type: ignore[attr-defined]
    assert "does not match '^A[0-9]+$'" in retry


def test_the_reference_model_answers_a_catastrophic_pattern_within_the_budget() -> None:
    # visus serve's default model runs in-process: its own check of the value it built
    # (forty dots, minLength padding) against the client's pattern held the GIL.
    schema = {"type": "string", "minLength": 40, "pattern": "^(\\.|\\.)+x$"}
    started = time.monotonic()
    with ticking() as ticks:
        reply = answer(schema, [], {})
    took = time.monotonic() - started
    assert "cannot fill this JSON Schema" in reply
    assert "pattern" in reply
    assert took < bound(), took
    assert ticks[0] > took * ticks_a_second()


NODE = {
    "type": "object",
    "required": list("abcdefghij"),
    "properties": {k: {"$ref": "#/$defs/node"} for k in "abcdefghij"},
}
WIDE = {"$defs": {"node": NODE}, "$ref": "#/$defs/node"}
BIG: dict[str, dict[str, Any]] = {
    "long string": {"type": "string", "minLength": 10**9},
    "many items": {"type": "array", "minItems": 10**9, "items": {"type": "integer"}},
    "nested items": {
        "type": "array",
        "minItems": 10_000,
        "items": {"type": "array", "minItems": 10_000, "items": {"type": "integer"}},
    },
    "ten properties, eight deep": WIDE,
}


@pytest.mark.parametrize("case", sorted(BIG))
def test_the_reference_model_builds_no_unbounded_value(case: str) -> None:
    started = time.monotonic()
    reply = answer(BIG[case], [], {})
    assert time.monotonic() - started < bound()
    assert "cannot fill this JSON Schema" in reply
    assert "more than" in reply
