"""`GET /metrics`: the run database in Prometheus's text format, read at each scrape."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

__all__ = ["metrics_text"]


class _FeedsCollector(Collector):
    """The console's live event streams: how many are open, runs watched, polls made."""

    def __init__(self, feeds: Any) -> None:
        self._feeds = feeds

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "durable_swarm_console_streams",
            "Live event streams open (capped by serve --max-streams).",
            value=self._feeds.open_streams,
        )
        yield GaugeMetricFamily(
            "durable_swarm_console_watched_runs",
            "Runs with at least one live viewer (one poll reads them all).",
            value=self._feeds.watched_runs,
        )
        yield CounterMetricFamily(
            "durable_swarm_console_polls",
            "Polls of the watched runs (one database query each).",
            value=self._feeds.polls,
        )


class _RunsCollector(Collector):
    """Runs by status, steps by kind and name, model calls, tokens, model and tool latency."""

    def __init__(self, query: Any) -> None:
        self._query = query

    def collect(self) -> Iterator[Metric]:
        runs = GaugeMetricFamily(
            "durable_swarm_runs", "Runs in the database, by status.", labels=["status"]
        )
        for status, n in self._query.status_counts().items():
            runs.add_metric([status], n)
        yield runs

        steps = CounterMetricFamily(
            "durable_swarm_steps", "Recorded steps of all runs, by kind and name.",
            labels=["kind", "name"],
        )  # fmt: skip
        failed = CounterMetricFamily(
            "durable_swarm_step_errors", "Recorded steps that failed, by kind and name.",
            labels=["kind", "name"],
        )  # fmt: skip
        model_calls = CounterMetricFamily(
            "durable_swarm_model_calls", "Recorded model calls, by agent.", labels=["agent"]
        )
        latency = SummaryMetricFamily(
            "durable_swarm_step_duration_seconds",
            "Time spent in model and tool steps, by kind and name.",
            labels=["kind", "name"],
        )
        for function_name, n, errors, seconds in self._query.step_totals():
            kind, _, name = function_name.partition(":")
            if not name:
                kind, name = "dbos", function_name
            steps.add_metric([kind, name], n)
            failed.add_metric([kind, name], errors)
            if kind == "model":
                model_calls.add_metric([name], n)
            if kind in ("model", "tool"):
                latency.add_metric([kind, name], count_value=n, sum_value=seconds)
        yield from (steps, failed, model_calls, latency)

        tokens = CounterMetricFamily(
            "durable_swarm_tokens", "Tokens of all recorded model calls.", labels=["type"]
        )
        for kind, n in self._query.token_totals().items():
            tokens.add_metric([kind.removesuffix("_tokens")], n)
        yield tokens


class _RetentionCollector(Collector):
    """Runs deleted by retention on the database, by status, and each sweeping process's last
    sweep."""

    def __init__(self, status: Any) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        deleted = CounterMetricFamily(
            "durable_swarm_retention_deleted_runs",
            "Finished runs deleted by retention (sub-agent runs included), by status.",
            labels=["status"],
        )
        for status, n in self._status.deleted.items():
            deleted.add_metric([status], n)
        yield deleted
        swept = GaugeMetricFamily(
            "durable_swarm_retention_last_sweep_timestamp_seconds",
            "When each process applying a retention policy last swept (Unix time).",
            labels=["executor_id"],
        )
        for sweeper in self._status.sweepers:
            if sweeper.swept_at is not None:
                swept.add_metric([sweeper.executor_id], sweeper.swept_at.timestamp())
        yield swept


def metrics_text(query: Any, feeds: Any = None, retention: Any = None) -> bytes:
    """The metrics of the run database behind `query` (a `RunQuery`), of retention on it
    (`retention`, a `RetentionStatus`, when given) and of the console's live event streams
    (`feeds`, a `RunFeeds`, when given), in Prometheus's text exposition format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_RunsCollector(query))
    if retention is not None:
        registry.register(_RetentionCollector(retention))
    if feeds is not None:
        registry.register(_FeedsCollector(feeds))
    return generate_latest(registry)
