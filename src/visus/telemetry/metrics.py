"""Metrics in Prometheus text format (``prometheus_client``), served at ``/metrics`` by
``visus serve`` and ``visus proxy``.

What the agent and the servers count as they go lives in :data:`REGISTRY`, one per
process (turns by outcome, model-call latency, tool calls, images retention evicted or
deduplicated or a provider refused, HTTP requests by outcome, store latency); what a
server holds at a moment (open streams, rings, workers, the memory budget, the render
lanes, the proxy's savings) is read when scraped, by a :class:`Snapshot` collector the
server registers on its own registry. :func:`exposition` writes both.

Example:
    >>> TURNS.labels(outcome="answer").inc()
    >>> b"visus_turns_total" in exposition()
    True
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "CONTENT_TYPE",
    "HTTP_REQUESTS",
    "IMAGES",
    "MODEL_SECONDS",
    "REGISTRY",
    "STORE_SECONDS",
    "TOOL_CALLS",
    "TURNS",
    "CollectorRegistry",
    "CountRequests",
    "Metric",
    "Snapshot",
    "counter",
    "exposition",
    "gauge",
    "own_registry",
    "streaming",
    "timed",
]

CONTENT_TYPE = CONTENT_TYPE_LATEST

#: The process's own counters (a test's apps share them, as a server's surfaces do).
REGISTRY = CollectorRegistry(auto_describe=True)

TURNS = Counter(
    "visus_turns",
    "Agent turns ended, by outcome (answer, max_tokens, step_limit, error, cancelled)",
    ["outcome"],
    registry=REGISTRY,
)
MODEL_SECONDS = Histogram(
    "visus_model_call_seconds",
    "Model calls of visus's agents: seconds from request to the whole reply",
    ["provider", "model", "outcome"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
    registry=REGISTRY,
)
TOOL_CALLS = Counter(
    "visus_tool_calls",
    "Tool calls of visus's agents, by tool and outcome",
    ["tool", "outcome"],
    registry=REGISTRY,
)
IMAGES = Counter(
    "visus_agent_images",
    "Images in visus's agents' model requests, by what happened to them (fitted: sent "
    "smaller than its source to fit the model; elided: retention evicted it for a "
    "descriptor; deduplicated: a note names an equal live image; refused: the provider "
    "refused it)",
    ["event"],
    registry=REGISTRY,
)
HTTP_REQUESTS = Counter(
    "visus_http_requests",
    "HTTP requests answered, by server, route and outcome (status class)",
    ["server", "route", "outcome"],
    registry=REGISTRY,
)
STORE_SECONDS = Histogram(
    "visus_store_seconds",
    "Round trips to the store (a readiness probe's ping), by outcome",
    ["op", "outcome"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
    registry=REGISTRY,
)


@contextmanager
def timed(histogram: Histogram, **labels: str) -> Iterator[None]:
    """Observe the ``with`` block's seconds (label ``outcome``: ok or error)."""
    started = time.perf_counter()
    outcome = "error"
    try:
        yield
        outcome = "ok"
    finally:
        histogram.labels(**labels, outcome=outcome).observe(time.perf_counter() - started)


Rows = Iterable[tuple[dict[str, str], float]]


def _family(
    kind: type[GaugeMetricFamily | CounterMetricFamily], name: str, doc: str, rows: Rows
) -> Metric:
    listed = list(rows)
    family = kind(name, doc, labels=sorted(listed[0][0]) if listed else [])
    for labels, value in listed:
        family.add_metric([labels[k] for k in sorted(labels)], value)
    return family


def gauge(name: str, doc: str, values: Rows) -> Metric:
    """A gauge family read at scrape time: ``values`` are (labels, value) pairs."""
    return _family(GaugeMetricFamily, name, doc, values)


def counter(name: str, doc: str, values: Rows) -> Metric:
    """A counter family read at scrape time (``name`` without ``_total``)."""
    return _family(CounterMetricFamily, name, doc, values)


class Snapshot(Collector):
    """A collector whose families ``read`` builds when scraped (a server's state)."""

    def __init__(self, read: Callable[[], Iterable[Metric]]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        return list(self._read())


def _process() -> Iterator[Metric]:
    """What every server holds at a moment: its memory budget and render lanes."""
    from visus.budget import MEMORY
    from visus.media import render_lanes

    yield gauge(
        "visus_memory_budget_bytes",
        "The process's memory budget for decodes and request bodies (limits.MEMORY_BUDGET_BYTES)"
        ": its total, the bytes reserved now, the most reserved at once",
        [
            ({"kind": "total"}, MEMORY.total),
            ({"kind": "in_use"}, MEMORY.in_use),
            ({"kind": "peak"}, MEMORY.peak),
        ],
    )
    lanes = render_lanes()
    rows = [
        ({"lane": lane, "state": state}, float(n))
        for lane in ("light", "heavy")
        for state, n in lanes[lane].items()
    ]
    yield gauge(
        "visus_render_workers",
        "Render worker lanes: workers busy and idle, callers waiting, and each lane's cap",
        rows,
    )
    yield counter(
        "visus_render_worker_restarts",
        "Render workers stopped mid-render (a time or memory budget ran out, or the render "
        "moved to the heavy lane) and replaced",
        [({}, float(lanes["pool"]["restarts"]))],
    )


REGISTRY.register(Snapshot(_process))


def own_registry(read: Callable[[], Iterable[Metric]]) -> CollectorRegistry:
    """A server's own registry: the families ``read`` builds when scraped."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Snapshot(read))
    return registry


def exposition(*registries: CollectorRegistry) -> bytes:
    """The process's metrics and ``registries``' in Prometheus text format."""
    return b"".join(generate_latest(r) for r in (REGISTRY, *registries))


async def streaming(holder: Any, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``body`` while counted in ``holder.open_streams`` (a server's streams now)."""
    holder.open_streams += 1
    try:
        async for chunk in body:
            yield chunk
    finally:
        holder.open_streams -= 1


def _route(scope: Scope) -> str:
    """The matched route's template (bounded: never a raw path, which a client picks)."""
    route = scope.get("route")
    path = getattr(route, "path", None) or getattr(route, "path_format", None)
    return path if isinstance(path, str) else "other"


class CountRequests:
    """ASGI middleware counting each HTTP request by route template and status class."""

    def __init__(self, app: ASGIApp, *, server: str) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def seen(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, seen)
        finally:
            outcome = f"{status // 100}xx"
            HTTP_REQUESTS.labels(self.server, _route(scope), outcome).inc()
