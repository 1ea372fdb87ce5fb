"""How examples are run: as files and as modules from the repository root, with lines piped on
stdin, on DurableSwarm with `--durable`, and with a real model (here: the fake OpenAI server
over HTTP) when OPENAI_BASE_URL is set."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

from basic import bare_minimum

from durable_swarm.testing import FakeOpenAIServer

from ._helpers import ANSI, EXAMPLES

REPO = EXAMPLES.parent


def run(*argv, stdin="", **env):
    """Run `python *argv` from the repository root with a clean model environment."""
    scrubbed = (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_MODEL",
        "DURABLE_SWARM_MODEL",
        "DURABLE_SWARM_DATABASE_URL",
    )
    environ = {k: v for k, v in os.environ.items() if k not in scrubbed}
    done = subprocess.run(
        [sys.executable, *argv],
        cwd=REPO,
        input=stdin,
        capture_output=True,
        text=True,
        env={**environ, "PYTHONIOENCODING": "utf-8", **env},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return ANSI.sub("", done.stdout)


def test_run_as_a_file_from_the_repository_root():
    out = run("examples/basic/bare_minimum.py")
    assert out.splitlines()[-1] == "Hello! How can I assist you today?"


def test_run_as_a_module_with_lines_piped_on_stdin():
    out = run("-m", "examples.triage_agent.run", stdin="I want to buy bees\n")
    assert "User: Triage Agent: transfer_to_sales()" in out
    assert "Sales Agent: Bees!" in out


def test_durable_run_stores_every_turn(tmp_path):
    db = tmp_path / "runs.sqlite"
    out = run(
        "examples/weather_agent/run.py",
        "--durable",
        "--database-url",
        str(db),
        "--say",
        "What's the weather in Oslo?",
        "--say",
        "And in Lima?",
    )
    assert f"(durable: runs are stored in sqlite:///{db}" in out
    assert "Weather Agent: It's 65°F in Oslo right now." in out
    assert "Weather Agent: It's 65°F in Lima right now." in out
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT status FROM workflow_status").fetchall()
    conn.close()
    assert rows == [("SUCCESS",), ("SUCCESS",)]


def test_a_real_model_is_used_when_configured(monkeypatch, run_example):
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        out = run_example(bare_minimum.main)
        requests = server.requests
    assert out.splitlines()[0].startswith("(real model: ")
    assert out.splitlines()[-1] == "You said: Hi!"
    assert requests[0]["model"] == "gpt-4o"


def test_offline_flag_wins_over_a_configured_model(monkeypatch, run_example):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-used")
    out = run_example(bare_minimum.main, "--offline")
    assert out.splitlines()[-1] == "Hello! How can I assist you today?"


def test_openai_model_picks_the_model_for_every_agent(monkeypatch, run_example):
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_MODEL", "local-model")
        run_example(bare_minimum.main)
        requests = server.requests
    assert requests[0]["model"] == "local-model"


def test_model_and_base_url_options_pick_a_real_model(run_example):
    with FakeOpenAIServer() as server:
        out = run_example(
            bare_minimum.main, "--base-url", server.base_url, "--model", "small-local-model"
        )
        requests = server.requests
    assert out.splitlines()[0] == f"(real model: small-local-model at {server.base_url}/)"
    assert out.splitlines()[-1] == "You said: Hi!"
    assert [r["model"] for r in requests] == ["small-local-model"]


def test_evals_honour_durable(tmp_path):
    db = tmp_path / "evals.sqlite"
    out = run("examples/triage_agent/evals.py", "--durable", "--database-url", str(db))
    assert "4/4 cases passed" in out
    assert f"(durable: runs are stored in sqlite:///{db}" in out
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT status FROM workflow_status").fetchall()
    conn.close()
    assert rows == [("SUCCESS",)] * 4  # every case was a durable run
