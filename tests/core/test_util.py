"""SPEC "Import surface", `durable_swarm.util`: `debug_print` and `merge_chunk` act as Swarm's."""

from __future__ import annotations

import re
from collections import defaultdict

from durable_swarm import Agent
from durable_swarm.util import debug_print, merge_chunk

from ._mock import calling, completion, mock_client, tool_call


def test_debug_print_silent_without_debug(capsys):
    debug_print(False, "hidden")

    assert capsys.readouterr().out == ""


def test_debug_print_format(capsys):
    debug_print(True, "Getting", {"a": 1}, 2)

    out = capsys.readouterr().out
    assert re.fullmatch(
        r"\033\[97m\[\033\[90m\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\033\[97m\]\033\[90m "
        r"Getting \{'a': 1\} 2\033\[0m\n",
        out,
    )


def _swarm_message():
    """The message being built in Swarm's streaming loop."""
    return {
        "content": "",
        "sender": "A",
        "role": "assistant",
        "function_call": None,
        "tool_calls": defaultdict(
            lambda: {"function": {"arguments": "", "name": ""}, "id": "", "type": ""}
        ),
    }


def test_merge_chunk_appends_content_and_ignores_role():
    message = _swarm_message()

    merge_chunk(message, {"role": "assistant", "content": "Hel", "tool_calls": None})
    merge_chunk(message, {"content": "lo", "function_call": None})

    assert message["content"] == "Hello"
    assert message["role"] == "assistant"
    assert dict(message["tool_calls"]) == {}


def test_merge_chunk_merges_every_tool_call_of_a_delta():
    message = _swarm_message()

    merge_chunk(
        message,
        {
            "tool_calls": [
                {"index": 0, "id": "c0", "type": "function", "function": {"name": "a"}},
                {"index": 1, "id": "c1", "type": "function", "function": {"name": "b"}},
            ]
        },
    )
    merge_chunk(
        message,
        {
            "tool_calls": [
                {"index": 0, "id": None, "function": {"arguments": "{}", "name": None}},
                {"index": 1, "function": {"arguments": '{"x"', "name": None}},
            ]
        },
    )
    merge_chunk(message, {"tool_calls": [{"index": 1, "function": {"arguments": ": 1}"}}]})

    assert dict(message["tool_calls"]) == {
        0: {"function": {"arguments": "{}", "name": "a"}, "id": "c0", "type": "function"},
        1: {"function": {"arguments": '{"x": 1}', "name": "b"}, "id": "c1", "type": "function"},
    }


def test_merge_chunk_accepts_plain_dict_tool_calls():
    message = {"content": "", "tool_calls": {}}

    merge_chunk(message, {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]})

    assert message["tool_calls"][0]["function"] == {"arguments": "", "name": "f"}
    assert message["tool_calls"][0]["id"] == "c"


def test_debug_run_prints_swarm_debug_lines(make_swarm, capsys):
    def tool():
        return "x"

    client = mock_client(calling(tool_call("tool")), completion("done"))

    make_swarm(client).run(agent=Agent(functions=[tool]), messages=[], debug=True)

    out = capsys.readouterr().out
    for text in ("Getting chat completion for...:", "Received completion:", "Ending turn."):
        assert text in out
    assert "Processing tool call: tool" in out


def test_run_without_debug_prints_nothing(make_swarm, capsys):
    client = mock_client(completion("done"))

    make_swarm(client).run(agent=Agent(), messages=[])

    assert capsys.readouterr().out == ""
