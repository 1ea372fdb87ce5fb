"""Tokens and cost in `durable-swarm runs list` / `runs show` (and `--json`), and `runs resume`
with a higher budget: the runs are made here, the commands run in a child process (one DBOS per
process) on the same database, and the resumed run is finished by this process's DBOS."""

from __future__ import annotations

import re

import pytest

from cli._helpers import cli_batch
from durable_swarm import Agent, Budget, BudgetExceededError
from durable_swarm.durable import resolve_database_url

from .test_durable_usage import CALL, PRICES, USER, look, looping

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_runs_list_and_show_give_tokens_and_cost_and_resume_takes_a_budget(
    durable_swarm_factory, database_url, run_id, tmp_path
) -> None:
    from durable_swarm.testing import FakeOpenAIServer, text

    priced, failed, unknown = f"{run_id}-priced", f"{run_id}-budget", f"{run_id}-unknown"
    with FakeOpenAIServer([text("hello", usage=CALL)]) as server:
        swarm = durable_swarm_factory(server.client(), prices=PRICES)
        swarm.run(Agent(name="Priced", model="priced-model"), USER, run_id=priced)
        server.set_script([text("hello", usage=CALL)])
        swarm.run(Agent(name="Mystery", model="no-such-model-xyz"), USER, run_id=unknown)
        server.set_script(looping(2))
        spender = Agent(name="Spender", model="priced-model", functions=[look])
        with pytest.raises(BudgetExceededError):
            swarm.run(spender, USER, run_id=failed, budget=Budget(max_model_calls=1))

        url = resolve_database_url(database_url)
        db = url[len("sqlite:///") :] if url.startswith("sqlite:///") else url
        results = cli_batch(
            tmp_path,
            db,
            ["runs", "list", "--limit", "0"],
            ["runs", "list", "--json", "--limit", "0"],
            ["runs", "show", priced],
            ["runs", "show", unknown],
            ["runs", "show", failed, "--json"],
            ["runs", "resume", failed, "--max-model-calls", "10", "--json"],
            ["runs", "resume", failed, "--max-cost-usd", "cheap"],
        )
        listing, listing_json, show_priced, show_unknown, show_failed, resume, bad = results
        assert all(r.status == 0 for r in results[:-1]), [r.stderr for r in results]

        header, *rows = listing.stdout.splitlines()
        assert header.split()[-3:] == ["TOKENS", "COST", "NOTE"]
        row = {line.split()[0]: line for line in rows}
        assert re.search(r"\b161\s+\$0\.1610\b", row[priced])
        assert re.search(r"\b161\s+\?", row[unknown])
        assert re.search(r"\b161\s+\$0\.1610\b", row[failed])  # read from its steps
        runs = {r["run_id"]: r for r in listing_json.json()["runs"]}
        assert runs[priced]["cost_usd"] == pytest.approx(0.161)
        assert runs[priced]["usage"]["total_tokens"] == 161
        assert runs[unknown]["cost_usd"] is None

        text_priced = ANSI.sub("", show_priced.stdout)
        assert re.search(r"cost\s+\$0\.1610", text_priced)
        assert "unknown price or usage for: no-such-model-xyz" in show_unknown.stdout
        shown = show_failed.json()
        assert shown["status"] == "failed" and "max_model_calls=1" in shown["error"]
        assert shown["usage"]["model_calls"] == 1 and shown["usage"]["input_tokens"] == 150
        assert shown["usage_by_agent"]["Spender"]["total_tokens"] == 161
        assert resume.json()["budget"]["max_model_calls"] == 10
        assert bad.status == 2 and "expected an amount in USD" in bad.stderr

        # this process's DBOS takes the resumed run and finishes it under the new budget
        response = swarm.handle(failed).result()
        assert response.messages[-1]["content"] == "finished"
        assert server.request_count == 5  # 2 single runs + 1 before the stop + 2 after
