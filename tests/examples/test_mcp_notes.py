"""examples/mcp_notes: an agent whose tools come from an MCP server, offline, in memory and
durable; the example server makes a repeated call (same idempotency key) happen once."""

from __future__ import annotations

import sys

from mcp_notes import main as mcp_notes

from durable_swarm.toolkit import MCPTools

OFFLINE = "(offline: scripted model — set OPENAI_API_KEY or OPENAI_BASE_URL to use a real model)"
CONVERSATION = [
    "User: Remember that the staging server moved to Oslo.",
    "Notebook: Saved note 1: the staging server moved to Oslo",
    "User: What do you remember?",
    "Notebook: 1. the staging server moved to Oslo",
]


def test_the_agent_saves_and_reads_notes_through_the_mcp_server(run_example):
    out = run_example(mcp_notes.main)
    assert out.splitlines() == [OFFLINE, *CONVERSATION]


def test_durable_runs_record_the_listing_and_each_call(run_example, tmp_path):
    db = tmp_path / "runs.sqlite"
    out = run_example(mcp_notes.main, "--durable", "--database-url", str(db))
    assert out.splitlines()[2:] == CONVERSATION


def test_the_example_server_makes_a_repeated_call_happen_once(tmp_path):
    notes = tmp_path / "notes.json"
    server = MCPTools(
        command=[sys.executable, str(mcp_notes.SERVER)], env={"NOTES_FILE": str(notes)}
    )
    try:
        first = server.call("add_note", {"text": "once"}, idempotency_key="run-1:4")
        again = server.call("add_note", {"text": "once"}, idempotency_key="run-1:4")
        assert first == again == "Saved note 1: once"
        assert server.call("list_notes", {}) == "1. once"
    finally:
        server.close()
