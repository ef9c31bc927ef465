"""What a load balancer and a scraper ask a server: ``/healthz``, ``/readyz`` and
``/metrics`` (Prometheus text).

- ``GET /healthz``: 200, no body, whenever the process answers.
- ``GET /readyz``: 200, no body, when the replica should get new work: not draining (a
  replica asked to stop answers 503 for ``limits.DRAIN_SECONDS`` while it still takes
  turns, then stops), its store answers (a PostgreSQL ping within
  ``READY_STORE_SECONDS``; timed into ``visus_store_seconds``) and, on a shared store,
  its turn worker runs; else 503 with ``Retry-After``, no body either (a probe learns
  nothing else).
- ``GET /metrics``: the process's metrics and this server's state (open streams, rings,
  instances, turns running). It needs the token like any route unless the operator
  opened it (``--open-metrics``).

Both probes are public (no token) and never read a request body.

Example:
    >>> sorted(r.path for r in routes)
    ['/healthz', '/metrics', '/readyz']
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from visus.telemetry import metrics

__all__ = ["PROBES", "READY_STORE_SECONDS", "metrics_endpoint", "ready", "routes", "state_metrics"]

#: The probes, served without the token.
PROBES = frozenset({"/healthz", "/readyz"})
#: Seconds a readiness probe waits for the store before saying not ready.
READY_STORE_SECONDS = 2.0


async def healthz(request: Request) -> Response:
    """The process answers."""
    return Response(status_code=200)


async def ready(state: Any) -> bool:
    """Whether a server (its ``app.state``) should get new work now."""
    if getattr(state, "draining", False):
        return False
    registry = getattr(state, "registry", None)
    if registry is None or not registry.shared:
        return True
    worker = registry.worker
    if worker is None or not worker.alive:
        return False
    store: Any = registry.store
    started = time.perf_counter()
    outcome = "error"
    try:
        await asyncio.wait_for(store.ping(), READY_STORE_SECONDS)
        outcome = "ok"
    except Exception:  # unreachable, or too slow: either way, no new work here
        return False
    finally:
        elapsed = time.perf_counter() - started
        metrics.STORE_SECONDS.labels(op="ping", outcome=outcome).observe(elapsed)
    return True


async def readyz(request: Request) -> Response:
    """Ready for new work (see the module docstring)."""
    if await ready(request.app.state):
        return Response(status_code=200)
    return Response(status_code=503, headers={"Retry-After": "1"})


def state_metrics(state: Any) -> Iterator[metrics.Metric]:
    """A tether server's state at a scrape: open streams, rings, instances, turns."""
    registry = state.registry
    instances = list(registry)
    rings = [i.ring for i in instances if hasattr(i.ring, "bytes")]  # in-memory rings
    yield metrics.gauge(
        "visus_open_streams", "SSE streams open now", [({}, float(state.open_streams))]
    )
    yield metrics.gauge("visus_instances", "Instances this replica holds", [({}, len(instances))])
    yield metrics.gauge(
        "visus_ring_frames", "Frames held in this process's rings", [({}, sum(map(len, rings)))]
    )
    yield metrics.gauge(
        "visus_ring_bytes",
        "Bytes held in this process's rings",
        [({}, sum(r.bytes for r in rings))],
    )
    worker = registry.worker
    yield metrics.gauge(
        "visus_turn_worker",
        "This replica's turn worker (shared store): alive (1/0) and turns running",
        [
            ({"state": "alive"}, float(worker is None or worker.alive)),
            ({"state": "running"}, float(worker.running if worker is not None else 0)),
        ],
    )
    yield metrics.gauge(
        "visus_ready",
        "1 while /readyz would say ready but for the store",
        [({}, float(not getattr(state, "draining", False)))],
    )


async def metrics_endpoint(request: Request) -> Response:
    """The process's metrics and this server's own (``app.state.metrics``)."""
    own = getattr(request.app.state, "metrics", None)
    body = metrics.exposition(*(() if own is None else (own,)))
    return Response(body, media_type=metrics.CONTENT_TYPE)


routes = [
    Route("/healthz", healthz, methods=["GET", "HEAD"]),
    Route("/readyz", readyz, methods=["GET", "HEAD"]),
    Route("/metrics", metrics_endpoint, methods=["GET"]),
]
