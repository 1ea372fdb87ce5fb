"""The research example (`examples/research_agent`) runs offline and writes its report.

The durable default runs as a separate process (DBOS is one per process), in a temporary working
directory that holds its SQLite file and workspace; the in-memory mode runs in this process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MAIN = EXAMPLES / "research_agent" / "main.py"
OFFLINE_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL")
DATABASE_ENV = ("DURABLE_SWARM_DATABASE_URL", "DBOS_SYSTEM_DATABASE_URL")


def test_durable_research_run_writes_the_report(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE_ENV + DATABASE_ENV}
    env["DURABLE_SWARM_LOG_LEVEL"] = "ERROR"
    done = subprocess.run(
        [sys.executable, str(MAIN), "--say", "a school science club", "--run-id", "bees"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout

    assert "(offline: scripted model" in out
    assert "durable: run bees in sqlite:///" in out
    assert (tmp_path / "durable_swarm.sqlite").exists()
    # the plan as first seen while the run goes on (polled), then its progress to the end
    assert "\nPlan:\n  1. [" in out
    assert "4. [done] Save the report as report.md" in out
    assert "> a school science club" in out
    assert "sub-agents' runs are bees-sub1, bees-sub2" in out
    report = (tmp_path / "research_workspace" / "report.md").read_text()
    assert report.startswith("# How honeybees communicate\n\n_Written for a school science club._")
    assert "waggle dance" in report
    assert "## Sources\n\n- honeybee-dance\n- honeybee-scent\n" in report
    assert "Done: your report on how honeybees communicate is saved as report.md" in out


@pytest.fixture
def research_main(monkeypatch):
    for name in OFFLINE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from research_agent.main import main

    return main


def test_in_memory_run_revises_the_plan_when_the_library_has_nothing(
    research_main, tmp_path, capsys
):
    workspace = tmp_path / "ws"

    research_main(
        ["Write a report on volcanoes.", "--in-memory", "--workspace", str(workspace),
         "--say", "me"]
    )  # fmt: skip

    out = capsys.readouterr().out
    assert "2. [failed] Find what the library says about volcanoes" in out
    assert "3. [done] Tell the user the library cannot answer this" in out
    assert "the library has no document about it" in out
    assert list(workspace.iterdir()) == []  # nothing was saved


def test_search_tools_over_the_bundled_library(research_main):
    from research_agent.agents import read_document, search_corpus

    found = search_corpus("water ice on the Moon").splitlines()
    assert found[0].startswith("lunar-water: Water on the Moon.")
    assert search_corpus("volcanoes") == "No document matches 'volcanoes'. Try other keywords."
    assert read_document("tidal-power").startswith("# Tidal power")
    assert read_document("nope").startswith("Error: there is no document 'nope'")
