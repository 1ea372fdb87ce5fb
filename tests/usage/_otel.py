"""One OpenTelemetry SDK tracer provider for this test process, exporting to memory.

OpenTelemetry lets a process set its global tracer provider once, so every test that reads spans
shares `EXPORTER` (and clears it first); once installed, runs of later tests are traced too.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

EXPORTER = InMemorySpanExporter()
_installed: list[TracerProvider] = []


def install() -> InMemorySpanExporter:
    """Set the global tracer provider (once) and return the cleared exporter."""
    if not _installed:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
        _installed.append(provider)
    assert trace.get_tracer_provider() is _installed[0], "another tracer provider was set"
    EXPORTER.clear()
    return EXPORTER


def spans(name_prefix: str = "") -> list[ReadableSpan]:
    """The finished spans whose name starts with `name_prefix`, in the order they ended."""
    return [s for s in EXPORTER.get_finished_spans() if s.name.startswith(name_prefix)]


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})
