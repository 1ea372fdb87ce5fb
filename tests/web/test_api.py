"""The HTTP API against real runs on SQLite and PostgreSQL: a host process runs the agents while
`durable-swarm serve` (a thin client in its own process) lists, shows, answers and steers them."""

from __future__ import annotations

import json
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .conftest import Console, Host, wait_status


def _error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]
    return str(body["error"])


def test_runs_list_filters_searches_pages_and_counts(console: Console, batch: str) -> None:
    page = console.http.get("/api/runs", params={"q": batch}).json()
    assert page["total"] == 4  # the sub-agent's run has no message with the prefix
    assert {r["run_id"] for r in page["runs"]} == {
        f"{batch}-{n}" for n in ("ok", "ask", "pay", "sub")
    }
    ok = next(r for r in page["runs"] if r["run_id"] == f"{batch}-ok")
    assert ok["status"] == "succeeded" and ok["agent"] == "Support"
    assert ok["model_calls"] == 2 and ok["tokens"] > 0
    assert ok["created_at"] and ok["updated_at"]

    waiting = console.http.get(
        "/api/runs", params={"q": batch, "status": "waiting_for_input,waiting_for_approval"}
    ).json()
    assert {r["run_id"] for r in waiting["runs"]} == {f"{batch}-ask", f"{batch}-pay"}
    assert waiting["total"] == 2

    first = console.http.get("/api/runs", params={"q": batch, "limit": 3}).json()
    rest = console.http.get("/api/runs", params={"q": batch, "limit": 3, "offset": 3}).json()
    assert len(first["runs"]) == 3 and len(rest["runs"]) == 1 and rest["total"] == 4
    assert not {r["run_id"] for r in first["runs"]} & {r["run_id"] for r in rest["runs"]}

    researcher = console.http.get("/api/runs", params={"agent": "Researcher"}).json()
    child = next(r for r in researcher["runs"] if r["run_id"] == f"{batch}-sub-sub1")
    assert child["parent"] == f"{batch}-sub"


def test_run_detail_has_steps_with_arguments_results_tokens_and_durations(
    console: Console, batch: str
) -> None:
    run = console.http.get(f"/api/runs/{batch}-ok").json()
    kinds = [(s["kind"], s["name"]) for s in run["steps"] if s["kind"] in ("model", "tool")]
    assert kinds == [("model", "Support"), ("tool", "get_weather"), ("model", "Support")]
    tool = next(s for s in run["steps"] if s["kind"] == "tool")
    assert json.loads(tool["arguments"]) == {"city": "Paris"}
    assert tool["result"] == "Sunny and 21°C in Paris"
    model = next(s for s in run["steps"] if s["kind"] == "model")
    assert model["tokens"] > 0 and model["duration_ms"] is not None and model["error"] is None
    assert run["messages"][-1]["content"] == "Done: Sunny and 21°C in Paris"
    assert run["waiting_for"] is None and run["model_calls"] == 2
    assert run["usage"]["total_tokens"] == run["tokens"] and run["usage"]["model_calls"] == 2
    assert run["usage_by_agent"]["Support"]["model_calls"] == 2

    parent = console.http.get(f"/api/runs/{batch}-sub").json()
    assert parent["children"] == [f"{batch}-sub-sub1"]
    assert any(s["child_run_id"] == f"{batch}-sub-sub1" for s in parent["steps"])

    waiting = console.http.get(f"/api/runs/{batch}-ask").json()
    assert waiting["waiting_for"]["prompt"] == "What is your order number?"


def test_unknown_runs_are_404(console: Console) -> None:
    for method, path, body in [
        ("GET", "/api/runs/no-such-run", None),
        ("GET", "/api/runs/no-such-run/events", None),
        ("POST", "/api/runs/no-such-run/input", {"text": "hi"}),
        ("POST", "/api/runs/no-such-run/approve", {"tool_call_id": "c1"}),
        ("POST", "/api/runs/no-such-run/reject", {"tool_call_id": "c1"}),
        ("POST", "/api/runs/no-such-run/cancel", None),
        ("POST", "/api/runs/no-such-run/resume", None),
        ("POST", "/api/runs/no-such-run/fork", {"step": 1}),
    ]:
        assert "no-such-run" in _error(console.http.request(method, path, json=body), 404)


def test_bad_bodies_and_queries_are_422_and_change_nothing(console: Console, batch: str) -> None:
    ask = f"/api/runs/{batch}-ask"
    assert "text" in _error(console.http.post(f"{ask}/input", json={}), 422)
    _error(console.http.post(f"{ask}/input", json={"text": 5}), 422)
    _error(console.http.post(f"{ask}/input", json={"text": "x", "extra": 1}), 422)
    _error(
        console.http.post(
            f"{ask}/input", content=b"{not json", headers={"content-type": "application/json"}
        ),
        422,
    )
    _error(console.http.post(f"/api/runs/{batch}-pay/approve", json={"tool_call_id": ""}), 422)
    _error(console.http.post(f"/api/runs/{batch}-ok/fork", json={"step": "two"}), 422)
    assert "steps 1 to" in _error(
        console.http.post(f"/api/runs/{batch}-ok/fork", json={"step": 99}), 422
    )
    assert "Unknown status" in _error(console.http.get("/api/runs", params={"status": "done"}), 422)
    _error(console.http.get("/api/runs", params={"limit": 0}), 422)
    assert console.http.get(ask).json()["status"] == "waiting_for_input"


def test_answering_a_waiting_run_finishes_it_and_a_second_answer_is_409(
    console: Console, host: Host, batch: str
) -> None:
    ask = f"/api/runs/{batch}-ask"
    assert "not waiting for approval" in _error(
        console.http.post(f"/api/runs/{batch}-ask/approve", json={"tool_call_id": "x"}), 409
    )
    assert console.http.post(f"{ask}/input", json={"text": "A-17"}).json()["sent"] == "input"
    _error(console.http.post(f"{ask}/input", json={"text": "B-99"}), 409)
    run = wait_status(console, host, f"{batch}-ask", "succeeded")
    assert run["messages"][-1]["content"] == "Thanks! Order A-17 is on its way."
    _error(console.http.post(f"/api/runs/{batch}-pay/input", json={"text": "hi"}), 409)


def test_approvals_list_the_exact_call_and_approving_twice_is_409(
    console: Console, host: Host, batch: str
) -> None:
    pay = f"{batch}-pay"
    mine = [a for a in console.http.get("/api/approvals").json()["approvals"] if a["run_id"] == pay]
    assert len(mine) == 1
    approval = mine[0]
    assert approval["tool"] == "refund" and approval["since"]
    assert json.loads(approval["arguments"]) == {"amount": 42, "order": "A-17"}
    assert approval["arguments"] == console.http.get(f"/api/runs/{pay}").json()["waiting_for"][
        "tool_call"]["function"]["arguments"]  # fmt: skip

    assert "not 'call-other'" in _error(
        console.http.post(f"/api/runs/{pay}/approve", json={"tool_call_id": "call-other"}), 409
    )
    body = {"tool_call_id": approval["tool_call_id"]}
    assert console.http.post(f"/api/runs/{pay}/approve", json=body).status_code == 200
    _error(console.http.post(f"/api/runs/{pay}/approve", json=body), 409)
    _error(console.http.post(f"/api/runs/{pay}/reject", json=body), 409)
    run = wait_status(console, host, pay, "succeeded")
    assert run["messages"][-1]["content"] == "Done: Refunded $42 on order A-17"
    assert pay not in {a["run_id"] for a in console.http.get("/api/approvals").json()["approvals"]}
    page = console.http.get("/api/approvals", params={"limit": 1}).json()
    assert len(page["approvals"]) == 1 and page["total"] >= 1


def test_rejecting_tells_the_model_why(console: Console, host: Host, batch: str) -> None:
    pay = f"{batch}-pay"
    call = console.http.get(f"/api/runs/{pay}").json()["waiting_for"]["tool_call"]["id"]
    body = {"tool_call_id": call, "message": "order already refunded"}
    assert console.http.post(f"/api/runs/{pay}/reject", json=body).status_code == 200
    run = wait_status(console, host, pay, "succeeded")
    assert "order already refunded" in run["messages"][-1]["content"]


def test_cancel_resume_and_fork(console: Console, host: Host, batch: str) -> None:
    ask = f"{batch}-ask"
    assert console.http.post(f"/api/runs/{ask}/cancel").json()["cancelled"] is True
    wait_status(console, host, ask, "cancelled")
    _error(console.http.post(f"/api/runs/{ask}/input", json={"text": "late"}), 409)
    assert console.http.post(f"/api/runs/{ask}/resume").json()["resumed"] is True
    wait_status(console, host, ask, "waiting_for_input")
    assert "already succeeded" in _error(console.http.post(f"/api/runs/{batch}-ok/resume"), 409)

    forked = console.http.post(f"/api/runs/{batch}-ok/fork", json={"step": 2})
    assert forked.status_code == 200, forked.text
    new_id = forked.json()["run_id"]
    assert new_id != f"{batch}-ok" and forked.json()["forked_from"] == f"{batch}-ok"
    run = wait_status(console, host, new_id, "succeeded")
    assert run["forked_from"] == f"{batch}-ok"
    assert run["messages"][-1]["content"] == "Done: Sunny and 21°C in Paris"


def _events(response: httpx.Response) -> Any:
    """Parsed Server-Sent Events of a streaming response: dicts with event, id, data."""
    event: dict[str, Any] = {}
    for line in response.iter_lines():
        if not line:
            if "data" in event:
                event["data"] = json.loads(event["data"])
                yield event
            event = {}
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            event[field] = value.removeprefix(" ")


def test_events_stream_a_live_run_and_resume_after_a_reconnect(
    console: Console, host: Host, batch: str
) -> None:
    path = f"/api/runs/{batch}-ask/events"
    seen: list[dict[str, Any]] = []
    with console.http.stream("GET", path) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = _events(response)
        for event in events:
            seen.append(event)
            if event["event"] == "status":
                break
        assert seen[-1]["data"]["status"] == "waiting_for_input"
        assert [
            e["data"]["name"]
            for e in seen
            if e["event"] == "step" and e["data"]["kind"] in ("model", "tool")
        ] == ["Support", "ask_user"]
        console.http.post(f"/api/runs/{batch}-ask/input", json={"text": "Z-1"})
        for event in events:  # the live part: steps recorded after the answer
            seen.append(event)
            if event["event"] == "end":
                break
    steps = [e for e in seen if e["event"] == "step"]
    assert [int(e["id"]) for e in steps] == sorted(int(e["id"]) for e in steps)
    assert steps[-1]["data"]["kind"] == "model"
    assert steps[-1]["data"]["result"]["content"] == "Thanks! Order Z-1 is on its way."
    assert seen[-1]["data"]["status"] == "succeeded"

    # A reconnect with Last-Event-ID gets only the steps after it, then the status and the end.
    middle = steps[len(steps) // 2]["id"]
    with console.http.stream("GET", path, headers={"Last-Event-ID": middle}) as response:
        again = list(_events(response))
    assert [e["id"] for e in again if e["event"] == "step"] == [
        e["id"] for e in steps if int(e["id"]) > int(middle)
    ]
    assert [e["event"] for e in again if e["event"] != "step"] == ["status", "end"]


def test_metrics_parse_as_prometheus_text(console: Console, batch: str) -> None:
    response = console.http.get("/metrics")
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    runs = {s.labels["status"]: s.value for s in families["durable_swarm_runs"].samples}
    assert runs["succeeded"] >= 2 and runs["waiting_for_input"] >= 1
    assert runs["waiting_for_approval"] >= 1
    steps = {
        (s.labels["kind"], s.labels["name"]): s.value
        for s in families["durable_swarm_steps"].samples
        if s.name.endswith("_total")
    }
    assert steps[("tool", "get_weather")] >= 1
    calls = {
        s.labels["agent"]: s.value
        for s in families["durable_swarm_model_calls"].samples
        if s.name.endswith("_total")
    }
    assert calls["Support"] >= 6 and calls["Researcher"] >= 1
    tokens = {
        s.labels["type"]: s.value
        for s in families["durable_swarm_tokens"].samples
        if s.name.endswith("_total")
    }
    assert tokens["total"] == tokens["prompt"] + tokens["completion"] > 0
    latency = families["durable_swarm_step_duration_seconds"].samples
    assert any(s.name.endswith("_count") and s.labels["kind"] == "model" for s in latency)
    assert any(s.name.endswith("_sum") and s.labels["kind"] == "tool" for s in latency)


def test_openapi_schema_describes_the_api(console: Console) -> None:
    schema = console.http.get("/api/openapi.json").json()
    paths = schema["paths"]
    for path in (
        "/api/runs",
        "/api/runs/{run_id}",
        "/api/runs/{run_id}/events",
        "/api/approvals",
        "/metrics",
    ):
        assert "get" in paths[path]
    for action in ("input", "approve", "reject", "cancel", "resume", "fork"):
        assert "post" in paths[f"/api/runs/{{run_id}}/{action}"]
    assert "/" not in paths and "/login" not in paths
