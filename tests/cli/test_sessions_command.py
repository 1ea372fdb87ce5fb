"""`durable-swarm sessions list|show|clear|delete`, and `runs show` of a run that compacted
(the timeline's compaction step, the messages with the summary marker). On SQLite and
PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._helpers import cli_batch, run_script

APP = Path(__file__).resolve().parents[1] / "sessions" / "_app.py"


@pytest.fixture(scope="module")
def results(database_url, tmp_path_factory):
    assert run_script(APP, database_url) == {"done": True}
    tmp_path = tmp_path_factory.mktemp("sessions-cli")
    return cli_batch(
        tmp_path,
        database_url,
        ["sessions", "list", "--no-color"],
        ["sessions", "list", "--json"],
        ["sessions", "show", "support", "--no-color"],
        ["sessions", "show", "support", "--json"],
        ["runs", "show", "support-3", "--messages", "--no-color"],
        ["sessions", "clear", "support"],
        ["sessions", "show", "support", "--json"],
        ["sessions", "delete", "support", "--json"],
        ["sessions", "show", "support"],
        ["sessions", "clear", "nobody"],
        ["sessions", "list", "--json"],
    )


def test_sessions_list_shows_each_session(results):
    table = results[0]
    assert table.status == 0, table.stderr
    assert "SESSION" in table.stdout and "support" in table.stdout and "other" in table.stdout
    assert "(compacted)" in table.stdout
    listed = {s["name"]: s for s in results[1].json()["sessions"]}
    assert set(listed) == {"support", "other"}
    assert listed["support"]["runs"] == 3 and listed["support"]["compacted"] is True
    assert listed["support"]["held_by"] is None and listed["support"]["last_run"] == "support-3"
    assert "messages" not in listed["support"]  # a listing is short: `show` has them


def test_sessions_show_prints_the_conversation_the_next_run_starts_from(results):
    shown = results[2]
    assert shown.status == 0, shown.stderr
    assert "Session support: " in shown.stdout and "3 runs, free" in shown.stdout
    assert "THE-SUMMARY" in shown.stdout
    assert "any news?" in shown.stdout
    session = results[3].json()["session"]
    assert session["messages"][0]["content"].endswith("THE-SUMMARY")
    assert session["messages"][-2:] == [
        {"role": "user", "content": "any news?"},
        {**session["messages"][-1], "content": "noted: any news?"},
    ]


def test_runs_show_has_the_compaction_step_and_every_original_message(results):
    show = results[4]
    assert show.status == 0, show.stderr
    assert "compact" in show.stdout and "messages summarized" in show.stdout
    assert "THE-SUMMARY" in show.stdout
    assert "⋯ summarized above" in show.stdout
    assert "my order is late" in show.stdout  # the originals, in the log
    assert "session" in show.stdout and "keeps" in show.stdout


def test_clear_and_delete(results):
    assert results[5].status == 0 and "Cleared session support" in results[5].stdout
    assert results[6].json()["session"]["messages"] == []
    assert results[7].json()["deleted"] == "support"
    assert results[8].status == 1 and "No session named 'support'" in results[8].stderr
    assert results[9].status == 1 and "No session named 'nobody'" in results[9].stderr
    assert "Traceback" not in results[8].stderr + results[9].stderr
    assert [s["name"] for s in results[10].json()["sessions"]] == ["other"]
