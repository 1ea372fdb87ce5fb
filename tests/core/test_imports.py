"""SPEC "Import surface": Swarm's import lines work with `swarm` replaced by `durable_swarm`."""

from __future__ import annotations

import importlib

import openai.types.chat
import openai.types.chat.chat_completion_message_tool_call as openai_tool_call
import pytest


def test_top_level_names_match_swarm():
    from durable_swarm import Agent, Response, Result, Swarm
    from durable_swarm import types as types_module

    assert (Agent, Response, Result) == (
        types_module.Agent,
        types_module.Response,
        types_module.Result,
    )
    assert callable(Swarm.run)


def test_top_level_adds_result_and_durable_swarm():
    from durable_swarm import DurableSwarm, Result, Swarm

    assert Result().value == ""
    for method in ("run", "arun"):
        assert callable(getattr(DurableSwarm, method)), method
        assert callable(getattr(Swarm, method)), method


def test_top_level_all_lists_swarm_names_that_exist():
    import durable_swarm

    expected = {"Agent", "Response", "Result", "Swarm"}
    assert expected <= set(durable_swarm.__all__)
    for name in durable_swarm.__all__:
        assert hasattr(durable_swarm, name), name


def test_types_module_has_swarm_names():
    from durable_swarm.types import (  # noqa: F401
        Agent,
        ChatCompletionMessage,
        ChatCompletionMessageToolCall,
        Function,
        Response,
        Result,
    )


def test_types_reexports_openai_message_types():
    from durable_swarm import types

    assert types.ChatCompletionMessage is openai.types.chat.ChatCompletionMessage
    assert types.ChatCompletionMessageToolCall is openai_tool_call.ChatCompletionMessageToolCall
    assert types.Function is openai_tool_call.Function


def test_util_module_has_swarm_names():
    from durable_swarm.util import debug_print, function_to_json, merge_chunk

    assert all(callable(f) for f in (debug_print, function_to_json, merge_chunk))


def test_repl_module_has_swarm_names():
    repl = importlib.import_module("durable_swarm.repl")

    for name in ("run_demo_loop", "pretty_print_messages", "process_and_print_streaming_response"):
        assert callable(getattr(repl, name)), name
        assert getattr(repl, name).__doc__, f"{name} has no docstring"
    assert set(repl.__all__) == {
        "run_demo_loop",
        "pretty_print_messages",
        "process_and_print_streaming_response",
    }


def test_swarm_modules_and_ours_share_their_public_names():
    swarm = pytest.importorskip("swarm")
    swarm_types = importlib.import_module("swarm.types")
    swarm_util = importlib.import_module("swarm.util")
    ours = importlib.import_module("durable_swarm")
    ours_types = importlib.import_module("durable_swarm.types")
    ours_util = importlib.import_module("durable_swarm.util")

    for name in swarm.__all__:
        assert hasattr(ours, name), name
    swarm_names = ("Agent", "AgentFunction", "Response", "Result", "ChatCompletionMessage")
    swarm_names += ("ChatCompletionMessageToolCall", "Function")
    for name in swarm_names:
        assert hasattr(swarm_types, name), name
        assert hasattr(ours_types, name), name
    for name in ("function_to_json", "debug_print", "merge_chunk", "merge_fields"):
        assert hasattr(swarm_util, name), name
        assert hasattr(ours_util, name), name
