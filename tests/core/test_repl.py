"""SPEC "`run_demo_loop`": the terminal chat prints like Swarm's and carries agent and context."""

from __future__ import annotations

from types import SimpleNamespace

import openai
import pytest

from durable_swarm import Agent, Response, Result
from durable_swarm.repl import (
    pretty_print_messages,
    process_and_print_streaming_response,
    run_demo_loop,
)

from ._mock import calling, completion, mock_client, requests, text_stream, tool_call, tool_stream

BANNER = "Starting Swarm CLI 🐝\n"


def sender(name):
    return f"\033[94m{name}\033[0m:"


def tool_line(name, args):
    return f"\033[95m{name}\033[0m({args})"


OSLO_CALL = tool_line("get_weather", '"city"= "Oslo"')


class ScriptedInput:
    """An `input` replacement: returns the given lines, then raises `end` (EOF by default)."""

    def __init__(self, *lines, end=EOFError):
        self.lines = list(lines)
        self.prompts = []
        self.end = end

    def __call__(self, prompt):
        self.prompts.append(prompt)
        if not self.lines:
            raise self.end()
        return self.lines.pop(0)


def _weather_agent():
    def get_weather(city: str) -> str:
        return f"sunny in {city}"

    return Agent(name="Weather", functions=[get_weather])


# --- printing -----------------------------------------------------------------------------------


def test_pretty_print_messages_format(capsys):
    pretty_print_messages(
        [
            {"role": "user", "content": "ignored"},
            {"role": "assistant", "sender": "Bot", "content": "Hello!", "tool_calls": None},
            {"role": "tool", "content": "ignored too", "tool_call_id": "c", "tool_name": "t"},
            {
                "role": "assistant",
                "sender": "Bot",
                "content": None,
                "tool_calls": [
                    {"function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
                ],
            },
        ]
    )

    assert capsys.readouterr().out == (f"{sender('Bot')} Hello!\n{sender('Bot')} {OSLO_CALL}\n")


def test_pretty_print_several_tool_calls_start_on_new_line(capsys):
    pretty_print_messages(
        [
            {
                "role": "assistant",
                "sender": "Bot",
                "content": "Working on it",
                "tool_calls": [
                    {"function": {"name": "a", "arguments": '{"x": 1, "y": "z"}'}},
                    {"function": {"name": "b", "arguments": "{}"}},
                ],
            }
        ]
    )

    assert capsys.readouterr().out == (
        f"{sender('Bot')} Working on it\n\n"
        + tool_line("a", '"x"= 1, "y"= "z"')
        + "\n"
        + tool_line("b", "")
        + "\n"
    )


def test_pretty_print_unparsable_arguments_shown_raw(capsys):
    pretty_print_messages(
        [
            {
                "role": "assistant",
                "sender": "Bot",
                "content": None,
                "tool_calls": [{"function": {"name": "f", "arguments": "{not json"}}],
            }
        ]
    )

    assert capsys.readouterr().out == f"{sender('Bot')} {tool_line('f', '{not json')}\n"


def test_process_and_print_streaming_response_prints_and_returns(capsys):
    response = Response(messages=[{"role": "assistant", "content": "Hi there"}])
    events = [
        {"delim": "start"},
        {"role": "assistant", "content": "", "sender": "Bot", "tool_calls": None},
        {"role": None, "content": "Hi", "tool_calls": None},
        {"role": None, "content": " there", "tool_calls": None},
        {"delim": "end"},
        {"response": response},
    ]

    assert process_and_print_streaming_response(iter(events)) is response
    assert capsys.readouterr().out == f"{sender('Bot')} Hi there\n"


def test_process_and_print_streaming_tool_calls_printed_whole(capsys):
    events = [
        {"delim": "start"},
        {"role": "assistant", "content": None, "sender": "Bot", "tool_calls": None},
        {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"name": None, "arguments": '{"a"'}}]},
        {"tool_calls": [{"index": 0, "function": {"name": None, "arguments": ": 1}"}}]},
        {"delim": "end"},
    ]

    assert process_and_print_streaming_response(events) is None
    assert capsys.readouterr().out == f"{sender('Bot')} " + tool_line("f", '"a"= 1') + "\n"


# --- the loop -----------------------------------------------------------------------------------


def test_repl_prints_banner_and_reads_user_prompt(make_swarm, capsys):
    read = ScriptedInput("hello")
    client = mock_client(completion("Hi!"))

    assert run_demo_loop(Agent(), swarm=make_swarm(client), input_fn=read) is None

    out = capsys.readouterr().out
    assert out.startswith(BANNER)
    assert read.prompts == ["User: ", "User: "]
    assert requests(client)[0]["messages"][1:] == [{"role": "user", "content": "hello"}]


def test_repl_prints_messages_and_tool_calls(make_swarm, capsys):
    client = mock_client(calling(tool_call("get_weather", {"city": "Oslo"})), completion("Sunny"))

    run_demo_loop(_weather_agent(), swarm=make_swarm(client), input_fn=ScriptedInput("weather?"))

    assert capsys.readouterr().out == (
        BANNER + f"{sender('Weather')} {OSLO_CALL}\n" + f"{sender('Weather')} Sunny\n" + "\n"
    )


def test_repl_streaming_prints_same_output(make_swarm, capsys):
    client = mock_client(
        tool_stream(tool_call("get_weather", {"city": "Oslo"})), text_stream("Sun", "ny")
    )

    run_demo_loop(
        _weather_agent(), stream=True, swarm=make_swarm(client), input_fn=ScriptedInput("w?")
    )

    assert capsys.readouterr().out == (
        BANNER + f"{sender('Weather')} {OSLO_CALL}\n" + f"{sender('Weather')} Sunny\n" + "\n"
    )
    assert requests(client)[0]["stream"] is True


@pytest.mark.memory_only(
    "times the printing against the model's chunks; a durable run's stream events arrive "
    "through the database, after the chunks"
)
def test_repl_streaming_prints_content_as_it_arrives(make_swarm, capsys):
    seen_before_second_piece = []

    def chunks():
        first, hel, lo, end = text_stream("Hel", "lo")
        yield first
        yield hel
        seen_before_second_piece.append(capsys.readouterr().out)
        yield lo
        yield end

    client = mock_client(chunks())

    run_demo_loop(
        Agent(name="Bot"), stream=True, swarm=make_swarm(client), input_fn=ScriptedInput("x")
    )

    assert seen_before_second_piece == [BANNER + f"{sender('Bot')} Hel"]
    assert capsys.readouterr().out == "lo\n\n"


def test_repl_agent_carries_over(make_swarm, capsys):
    second = Agent(name="Second", instructions="I am second.")

    def transfer():
        return second

    first = Agent(name="First", instructions="I am first.", functions=[transfer])
    client = mock_client(calling(tool_call("transfer")), completion("hello"), completion("again"))

    run_demo_loop(first, swarm=make_swarm(client), input_fn=ScriptedInput("one", "two"))

    system_prompts = [r["messages"][0]["content"] for r in requests(client)]
    assert system_prompts == ["I am first.", "I am second.", "I am second."]
    assert f"{sender('Second')} again" in capsys.readouterr().out


def test_repl_history_carries_over(make_swarm):
    client = mock_client(completion("first answer"), completion("second answer"))

    run_demo_loop(Agent(), swarm=make_swarm(client), input_fn=ScriptedInput("one", "two"))

    second_request = requests(client)[1]["messages"][1:]
    assert [(m["role"], m["content"]) for m in second_request] == [
        ("user", "one"),
        ("assistant", "first answer"),
        ("user", "two"),
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_repl_context_variables_carry_over(make_swarm, stream):
    def instructions(context_variables):
        return f"name={context_variables['name']} visits={context_variables['visits']}"

    def remember(name: str):
        return Result(value="ok", context_variables={"name": name})

    agent = Agent(instructions=instructions, functions=[remember])
    if stream:
        turns = [tool_stream(tool_call("remember", {"name": "Ann"})), text_stream("a")]
        turns.append(text_stream("b"))
    else:
        turns = [calling(tool_call("remember", {"name": "Ann"})), completion("a"), completion("b")]
    client = mock_client(*turns)
    start = {"visits": 3}

    run_demo_loop(
        agent, start, stream=stream, swarm=make_swarm(client), input_fn=ScriptedInput("1", "2")
    )

    system_prompts = [r["messages"][0]["content"] for r in requests(client)]
    assert system_prompts == ["name= visits=3", "name=Ann visits=3", "name=Ann visits=3"]
    assert start == {"visits": 3}


def test_repl_exits_cleanly_on_eof(make_swarm, capsys):
    client = mock_client(completion("never"))

    run_demo_loop(Agent(), swarm=make_swarm(client), input_fn=ScriptedInput())

    assert capsys.readouterr().out == BANNER + "\n"
    assert client.chat.completions.create.call_count == 0


def test_repl_exits_cleanly_on_keyboard_interrupt_at_prompt(make_swarm, capsys):
    client = mock_client(completion("answer"))

    run_demo_loop(
        Agent(), swarm=make_swarm(client), input_fn=ScriptedInput("hi", end=KeyboardInterrupt)
    )

    assert capsys.readouterr().out.endswith(f"{sender('Agent')} answer\n\n")


@pytest.mark.memory_only(
    "the mock raises KeyboardInterrupt from the model call, which a durable run makes in a DBOS "
    "thread (where a real Ctrl-C never arrives); there it fails the run instead"
)
def test_repl_exits_cleanly_on_keyboard_interrupt_during_run(make_swarm, capsys):
    client = mock_client(completion("never"))
    client.chat.completions.create.side_effect = KeyboardInterrupt

    run_demo_loop(Agent(), swarm=make_swarm(client), input_fn=ScriptedInput("hi", "unused"))

    assert capsys.readouterr().out == BANNER + "\n"


def test_repl_reads_patched_builtins_input(make_swarm, monkeypatch, capsys):
    read = ScriptedInput("from builtins")
    monkeypatch.setattr("builtins.input", read)
    client = mock_client(completion("ok"))

    run_demo_loop(Agent(), swarm=make_swarm(client))

    assert read.prompts == ["User: ", "User: "]
    assert requests(client)[0]["messages"][-1]["content"] == "from builtins"


def test_repl_without_swarm_creates_swarm(monkeypatch, capsys):
    client = mock_client(completion("made by default"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setattr(openai, "OpenAI", lambda: client)

    run_demo_loop(Agent(), input_fn=ScriptedInput("hi"))

    assert f"{sender('Agent')} made by default" in capsys.readouterr().out


def test_repl_accepts_any_object_with_swarm_run(capsys):
    calls = []
    agent = Agent(name="Fake")

    def run(agent, messages, context_variables, stream, debug):
        calls.append((agent.name, list(messages), dict(context_variables), stream, debug))
        reply = {"role": "assistant", "sender": agent.name, "content": "fake reply"}
        return Response(messages=[reply], agent=agent, context_variables={"n": 1})

    run_demo_loop(
        agent, {"n": 0}, debug=True, swarm=SimpleNamespace(run=run), input_fn=ScriptedInput("a")
    )

    assert calls == [("Fake", [{"role": "user", "content": "a"}], {"n": 0}, False, True)]
    assert f"{sender('Fake')} fake reply" in capsys.readouterr().out
