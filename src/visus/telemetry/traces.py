"""Traces, opt-in: the OpenTelemetry SDK set up from the standard ``OTEL_*`` variables.

Off by default. :func:`configure` (every ``visus`` command that runs agents or serves
calls it at start) turns traces on when the environment asks for them, as the SDK's own
auto-configuration reads it: ``OTEL_TRACES_EXPORTER`` names an exporter other than
``none`` (``otlp``, ``console``), or an OTLP endpoint is set
(``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); the exporter
reads its endpoint, headers and protocol itself, ``OTEL_SERVICE_NAME`` names the
service (default ``visus``), ``OTEL_SDK_DISABLED=true`` keeps everything off. A host
process that installed its own tracer provider (Logfire, ``opentelemetry-instrument``)
is used as it is. Text content (messages, tool arguments and results) is recorded only
with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``, the switch the
OpenTelemetry GenAI instrumentations read; images are always references by digest.

Off, :func:`span` returns one shared context manager whose :class:`Span` does nothing:
the SDK is never imported and no attribute is built (``python -m benchmarks proxy`` and
``tether`` measure it).

Example:
    >>> configure({})  # nothing asked for
    False
    >>> with span("chat reference", {"gen_ai.operation.name": "chat"}) as s:
    ...     s.recording
    False
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from visus.record.messages import AssistantMessage, Message, Part, Usage
from visus.telemetry import names
from visus.telemetry.parts import (
    AttrValue,
    TokenCount,
    messages_attribute,
    output_attribute,
    stop_name,
    view_attributes,
)

__all__ = [
    "INSTALL_HINT",
    "OFF",
    "Span",
    "capture_content",
    "configure",
    "current",
    "enabled",
    "span",
    "use",
]

INSTALL_HINT = (
    "traces need the OpenTelemetry SDK: pip install -e '.[otel]' in the visus checkout "
    "(or unset OTEL_TRACES_EXPORTER and the OTLP endpoint variables)"
)
_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


@dataclass(slots=True)
class _State:
    tracer: Any = None  # an opentelemetry Tracer; None: traces off
    content: bool = False


_STATE = _State()


class Span:
    """One live span: a turn, a model call or a tool call."""

    __slots__ = ("_open", "_span")

    recording = True

    def __init__(self, span: Any) -> None:
        self._span = span
        self._open = False

    def keep_open(self) -> None:
        """Let the span outlive its ``with`` block (a reply still streaming): whoever
        called this ends it with :meth:`end`. An exception in the block ends it anyway."""
        self._open = True

    def end(self) -> None:
        """End the span (once: later calls do nothing)."""
        if self._span.is_recording():
            self._span.end()

    def set(self, attributes: Mapping[str, AttrValue]) -> None:
        self._span.set_attributes(attributes)

    def event(self, name: str, attributes: Mapping[str, AttrValue]) -> None:
        self._span.add_event(name, attributes)

    def usage(self, usage: Usage | None) -> None:
        """A step's (or a turn's) tokens and cost."""
        if usage is not None:
            self.set(
                {
                    names.INPUT_TOKENS: usage.input_tokens,
                    names.OUTPUT_TOKENS: usage.output_tokens,
                    names.CACHE_READ_TOKENS: usage.cache_read_tokens,
                    names.CACHE_WRITE_TOKENS: usage.cache_write_tokens,
                    names.COST_USD: usage.cost_usd,
                }
            )

    def request(self, messages: Sequence[Message], system: str | None) -> None:
        """What a model call sends: its messages when content is captured (images by
        reference either way: a request without content lists no messages at all)."""
        if _STATE.content:
            self.set({names.INPUT_MESSAGES: messages_attribute(messages, content=True)})
            if system:
                instructions = [{"type": "text", "content": system}]
                self.set({names.SYSTEM_INSTRUCTIONS: _json(instructions)})

    def reply(self, reply: AssistantMessage) -> None:
        """What a model call answered: finish reason, usage, the reply's content."""
        self.usage(reply.usage)
        if reply.stop_reason is not None:
            self.set({names.FINISH_REASONS: [stop_name(reply.stop_reason)]})
        if reply.model:
            self.set({names.RESPONSE_MODEL: reply.model})
        if _STATE.content:
            self.set({names.OUTPUT_MESSAGES: output_attribute(reply, content=True)})

    def tool_outcome(
        self, parts: Sequence[Part], *, is_error: bool, tokens: TokenCount | None = None
    ) -> None:
        """A tool call's result: a view's source, region, size, digest and tokens."""
        self.set(view_attributes(parts, tokens))
        if is_error:
            self.set({names.ERROR_TYPE: "tool_error"})
        if _STATE.content:
            texts = [p.text for p in parts if p.kind == "text"]
            self.set({names.TOOL_RESULT: "\n".join(texts)})


class _Off(Span):
    """What every hook gets while traces are off: it does nothing."""

    __slots__ = ()

    recording = False

    def keep_open(self) -> None:
        pass

    def end(self) -> None:
        pass

    def set(self, attributes: Mapping[str, AttrValue]) -> None:
        pass

    def event(self, name: str, attributes: Mapping[str, AttrValue]) -> None:
        pass

    def usage(self, usage: Usage | None) -> None:
        pass

    def request(self, messages: Sequence[Message], system: str | None) -> None:
        pass

    def reply(self, reply: AssistantMessage) -> None:
        pass

    def tool_outcome(
        self, parts: Sequence[Part], *, is_error: bool, tokens: TokenCount | None = None
    ) -> None:
        pass


OFF: Span = _Off(None)
_OFF_CONTEXT: AbstractContextManager[Span] = contextlib.nullcontext(OFF)


def _json(value: object) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def enabled() -> bool:
    """Whether traces are on."""
    return _STATE.tracer is not None


def capture_content() -> bool:
    """Whether text content goes into spans (the operator's ``CAPTURE_MESSAGE_CONTENT``)."""
    return _STATE.tracer is not None and _STATE.content


def span(
    name: str, attributes: Mapping[str, AttrValue], *, client: bool = False
) -> AbstractContextManager[Span]:
    """A span named ``name`` around the ``with`` block, current for what runs in it (a
    model call's span is the child of its turn's). An exception ending the block sets
    ``error.type`` (its class name) and the error status. A span whose block called
    :meth:`Span.keep_open` ends when its holder says (:meth:`Span.end`), still current
    only inside the block. Traces off: a no-op."""
    if _STATE.tracer is None:
        return _OFF_CONTEXT
    return _live(name, attributes, client)


@contextlib.contextmanager
def _live(name: str, attributes: Mapping[str, AttrValue], client: bool) -> Iterator[Span]:
    from opentelemetry.trace import SpanKind, Status, StatusCode

    from visus.telemetry.logs import request_id

    kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
    rid = request_id()
    if rid is not None:
        attributes = {**attributes, names.REQUEST_ID: rid}
    with _STATE.tracer.start_as_current_span(
        name,
        kind=kind,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
        end_on_exit=False,
    ) as live:
        held = Span(live)
        try:
            yield held
        except BaseException as e:
            # The class only: a message may quote what the operator keeps out of traces.
            live.set_attribute(names.ERROR_TYPE, type(e).__name__)
            live.set_status(Status(StatusCode.ERROR, type(e).__name__))
            live.end()
            raise
        if not held._open:
            live.end()


def current() -> Span:
    """The span the calling code runs in (the no-op one when traces are off or none is)."""
    if _STATE.tracer is None:
        return OFF
    from opentelemetry import trace

    live = trace.get_current_span()
    return Span(live) if live.is_recording() else OFF


def use(tracer_provider: Any | None, *, content: bool = False) -> None:
    """Send spans to ``tracer_provider`` (an SDK ``TracerProvider``; None: traces off),
    recording text content when ``content``. Tests use it with an in-memory exporter.
    """
    if tracer_provider is None:
        _STATE.tracer, _STATE.content = None, False
        return
    _STATE.tracer = tracer_provider.get_tracer("visus")
    _STATE.content = content


def configure(environ: Mapping[str, str] | None = None) -> bool:
    """Turn traces on as the ``OTEL_*`` environment asks (see the module docstring);
    True when they are on. Raises ImportError with the install hint when the
    environment asks for traces and the SDK is missing."""
    env = os.environ if environ is None else environ
    content = env.get(_CONTENT, "").strip().lower() in ("true", "1")
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        use(None)
        return False
    exporters = [e.strip() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()]
    asked = [e for e in exporters if e != "none"] or (
        ["otlp"] if not exporters and any(env.get(k) for k in _ENDPOINTS) else []
    )
    if not asked:
        host = _host_provider()
        use(host, content=content)
        return host is not None
    use(_provider(asked, env), content=content)
    return True


def _host_provider() -> Any | None:
    """A tracer provider the host process installed, if any (never imports the API)."""
    import sys

    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    # The API's placeholder until someone sets one: nothing would be exported.
    return (
        None
        if type(provider).__name__ in ("ProxyTracerProvider", "NoOpTracerProvider")
        else provider
    )


def _provider(exporters: Sequence[str], env: Mapping[str, str]) -> Any:
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e
    named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    provider = TracerProvider(resource=Resource.create({} if named else {"service.name": "visus"}))
    for name in exporters:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name, env)))
    atexit.register(provider.shutdown)  # what is still batched leaves before the process
    return provider


def _exporter(name: str, env: Mapping[str, str]) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name != "otlp":
        raise ImportError(f"OTEL_TRACES_EXPORTER={name!r}: visus sends traces by otlp or console")
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    try:
        # gRPC needs grpcio (not in visus[otel]): an operator who asks installs it.
        grpc = "opentelemetry.exporter.otlp.proto.grpc.trace_exporter"
        http = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
        module = importlib.import_module(grpc if protocol == "grpc" else http)
    except ImportError as e:
        hint = "pip install opentelemetry-exporter-otlp-proto-grpc" if protocol == "grpc" else ""
        raise ImportError(hint or INSTALL_HINT) from e
    return module.OTLPSpanExporter()
