"""examples/structured_output.py: the ticket writer's typed answer, its first (invalid) answer
sent back, in both output modes, in memory and on DurableSwarm."""

from __future__ import annotations

import structured_output

from durable_swarm import Swarm
from durable_swarm.testing import ScriptedClient

OFFLINE = "(offline: scripted model — set OPENAI_API_KEY or OPENAI_BASE_URL to use a real model)"
TICKET = [
    "(sent back to the model) - priority: Field required",
    "Ticket Writer filed a Ticket:",
    "  category: billing",
    "  priority: high",
    "  summary: Charged twice for one order",
    "  order_id: 1042",
]


def test_the_ticket_is_typed_after_one_answer_sent_back(run_example):
    out = run_example(structured_output.main)
    assert out.splitlines() == [OFFLINE, *TICKET]


def test_json_schema_mode_and_durable_runs_file_the_same_ticket(run_example, tmp_path):
    out = run_example(structured_output.main, "--json-schema")
    assert out.splitlines()[1:] == TICKET
    db = tmp_path / "runs.sqlite"
    out = run_example(structured_output.main, "--durable", "--database-url", str(db))
    assert out.splitlines()[-len(TICKET) :] == TICKET


def test_the_output_is_a_ticket_model():
    structured_output.ticket_writer.output_mode = "tool"
    swarm = Swarm(ScriptedClient(structured_output.offline_model))
    user = [{"role": "user", "content": structured_output.CUSTOMER}]

    response = swarm.run(structured_output.triage, user)

    assert response.agent is structured_output.ticket_writer
    assert response.output == structured_output.Ticket(
        category="billing", priority="high", summary="Charged twice for one order", order_id=1042
    )
