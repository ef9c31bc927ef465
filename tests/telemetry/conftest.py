"""Spans captured by the OpenTelemetry SDK's own in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from visus.telemetry import traces


class Captured:
    """What a test's code exported, and a switch for content capture."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def on(self, *, content: bool = False) -> None:
        traces.use(self.provider, content=content)

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name.startswith(prefix)]


@pytest.fixture
def captured() -> Iterator[Captured]:
    found = Captured()
    found.on()
    yield found
    traces.use(None)
    found.provider.shutdown()
