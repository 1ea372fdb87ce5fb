"""`runs list`, `runs show`, `runs watch`: what a person and a program see, and that reading a
run database changes nothing in it."""

from __future__ import annotations

import re

import pytest

from ._helpers import EXPECTED, cli_batch, cli_parallel, digest

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def reads(base_db, tmp_path_factory):
    """Every read command once, in one child process; the database must not change."""
    before = digest(base_db)
    commands = {
        "list": ["runs", "list"],
        "list_json": ["runs", "list", "--json"],
        "failed": ["runs", "list", "--status", "failed", "--json"],
        "waiting": ["runs", "list", "--status", "waiting_for_input,waiting_for_approval", "--json"],
        "agent": ["runs", "list", "--agent", "Weather Agent", "--json"],
        "since": ["runs", "list", "--since", "1h", "--json"],
        "until": ["runs", "list", "--until", "2000-01-01", "--json"],
        "until_text": ["runs", "list", "--until", "2000-01-01"],
        "limit": ["runs", "list", "--limit", "1", "--json"],
        "show_ok": ["runs", "show", "run-ok"],
        "show_ok_json": ["runs", "show", "run-ok", "--json"],
        "show_ok_all": ["runs", "show", "run-ok", "--all", "--messages"],
        "show_input": ["runs", "show", "run-input"],
        "show_approval": ["runs", "show", "run-approval"],
        "show_failed": ["runs", "show", "run-failed", "--messages"],
        "watch_ok": ["runs", "watch", "run-ok"],
        "watch_failed": ["runs", "watch", "run-failed", "--json"],
        "watch_input": ["runs", "watch", "run-input", "--timeout", "0.5", "--interval", "0.1"],
        "color": {"argv": ["runs", "list"], "env": {"FORCE_COLOR": "1"}},
        "no_color_env": {"argv": ["runs", "list"], "env": {"FORCE_COLOR": "1", "NO_COLOR": "1"}},
        "no_color_flag": {"argv": ["runs", "list", "--no-color"], "env": {"FORCE_COLOR": "1"}},
        "global_url": {
            "argv": ["--database-url", str(base_db), "runs", "list", "--json"],
            "env": {"DURABLE_SWARM_DATABASE_URL": str(base_db.with_name("elsewhere.sqlite"))},
        },
    }
    tmp_path = tmp_path_factory.mktemp("reads")
    results = dict(zip(commands, cli_batch(tmp_path, base_db, *commands.values()), strict=True))
    assert digest(base_db) == before, "a read command changed the run database"
    return results


def ids(result):
    return [run["run_id"] for run in result.json()["runs"]]


def test_list_shows_every_run_newest_first_without_colours_in_a_pipe(reads):
    result = reads["list"]
    assert result.status == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == [
        "RUN",
        "ID",
        "STATUS",
        "AGENT",
        "CREATED",
        "UPDATED",
        "TOKENS",
        "COST",
        "NOTE",
    ]
    assert {row.split()[0]: row.split()[1] for row in rows} == EXPECTED
    assert "asks: What is your name?" in result.stdout
    assert "approve? refund(amount=42)" in result.stdout
    assert not ANSI.search(result.stdout)


def test_list_json_is_stable(reads):
    data = reads["list_json"].json()
    assert data["schema_version"] == 1
    assert {r["run_id"]: r["status"] for r in data["runs"]} == EXPECTED
    run = next(r for r in data["runs"] if r["run_id"] == "run-approval")
    assert run["waiting_for"]["tool_call"]["id"] == "call_refund_42"
    assert {"agent", "created_at", "updated_at", "error", "forked_from"} <= set(run)
    assert "steps" not in run and "messages" not in run


def test_list_filters_by_status_agent_and_time(reads):
    assert ids(reads["failed"]) == ["run-failed"]
    assert set(ids(reads["waiting"])) == {"run-input", "run-approval"}
    assert ids(reads["agent"]) == ["run-ok"]
    assert set(ids(reads["since"])) == set(EXPECTED)
    assert ids(reads["until"]) == []
    assert reads["until_text"].stdout.startswith("No runs match these filters")
    assert len(ids(reads["limit"])) == 1


def test_show_is_a_timeline_of_model_calls_tools_and_handoffs(reads):
    result = reads["show_ok"]
    assert result.status == 0, result.stderr
    out = result.stdout
    assert out.startswith("Run run-ok  succeeded")
    assert "agent      Weather Agent" in out
    assert re.search(r"tokens\s+\d+ \(prompt \d+, completion \d+\) over 3 model calls", out)
    assert re.search(r"#1\s+model\s+Router\s+\d+ ms\s+gpt-4o, \d+ tokens \(\d+ in, \d+ out\)", out)
    assert "→ transfer_to_weather()" in out
    assert re.search(r"#3\s+handoff\s+Router → Weather Agent", out)
    assert 'get_weather(city="Paris") = Sunny and 21°C in Paris' in out
    assert "Done: Sunny and 21°C in Paris" in out


def test_show_json_has_steps_usage_and_messages(reads):
    data = reads["show_ok_json"].json()
    assert data["status"] == "succeeded" and data["agent"] == "Weather Agent"
    kinds = [step["kind"] for step in data["steps"]]
    assert kinds == ["model", "tool", "handoff", "model", "tool", "model"]
    assert all(step["duration_ms"] is not None for step in data["steps"])
    assert data["usage"]["model_calls"] == 3
    assert data["usage"]["total_tokens"] == sum(
        s["output"]["usage"]["total_tokens"] for s in data["steps"] if s["kind"] == "model"
    )
    assert data["messages"][-1]["content"] == "Done: Sunny and 21°C in Paris"


def test_show_messages_prints_the_conversation(reads):
    out = reads["show_ok_all"].stdout
    assert "Messages" in out
    assert "user: What's the weather in Paris?" in out
    assert "Weather Agent: Done: Sunny and 21°C in Paris" in out


def test_show_says_what_a_waiting_run_needs_and_how_to_answer(reads):
    out = reads["show_input"].stdout
    assert "waiting_for_input" in out
    assert "? asks the user: What is your name?" in out
    assert "durable-swarm runs send run-input 'your answer'" in out
    out = reads["show_approval"].stdout
    assert "waiting for approval of refund(amount=42)" in out
    assert "durable-swarm runs approve run-approval call_refund_42" in out
    assert "durable-swarm runs reject run-approval call_refund_42" in out


def test_show_failed_run_names_the_error(reads):
    out = reads["show_failed"].stdout
    assert "failed" in out
    assert "the model endpoint exploded" in out
    assert "✗" in out
    assert "user: boom" in out


def test_watch_a_finished_run_prints_its_steps_and_answer(reads):
    result = reads["watch_ok"]
    assert result.status == 0, result.stderr
    assert "Watching run run-ok" in result.stdout
    assert "● succeeded" in result.stdout
    assert "answer Done: Sunny and 21°C in Paris" in result.stdout


def test_watch_json_reports_a_failed_run_and_exits_1(reads):
    result = reads["watch_failed"]
    assert result.status == 1
    events = result.json_lines()
    assert [e["event"] for e in events] == ["step", "status", "end"]
    assert "the model endpoint exploded" in events[0]["step"]["error"]
    assert events[1]["status"] == "failed"
    assert events[-1]["run"]["run_id"] == "run-failed"


def test_watch_gives_up_after_timeout_on_a_waiting_run(reads):
    result = reads["watch_input"]
    assert result.status == 1
    assert "waiting for input: What is your name?" in result.stdout
    assert "Stopped watching run run-input after 0.5 s: it is still waiting_for_input" in (
        result.stderr
    )


def test_colours_only_when_forced_and_never_with_no_color(reads):
    assert ANSI.search(reads["color"].stdout)
    assert "\x1b[32msucceeded\x1b[0m" in reads["color"].stdout
    assert not ANSI.search(reads["no_color_env"].stdout)
    assert not ANSI.search(reads["no_color_flag"].stdout)


def test_database_url_option_wins_over_the_environment(reads):
    assert set(ids(reads["global_url"])) == set(EXPECTED)


def test_installed_script_and_python_m_run_the_command(base_db):
    script, module = cli_parallel(
        (["runs", "list", "--json"], False),
        (["runs", "show", "run-ok", f"--database-url={base_db}"], True),
        db=base_db,
    )
    assert script.status == 0, script.stderr
    assert set(ids(script)) == set(EXPECTED)
    assert module.status == 0, module.stderr
    assert "Run run-ok  succeeded" in module.stdout
