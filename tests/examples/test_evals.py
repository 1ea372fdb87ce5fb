"""Swarm's evals for the triage, weather and airline examples: against the scripted model here,
and against a real model when one is configured (OPENAI_API_KEY or OPENAI_BASE_URL; skipped
otherwise)."""

from __future__ import annotations

import os

import pytest
from _common import make_client
from airline.agents import flight_modification, triage_agent
from airline.evals import function_evals
from airline.offline_model import respond as airline_model
from triage_agent import evals as triage_evals
from triage_agent.offline_model import respond as triage_model
from weather_agent import evals as weather_evals
from weather_agent.offline_model import respond as weather_model

from durable_swarm import Swarm

REAL_MODEL = {name: os.environ.get(name) for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}


@pytest.fixture(params=["scripted", "real"])
def model(request, monkeypatch):
    """Which model the evals check: the example's scripted one, or the configured real one."""
    if request.param == "real":
        if not any(REAL_MODEL.values()):
            pytest.skip("no real model configured (set OPENAI_API_KEY or OPENAI_BASE_URL)")
        for name, value in REAL_MODEL.items():
            if value:
                monkeypatch.setenv(name, value)
    return request.param


def swarm_for(script, model):
    return Swarm(client=make_client(script, offline=model == "scripted", announce=False))


@pytest.mark.parametrize(("query", "function_name"), triage_evals.TOOL_CALL_CASES)
def test_triage_agent_calls_correct_function(model, query, function_name):
    client = swarm_for(triage_model, model)
    tool_calls = triage_evals.run_and_get_tool_calls(client, triage_evals.triage_agent, query)
    assert len(tool_calls) == 1
    assert tool_calls[0]["function"]["name"] == function_name


@pytest.mark.parametrize("query", weather_evals.CALLS_WEATHER)
def test_weather_agent_calls_weather_when_asked(model, query):
    client = swarm_for(weather_model, model)
    tool_calls = weather_evals.run_and_get_tool_calls(client, weather_evals.weather_agent, query)
    assert len(tool_calls) == 1
    assert tool_calls[0]["function"]["name"] == "get_weather"


@pytest.mark.parametrize("query", weather_evals.DOES_NOT_CALL_WEATHER)
def test_weather_agent_does_not_call_weather_when_not_asked(model, query):
    client = swarm_for(weather_model, model)
    assert not weather_evals.run_and_get_tool_calls(client, weather_evals.weather_agent, query)


@pytest.mark.parametrize(
    ("agent", "cases"),
    [(triage_agent, "triage_cases"), (flight_modification, "flight_modification_cases")],
    ids=["triage", "flight_modification"],
)
def test_airline_function_evals(model, agent, cases, capsys):
    client = swarm_for(airline_model, model)
    accuracy, results = function_evals.run_function_evals(
        client, agent, function_evals.load_cases(cases)
    )
    assert accuracy == 100.0, results
    assert "correct (100.00%)" in capsys.readouterr().out


def test_airline_evals_read_the_tool_name_after_one_turn():
    client = swarm_for(airline_model, "scripted")
    case = {"role": "user", "content": "My bag never arrived"}
    response = client.run(agent=triage_agent, messages=[case], max_turns=1)
    assert [m["role"] for m in response.messages] == ["assistant", "tool"]
    assert function_evals.extract_response_info(response) == {
        "tool_calls": "transfer_to_lost_baggage"
    }


def test_eval_scripts_pass_offline(tmp_path, capsys):
    assert triage_evals.main(["--offline"]) == 0
    assert weather_evals.main(["--offline"]) == 0
    saved = tmp_path / "results.json"
    assert function_evals.main(["--offline", "--n", "2", "--save", str(saved)]) == 0
    assert "4/4 cases passed" in capsys.readouterr().out
    assert saved.exists()
