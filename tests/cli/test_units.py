"""The command's parts that need no database: time filters, colours, formatting, the timeline
of synthetic steps, and finding the demos."""

from __future__ import annotations

import argparse
import io
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from durable_swarm._cli._demo import discover
from durable_swarm._cli._render import run_json, run_table, step_lines, usage_of
from durable_swarm._cli._runs import parse_time
from durable_swarm._cli._style import Style, ago, duration, preview, use_color
from durable_swarm.durable import RunInfo, StepRecord

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
T0 = datetime(2024, 5, 21, 15, 0, tzinfo=timezone.utc)


def test_parse_time_relative_and_iso():
    now = datetime.now(timezone.utc)
    assert abs((now - parse_time("2h")) - timedelta(hours=2)) < timedelta(seconds=5)
    assert abs((now - parse_time("30m")) - timedelta(minutes=30)) < timedelta(seconds=5)
    assert parse_time("2024-05-21T15:00:00Z") == T0
    assert parse_time("2024-05-21T17:00+02:00") == T0
    assert parse_time("2024-05-21").tzinfo is not None  # local time
    with pytest.raises(argparse.ArgumentTypeError, match="expected an ISO time"):
        parse_time("last tuesday")


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_colours_only_on_a_terminal_and_never_with_no_color(monkeypatch):
    for name in ("NO_COLOR", "FORCE_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)
    assert use_color(Tty())
    assert not use_color(io.StringIO())
    assert not use_color(Tty(), disabled=True)
    monkeypatch.setenv("TERM", "dumb")
    assert not use_color(Tty())
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert use_color(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_color(Tty())
    assert Style(False).status("failed") == "failed"
    assert Style(True).status("failed") == "\x1b[31mfailed\x1b[0m"


def test_durations_ages_and_previews():
    assert duration(None) == ""
    assert duration(840.4) == "840 ms"
    assert duration(2400) == "2.4 s"
    assert duration(185_000) == "3m 05s"
    assert ago(T0, T0 + timedelta(seconds=12)) == "12s ago"
    assert ago(T0, T0 + timedelta(hours=3, minutes=5)) == "3h ago"
    assert ago(None) == "-"
    assert preview("a\n  b", 10) == "a b"
    assert preview("x" * 20, 10) == "x" * 9 + "…"


def model_step(step, content=None, calls=(), tokens=(10, 5)):
    message = {"role": "assistant", "content": content, "sender": "Bot", "tool_calls": None}
    if calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in calls
        ]
    usage = {"prompt_tokens": tokens[0], "completion_tokens": tokens[1]}
    usage["total_tokens"] = sum(tokens)
    output = {"message": message, "usage": usage}
    return StepRecord(step, "model", "Bot", output, None, T0, T0 + timedelta(milliseconds=120))


def tool_step(step, call_id, name, result, context, handoff=None):
    message = {"role": "tool", "tool_call_id": call_id, "tool_name": name, "content": result}
    output = {"message": message, "context_variables": context, "handoff": handoff}
    return StepRecord(step, "tool", name, output, None, T0, T0 + timedelta(milliseconds=3))


def test_timeline_of_synthetic_steps():
    steps = [
        model_step(1, calls=[("c1", "set_name", '{"name": "Ada"}')]),
        tool_step(2, "c1", "set_name", "ok", {"user": 1}),
        model_step(3, calls=[("c2", "set_name", '{"name": "Bo"}')]),
        tool_step(3 + 1, "c2", "set_name", "ok", {"user": 1, "name": "Bo"}),
        StepRecord(5, "handoff", "Bot->Other", {"source": "Bot", "target": "Other", "reason": "r"}),
        StepRecord(6, "wait", "DBOS.recv", {"approved": False, "message": "no", "by": "Grace"}),
        StepRecord(7, "event", "DBOS.setEvent"),
        model_step(8, content="All done.", tokens=(20, 2)),
    ]
    lines = "\n".join(step_lines(steps, Style(False)))
    assert 'set_name(name="Ada") = ok' in lines
    assert 'context: name="Bo"' in lines
    assert "Bot → Other" in lines
    assert "rejected" in lines and "(by Grace)" in lines
    assert "DBOS.setEvent" not in lines
    assert "DBOS.setEvent" in "\n".join(step_lines(steps, Style(False), everything=True))
    assert "All done." in lines
    assert "120 ms" in lines and "15 tokens (10 in, 5 out)" in lines
    assert usage_of(steps) == {
        "model_calls": 3,
        "model_calls_without_usage": 0,
        "prompt_tokens": 40,
        "completion_tokens": 12,
        "total_tokens": 52,
    }


def test_run_table_and_json():
    runs = [
        RunInfo("r1", "waiting_for_input", "Bot", waiting_for={"prompt": "Name?"}, created_at=T0),
        RunInfo("r2", "failed", None, error="boom", created_at=T0, updated_at=T0),
    ]
    header, first, second = run_table(runs, Style(False))
    assert header.split()[:3] == ["RUN", "ID", "STATUS"]
    assert first.split()[:3] == ["r1", "waiting_for_input", "Bot"] and "asks: Name?" in first
    assert second.split()[:3] == ["r2", "failed", "-"] and second.endswith("boom")
    data = run_json(runs[1], detail=False)
    assert data["schema_version"] == 1 and "steps" not in data
    assert run_json(runs[1], detail=True)["usage"]["model_calls"] == 0


def test_discover_names_the_examples():
    demos = discover(EXAMPLES)
    assert demos["basic.bare_minimum"] == EXAMPLES / "basic" / "bare_minimum.py"
    assert demos["triage_agent"] == EXAMPLES / "triage_agent" / "run.py"
    assert demos["airline"] == EXAMPLES / "airline" / "main.py"
    assert "airline.evals.function_evals" in demos
    assert "triage_agent.agents" not in demos  # not runnable
    assert not any(name.startswith("_") for name in demos)
