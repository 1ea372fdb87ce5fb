"""Watching the run database as a whole: its retention, and Prometheus metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from ._console import ClientDep, FeedsDep
from ._metrics import metrics_text

router = APIRouter()
"""`/api/retention` and `/metrics`."""


@router.get("/api/retention", tags=["retention"])
def retention(client: ClientDep) -> dict[str, Any]:
    """Retention on the run database: the policies in force, the processes applying them
    (when each last swept, how many runs that deleted) and the runs deleted so far by
    status."""
    return client.retention_status().to_json()


@router.get("/metrics", tags=["metrics"], response_class=Response)
def metrics(client: ClientDep, feeds: FeedsDep) -> Response:
    """Prometheus text format: runs by status, steps, model calls, tokens, latency, runs
    deleted by retention, the model limits shared by the fleet (calls waiting and in
    flight, requests and tokens of the last minute), and the console's live streams
    (open, runs watched, polls)."""
    runs = client.runs
    text = metrics_text(runs.query, feeds, client.retention_status(), limits=runs.limits.snapshot)
    return Response(text, media_type="text/plain; version=0.0.4")
