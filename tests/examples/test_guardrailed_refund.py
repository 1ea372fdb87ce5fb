"""examples/guardrailed_refund.py: offline, in memory and durable, the small refund is made, the
large one is blocked by the tool guardrail (the bank is never called) and the abusive message
is stopped by the input guardrail before any model call."""

from __future__ import annotations

import guardrailed_refund as example
import pytest

from durable_swarm import DurableClient, GuardrailTripped, Swarm
from durable_swarm.testing import ScriptedClient

OFFLINE = "(offline: scripted model — set OPENAI_API_KEY or OPENAI_BASE_URL to use a real model)"


def test_it_refunds_blocks_and_stops(run_example):
    out = run_example(example.main)
    lines = out.splitlines()
    assert lines[0] == OFFLINE
    assert lines[1:4] == [
        f"> {example.CUSTOMERS[0]}",
        "  [bank] refunded $40.00 for order A-100",
        "Refund Agent: Done! Refunded $40.00 for order A-100.",
    ]
    assert lines[4] == f"> {example.CUSTOMERS[1]}"
    assert lines[5].startswith(
        "  [guardrail] Error: the call to issue_refund was blocked by guardrail refund_limit"
    )
    assert (
        lines[6]
        == "Refund Agent: I can't refund that much myself: a manager will follow up within a day."
    )
    assert lines[7:] == [
        f"> {example.CUSTOMERS[2]}",
        "Stopped by guardrail no_abuse: abusive language",
    ]
    assert out.count("[bank]") == 1


def test_the_abusive_message_never_reaches_the_model():
    client = ScriptedClient(example.offline_model)
    with pytest.raises(GuardrailTripped):
        Swarm(client).run(example.refund_agent, [{"role": "user", "content": example.CUSTOMERS[2]}])
    assert client.call_count == 0


def test_durable_runs_record_each_verdict(run_example, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = str(tmp_path / "guarded.sqlite")
    out = run_example(example.main, "--durable", "--database-url", url)
    assert out.count("[bank]") == 1 and "Stopped by guardrail no_abuse" in out
    client = DurableClient(url)
    try:
        verdicts = sorted(
            [(g["guardrail"], g["tripped"]) for g in client.get_run(r.run_id).guardrails]
            for r in client.list_runs()
        )
    finally:
        client.close()
    assert verdicts == [  # the three runs, in any order
        [("no_abuse", False), ("refund_limit", False)],
        [("no_abuse", False), ("refund_limit", True)],
        [("no_abuse", True)],
    ]
