"""Guardrails in durable runs, on SQLite and PostgreSQL, through the real `openai` client and
the fake server: each verdict is a step of its own (`guardrail:<name>`), a tripped input or
output guardrail fails the run with `GuardrailTripped` naming the run, a tripped tool guardrail
answers the model; `get_run`, `runs show` and the console show the verdicts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from durable_swarm import DurableClient, GuardrailTripped
from durable_swarm.testing import FakeOpenAIServer

from ._refunds import executions, hasty, moderated, refunder, reply


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def kinds(info):
    return [(s.kind, s.name) for s in info.steps if s.kind not in ("event", "stream", "dbos")]


@pytest.fixture
def server():
    with FakeOpenAIServer(reply) as fake:
        yield fake


def test_a_tripped_input_guardrail_fails_the_run_before_any_model_call(
    durable_swarm_factory, server, run_id, work_dir
):
    swarm = durable_swarm_factory(server.client())
    with pytest.raises(GuardrailTripped) as caught:
        swarm.run(refunder, user("refund 50, you idiot"), run_id=run_id)
    error = caught.value
    assert (error.guardrail, error.kind, error.agent, error.run_id) == (
        "screen", "input", "Refunder", run_id,
    )  # fmt: skip
    assert f"ended run {run_id!r}: abusive language" in str(error)
    assert server.request_count == 0
    assert executions(work_dir, "refund") == []
    info = swarm.get_run(run_id)
    assert info.status == "failed" and "abusive language" in (info.error or "")
    assert kinds(info) == [("guardrail", "screen")]
    assert info.guardrails == [
        {"guardrail": "screen", "kind": "input", "agent": "Refunder", "tripped": True,
         "reason": "abusive language"},
    ]  # fmt: skip
    # the error read back from the log is the same class, naming the run
    with pytest.raises(GuardrailTripped) as again:
        swarm.handle(run_id).result()
    assert again.value.run_id == run_id and again.value.reason == "abusive language"


def test_a_parallel_input_guardrail_discards_the_recorded_model_answer(
    durable_swarm_factory, server, run_id, work_dir
):
    swarm = durable_swarm_factory(server.client())
    with pytest.raises(GuardrailTripped):
        swarm.run(hasty, user("refund 50, you idiot"), run_id=run_id)
    assert server.request_count == 1  # the model call ran (and is a recorded step)
    assert executions(work_dir, "refund") == []
    info = swarm.get_run(run_id)
    # the guardrail's step id is drawn before the model call's, whatever finishes first
    assert kinds(info) == [("guardrail", "screen"), ("model", "Hasty")]
    assert info.guardrails[0]["tripped"] is True


def test_a_parallel_input_guardrail_that_passes(durable_swarm_factory, server, run_id, work_dir):
    swarm = durable_swarm_factory(server.client())
    response = swarm.run(hasty, user("refund 50"), run_id=run_id)
    assert response.messages[-1]["content"] == "Done: refunded 50"
    assert kinds(swarm.get_run(run_id)) == [
        ("guardrail", "screen"), ("model", "Hasty"), ("tool", "refund"), ("model", "Hasty"),
    ]  # fmt: skip


def test_a_tripped_output_guardrail_fails_the_run(durable_swarm_factory, server, run_id, work_dir):
    swarm = durable_swarm_factory(server.client())
    with pytest.raises(GuardrailTripped) as caught:
        swarm.run(refunder, user("a rude question"), run_id=run_id)
    assert (caught.value.kind, caught.value.reason, caught.value.run_id) == (
        "output", "Refunder was rude", run_id,
    )  # fmt: skip
    info = swarm.get_run(run_id)
    assert kinds(info) == [("guardrail", "screen"), ("model", "Refunder"), ("guardrail", "polite")]
    assert info.status == "failed"


def test_a_tool_guardrail_blocks_a_call_and_the_run_goes_on(
    durable_swarm_factory, server, run_id, work_dir
):
    swarm = durable_swarm_factory(server.client())
    response = swarm.run(refunder, user("refund 500"), run_id=run_id)
    rejection = response.messages[1]
    assert rejection["content"].startswith("Error: the call to refund was blocked by guardrail")
    assert response.messages[-1]["content"] == f"Done: {rejection['content']}"
    assert executions(work_dir, "refund") == []
    assert server.requests[-1]["messages"][-1]["content"] == rejection["content"]
    info = swarm.get_run(run_id)
    assert kinds(info) == [
        ("guardrail", "screen"), ("model", "Refunder"), ("guardrail", "limit"),
        ("model", "Refunder"), ("guardrail", "polite"),
    ]  # fmt: skip
    assert info.messages[1:] == response.messages
    verdict = info.guardrails[1]
    assert (verdict["kind"], verdict["tool"], verdict["tripped"]) == ("tool_call", "refund", True)


def test_a_failed_run_shows_a_blocked_call_in_call_order(
    durable_swarm_factory, server, run_id, work_dir
):
    swarm = durable_swarm_factory(server.client())
    with pytest.raises(GuardrailTripped):  # its messages are rebuilt from its steps
        swarm.run(refunder, user("refund twice"), run_id=run_id)
    info = swarm.get_run(run_id)
    assert kinds(info)[2:7] == [  # both calls checked, then the one that passed runs
        ("guardrail", "limit"), ("guardrail", "limit"), ("tool", "refund"),
        ("guardrail", "redact"), ("model", "Refunder"),
    ]  # fmt: skip
    first, second = info.messages[1]["tool_calls"]
    # the loop checks both calls first, then answers them in call order: so does the log's reader
    assert [(m["role"], m.get("tool_call_id"), m["content"]) for m in info.messages[2:]] == [
        ("tool", first["id"], "refunded 50"),
        ("tool", second["id"], server.requests[1]["messages"][-1]["content"]),
        ("assistant", None, "Refunded what I could, stupid."),
    ]
    assert "blocked by guardrail limit" in info.messages[3]["content"]
    assert executions(work_dir, "refund") == ["50"]


def test_an_after_guardrail_withholds_a_result(durable_swarm_factory, server, run_id, work_dir):
    swarm = durable_swarm_factory(server.client())
    response = swarm.run(refunder, user("what card is on file"), run_id=run_id)
    assert "withheld by guardrail redact" in response.messages[1]["content"]
    assert "4111" not in json.dumps(server.requests[-1]["messages"])
    info = swarm.get_run(run_id)
    assert ("guardrail", "redact") in kinds(info)
    assert info.messages[1:] == response.messages


def test_an_agent_as_guardrail(durable_swarm_factory, server, run_id, work_dir):
    swarm = durable_swarm_factory(server.client())
    with pytest.raises(GuardrailTripped) as caught:
        swarm.run(moderated, user("refund 50, you idiot"), run_id=run_id)
    assert (caught.value.guardrail, caught.value.reason) == ("Moderator", "rude")
    info = swarm.get_run(run_id)
    assert kinds(info) == [("guardrail", "Moderator")]
    assert info.usage is not None and info.usage.model_calls == 1  # the Moderator's, counted
    assert set(info.usage_by_agent) == {"Moderator"}


def test_runs_show_and_the_console_show_the_verdicts(
    durable_swarm_factory, database_url, server, run_id, work_dir
):
    swarm = durable_swarm_factory(server.client())
    swarm.run(refunder, user("refund 500"), run_id=run_id)
    with pytest.raises(GuardrailTripped):
        swarm.run(refunder, user("refund 5, idiot"), run_id=f"{run_id}-x")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DURABLE_SWARM_DATA", "DBOS_"))}
    shown = subprocess.run(
        [sys.executable, "-m", "durable_swarm", "--database-url", database_url, "--no-color",
         "runs", "show", run_id],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    limit = next(i for i, line in enumerate(lines) if "limit tripped" in line)
    assert "guardrail" in lines[limit] and "tool call refund" in lines[limit]
    assert "✗ refunds over 100 need a manager" in lines[limit + 1]
    assert any("screen passed" in line and "input" in line for line in lines)

    pytest.importorskip("fastapi", reason="the console needs the 'web' extra")
    from fastapi.testclient import TestClient

    from durable_swarm.web import create_app

    client = DurableClient(database_url)
    try:
        with TestClient(create_app(client)) as http:
            detail = http.get(f"/api/runs/{run_id}").json()
            failed = http.get(f"/api/runs/{run_id}-x").json()
    finally:
        client.close()
    steps = [s for s in detail["steps"] if s["kind"] == "guardrail"]
    assert [(s["name"], s["arguments"], s["result"]) for s in steps] == [
        ("screen", "input", "passed"),
        ("limit", "tool_call refund", "tripped: refunds over 100 need a manager"),
        ("polite", "output", "passed"),
    ]
    assert [g["guardrail"] for g in detail["guardrails"]] == ["screen", "limit", "polite"]
    assert failed["status"] == "failed" and "abusive language" in failed["error"]
