"""What an operator sees of a running visus: traces, metrics, logs and the savings ledger.

- :mod:`~visus.telemetry.traces`: spans in the OpenTelemetry GenAI conventions, opt-in
  (``visus[otel]``, the standard ``OTEL_*`` variables); images by digest, never bytes.
- :mod:`~visus.telemetry.metrics`: Prometheus text at ``/metrics`` (``prometheus_client``).
- :mod:`~visus.telemetry.logs`: text or JSON lines with the request id, redacted.
- :mod:`~visus.telemetry.seams`: the hooks the agent and the servers call.
- :mod:`~visus.telemetry.ledger`: what ``visus proxy`` saved, per model and day, priced.

Nothing here imports a surface: the agent, tether, the proxy and the integrations call
in, and each server registers what only it knows (:class:`~visus.telemetry.metrics.Snapshot`).

Example:
    >>> from visus import telemetry
    >>> telemetry.traces.enabled()
    False
"""

from __future__ import annotations

from visus.telemetry import logs, metrics, seams, traces

__all__ = ["logs", "metrics", "seams", "traces"]
