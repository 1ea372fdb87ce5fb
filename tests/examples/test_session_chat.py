"""examples/session_chat.py: a session carried over runs that compacts, offline; with
--durable the session lives in the database and a second invocation continues it."""

from __future__ import annotations

import session_chat

from .test_run_modes import run


def test_the_chat_compacts_and_still_knows_what_was_said(run_example):
    out = run_example(session_chat.main)
    lines = out.splitlines()
    assert "User: Hi! My name is Ada." in lines
    assert any(line.startswith("(compacted: the session now keeps a summary") for line in lines)
    answer = next(line for line in lines if line.startswith("Concierge: You told me"))
    for fact in ("My name is Ada", "I live in Lisbon", "I like green tea", "4217"):
        assert fact in answer
    assert "from the summary" in answer
    assert lines[-1].startswith("(session demo-customer: 3 messages kept, the first a summary:")


def test_durable_sessions_continue_across_invocations(tmp_path):
    db = str(tmp_path / "chat.sqlite")
    durable = ["examples/session_chat.py", "--durable", "--database-url", db]
    run(*durable, "--say", "My name is Bob.", "--session", "bob")
    out = run(*durable, "--say", "What do you know about me?", "--session", "bob")
    assert "Concierge: You told me: My name is Bob" in out
    listed = run("-m", "durable_swarm", "sessions", "list", "--database-url", db)
    assert "bob" in listed
