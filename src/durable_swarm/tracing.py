"""OpenTelemetry spans for runs, following the GenAI semantic conventions (extra `otel`).

When `opentelemetry-api` is installed and the application has set a tracer provider, every run
emits:

* `invoke_agent <agent>` for the run (`gen_ai.operation.name="invoke_agent"`,
  `gen_ai.agent.name`, `gen_ai.conversation.id` = the run id of a durable run); handoffs are
  events on it (`durable_swarm.handoff`, with `from`, `to`, `rule` and `reason`);
* `chat <model>` for each model call (`gen_ai.request.model`, `gen_ai.response.model`,
  `gen_ai.response.id`, `gen_ai.response.finish_reasons`, `gen_ai.usage.input_tokens`,
  `gen_ai.usage.output_tokens`, and `durable_swarm.cost_usd` when the price is known);
* `execute_tool <tool>` for each tool call (`gen_ai.tool.name`, `gen_ai.tool.call.id`,
  `gen_ai.tool.type="function"`).

Message contents (`gen_ai.input.messages`, `gen_ai.output.messages`, tool arguments and results)
are recorded only when `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` (the name is
`CAPTURE_CONTENT_ENV`).

A durable run stores its trace context with the run, so an execution resumed after a crash (or
`resume`) continues the same trace; a step replayed from the log emits no second span (spans
are made inside the steps, which a replay does not run). Without `opentelemetry-api`, or
without a tracer provider, none of this costs more than a check per run.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "ChatSpan",
    "Run",
    "chat",
    "current_traceparent",
    "enabled",
    "record_completion",
    "start_run",
    "tool",
    "tool_result",
]

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_TRACER_NAME = "durable_swarm"

_trace: Any = None  # `opentelemetry.trace`, once the application has imported it


def enabled() -> bool:
    """Whether runs emit spans: `opentelemetry-api` is installed and a tracer provider is set.

    OpenTelemetry is never imported here: an application that set a tracer provider has
    imported `opentelemetry.trace` itself, and one that did not pays nothing for it.
    """
    global _trace
    if _trace is None:
        _trace = sys.modules.get("opentelemetry.trace")
        if _trace is None:
            return False
    provider = _trace.get_tracer_provider()
    return not isinstance(provider, (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider))


def _propagator() -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator()


def _capture_content() -> bool:
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in ("1", "true", "yes")


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


class Run:
    """The span of one run (one execution of it), and the spans of its model and tool calls."""

    def __init__(self, span: Any) -> None:
        self.span = span
        self._context = _trace.set_span_in_context(span)

    @property
    def traceparent(self) -> str:
        """This run span's W3C `traceparent`, as stored with a durable run."""
        carrier: dict[str, str] = {}
        _propagator().inject(carrier, context=self._context)
        return carrier.get("traceparent", "")

    @contextmanager
    def chat(self, request: Mapping[str, Any]) -> Iterator[ChatSpan]:
        """A `chat` span around one model call made with `request` (not made the current span:
        a streamed call yields its chunks to the caller while it is open)."""
        model = str(request.get("model"))
        tracer = _trace.get_tracer(_TRACER_NAME)
        span = tracer.start_span(
            f"chat {model}", context=self._context, kind=_trace.SpanKind.CLIENT
        )
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.provider.name", "openai")
        span.set_attribute("gen_ai.request.model", model)
        if _capture_content():
            span.set_attribute("gen_ai.input.messages", _json(request.get("messages")))
        try:
            yield ChatSpan(span)
        except BaseException as e:
            _record_error(span, e)
            raise
        finally:
            span.end()

    @contextmanager
    def tool(self, call: Mapping[str, Any]) -> Iterator[Any]:
        """An `execute_tool` span around one tool call."""
        function = call.get("function") or {}
        name = str(function.get("name"))
        tracer = _trace.get_tracer(_TRACER_NAME)
        with tracer.start_as_current_span(f"execute_tool {name}", context=self._context) as span:
            span.set_attribute("gen_ai.operation.name", "execute_tool")
            span.set_attribute("gen_ai.tool.name", name)
            span.set_attribute("gen_ai.tool.type", "function")
            if call.get("id"):
                span.set_attribute("gen_ai.tool.call.id", str(call["id"]))
            if _capture_content():
                span.set_attribute("gen_ai.tool.call.arguments", str(function.get("arguments")))
            yield span

    def handoff(self, transition: Mapping[str, Any]) -> None:
        """A handoff, as an event on the run span."""
        attributes = {k: str(v) for k, v in transition.items() if v is not None}
        self.span.add_event("durable_swarm.handoff", attributes)

    def end(self, error: BaseException | None = None) -> None:
        """End the run span (with the error, if the run failed)."""
        if error is not None:
            _record_error(self.span, error)
        self.span.end()


class ChatSpan:
    """The span of one model call: what came back is recorded with `response`."""

    def __init__(self, span: Any) -> None:
        self.span = span

    def response(
        self,
        *,
        model: str | None,
        response_id: str | None,
        finish_reason: str | None,
        usage: Mapping[str, Any] | None,
        cost_usd: float | None,
        message: Mapping[str, Any] | None = None,
    ) -> None:
        """Record the response: its model, id, finish reason, token usage and cost."""
        span = self.span
        if model:
            span.set_attribute("gen_ai.response.model", model)
        if response_id:
            span.set_attribute("gen_ai.response.id", response_id)
        if finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])
        if usage:
            span.set_attribute("gen_ai.usage.input_tokens", int(usage.get("prompt_tokens") or 0))
            span.set_attribute(
                "gen_ai.usage.output_tokens", int(usage.get("completion_tokens") or 0)
            )
        if cost_usd is not None:
            span.set_attribute("durable_swarm.cost_usd", cost_usd)
        if message is not None and _capture_content():
            span.set_attribute("gen_ai.output.messages", _json([message]))


@contextmanager
def chat(run: Run | None, request: Mapping[str, Any]) -> Iterator[ChatSpan | None]:
    """`run.chat(request)`, or nothing when the run is not traced."""
    if run is None:
        yield None
        return
    with run.chat(request) as span:
        yield span


def tool_result(span: Any, message: Mapping[str, Any]) -> None:
    """Record a tool's result on its span (only when contents are captured)."""
    if span is not None and _capture_content():
        span.set_attribute("gen_ai.tool.call.result", str(message.get("content")))


def record_completion(
    span: ChatSpan | None,
    completion: Any,
    usage: Mapping[str, Any] | None,
    cost_usd: float | None,
    message: Mapping[str, Any] | None,
) -> None:
    """Record a chat completion (or the last chunk of a stream) on its span, if any."""
    if span is None:
        return
    choices = getattr(completion, "choices", None) or []
    span.response(
        model=getattr(completion, "model", None),
        response_id=getattr(completion, "id", None),
        finish_reason=getattr(choices[0], "finish_reason", None) if choices else None,
        usage=usage,
        cost_usd=cost_usd,
        message=message,
    )


@contextmanager
def tool(run: Run | None, call: Mapping[str, Any]) -> Iterator[Any]:
    """`run.tool(call)`, or nothing when the run is not traced."""
    if run is None:
        yield None
        return
    with run.tool(call) as span:
        yield span


def _record_error(span: Any, error: BaseException) -> None:
    span.set_attribute("error.type", type(error).__qualname__)
    span.record_exception(error)
    span.set_status(_trace.Status(_trace.StatusCode.ERROR, str(error)))


def start_run(
    agent_name: str, *, run_id: str | None = None, traceparent: str | None = None
) -> Run | None:
    """Start the span of a run on `agent_name` (None when tracing is off).

    Its parent is `traceparent` when given (the context stored with a durable run, so a resumed
    execution joins the run's trace), else the caller's current span.
    """
    if not enabled():
        return None
    context = None
    if traceparent:
        context = _propagator().extract({"traceparent": traceparent})
    tracer = _trace.get_tracer(_TRACER_NAME)
    span = tracer.start_span(f"invoke_agent {agent_name}", context=context)
    span.set_attribute("gen_ai.operation.name", "invoke_agent")
    span.set_attribute("gen_ai.agent.name", agent_name)
    if run_id:
        span.set_attribute("gen_ai.conversation.id", run_id)
    return Run(span)


def current_traceparent() -> str | None:
    """The caller's current span as a `traceparent` (None when tracing is off or no span)."""
    if not enabled():
        return None
    span = _trace.get_current_span()
    if not span.get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _propagator().inject(carrier)
    return carrier.get("traceparent")
