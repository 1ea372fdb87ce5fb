"""`demo` (list the examples, run one, the refund demo by default) and `chat module:agent` (the
durable terminal chat)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from durable_swarm.testing import FakeOpenAIServer

from ._helpers import cli_batch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    """demo and chat commands in one child process; chat talks to a fake OpenAI server."""
    tmp_path = tmp_path_factory.mktemp("demos")
    demo_db, chat_db = tmp_path / "demo.sqlite", tmp_path / "chat.sqlite"
    # An examples directory without the refund demo, to see `demo` say it is missing.
    no_refund = tmp_path / "examples"
    (no_refund / "hello").mkdir(parents=True)
    (no_refund / "_common.py").write_text("")
    (no_refund / "hello" / "main.py").write_text(
        '"""Say hello."""\n\nif __name__ == "__main__":\n    print("hello")\n'
    )
    agent = f"{EXAMPLES / 'basic' / 'bare_minimum.py'}:agent"
    with FakeOpenAIServer() as server:
        model = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test"}
        results = cli_batch(
            tmp_path,
            None,
            ["demo", "--list"],
            ["demo", "--list", "--json"],
            {"argv": ["demo"], "env": {"DURABLE_SWARM_EXAMPLES": str(no_refund)}},
            {
                "argv": ["demo", "triage_agent", "--durable", "--say", "I want to buy bees"],
                "env": {"DURABLE_SWARM_DATABASE_URL": str(demo_db)},
            },
            ["runs", "list", "--json", "--database-url", str(demo_db)],
            {
                "argv": ["chat", agent, "--database-url", str(chat_db), "--session", "s1"],
                "env": model,
                "stdin": "hello there\nsecond line\n",
            },
            ["sessions", "show", "s1", "--json", "--database-url", str(chat_db)],
            {"argv": ["chat", "no_such_module:agent"], "env": model},
            {"argv": ["chat", "json:dumps"], "env": model},
            ["chat", agent, "--database-url", str(chat_db)],
            {
                "argv": [
                    "chat",
                    agent,
                    "--database-url",
                    str(chat_db),
                    "--session",
                    "s2",
                    "--model",
                    "cli-model",
                    "--base-url",
                    server.base_url,
                ],
                "stdin": "pick a model\n",
            },
            ["runs", "list", "--json", "--database-url", str(chat_db), "--search", "pick a"],
            ["--version"],
            {
                "argv": ["chat", agent, "--database-url", str(chat_db), "--session", "s1"],
                "env": model,
                "stdin": "third line\n",
            },
        )
        results.append([r["model"] for r in server.requests])  # type: ignore[arg-type]
    return results


def test_demo_list_names_every_example(demos):
    listing = demos[0]
    assert listing.status == 0, listing.stderr
    for name in (
        "basic.bare_minimum",
        "basic.agent_handoff",
        "triage_agent",
        "triage_agent.evals",
        "weather_agent",
        "airline",
        "airline.evals.function_evals",
        "support_bot",
        "personal_shopper",
    ):
        assert re.search(rf"^  {re.escape(name)}\s", listing.stdout, re.M), name
    names = {d["name"] for d in demos[1].json()["demos"]}
    assert "basic.simple_loop_no_helpers" in names
    assert all(Path(d["path"]).is_file() for d in demos[1].json()["demos"])


def test_demo_defaults_to_the_refund_demo_and_says_when_it_is_missing(demos):
    result = demos[2]
    assert result.status == 1
    assert "The refund demo is not available" in result.stderr
    assert "available: hello" in result.stderr
    assert "Traceback" not in result.stderr
    if (EXAMPLES / "refund").is_dir():
        assert re.search(r"^  refund\s", demos[0].stdout, re.M)


def test_demo_runs_an_example_by_name_with_its_arguments(demos):
    result = demos[3]
    assert result.status == 0, result.stderr
    assert "(offline: scripted model" in result.stdout
    assert "Sales Agent: Bees!" in ANSI.sub("", result.stdout)
    runs = demos[4].json()["runs"]
    assert [r["status"] for r in runs] == ["succeeded"]
    assert runs[0]["agent"] == "Sales Agent"


def test_chat_is_the_durable_repl(demos):
    result = demos[5]
    assert result.status == 0, result.stderr
    assert "Starting Swarm CLI" in result.stdout
    assert "Agent: You said: hello there" in result.stdout
    assert "Agent: You said: second line" in result.stdout
    assert not ANSI.search(result.stdout), "colours in a pipe"
    # every line was a run of session s1, which keeps the conversation
    session = demos[6].json()["session"]
    assert session["name"] == "s1" and session["runs"] == 2 and session["held_by"] is None
    assert [m["content"] for m in session["messages"]] == [
        "hello there", "You said: hello there", "second line", "You said: second line",
    ]  # fmt: skip
    # a later chat of the session shows the earlier messages, and the model sees them
    again = demos[13]
    assert again.status == 0, again.stderr
    assert "(session s1: 4 earlier messages)" in again.stdout
    assert "User: hello there" in again.stdout
    assert "Agent: You said: third line" in again.stdout


def test_chat_reports_bad_targets_and_a_missing_model(demos):
    assert demos[7].status == 1
    assert "Cannot import 'no_such_module'" in demos[7].stderr
    assert demos[8].status == 1
    assert "'json:dumps' is a function, not an Agent" in demos[8].stderr
    assert demos[9].status == 1
    assert "chat needs a model: set OPENAI_API_KEY" in demos[9].stderr
    for result in demos[7:10]:
        assert "Traceback" not in result.stderr


def test_chat_takes_the_model_and_the_server_from_its_options(demos):
    chat, listed = demos[10], demos[11]
    assert chat.status == 0, chat.stderr
    assert "model cli-model" in chat.stdout
    assert "Agent: You said: pick a model" in chat.stdout
    assert listed.status == 0, listed.stderr
    assert [r["status"] for r in listed.json()["runs"]] == ["succeeded"]
    assert demos[14][-2] == "cli-model"  # what the server was asked for


def test_version_is_the_package_version(demos):
    from importlib.metadata import version

    import durable_swarm

    assert durable_swarm.__version__ == version("durable-swarm")
    assert demos[12].status == 0
    assert demos[12].stdout.strip() == f"durable-swarm {durable_swarm.__version__}"
