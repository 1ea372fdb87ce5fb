"""The public surface: the exact names each public module exports, their docstrings, what
importing the package loads, and the names that moved (they still import, with a warning)."""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

PUBLIC: dict[str, set[str]] = {
    "durable_swarm": {
        "AfterWork",
        "AfterWorkOption",
        "Agent",
        "AgentNotFoundError",
        "AskUser",
        "Budget",
        "BudgetExceededError",
        "ChatResult",
        "ContextExpression",
        "ContextExpressionError",
        "DatabaseUnavailableError",
        "DecisionConflictError",
        "DuplicateAgentError",
        "DurableClient",
        "DurableSwarm",
        "DurableSwarmError",
        "FileTools",
        "Guardrail",
        "GuardrailResult",
        "GuardrailTripped",
        "MCPServerUnavailableError",
        "MCPTools",
        "ModelCallError",
        "ModelLimits",
        "ModelResponseError",
        "NonJsonValueError",
        "OnCondition",
        "OnContextCondition",
        "OutputValidationError",
        "Response",
        "Result",
        "RunCancelledError",
        "RunError",
        "RunHandle",
        "RunInfo",
        "RunNotFoundError",
        "SessionBusyError",
        "SessionInfo",
        "SessionNotFoundError",
        "ShellTool",
        "Skill",
        "Swarm",
        "TodoItem",
        "ToolResultNotSerializableError",
        "ToolUnavailableError",
        "UpdateSystemMessage",
        "Usage",
        "ask_user",
        "create_durable_agent",
        "guardrail",
        "initiate_swarm_chat",
        "skill",
        "tool",
    },
    "durable_swarm.ag2": {
        "AFTER_WORK",
        "ON_CONDITION",
        "AfterWork",
        "AfterWorkOption",
        "ChatResult",
        "ContextExpression",
        "OnCondition",
        "OnContextCondition",
        "SwarmAgent",
        "SwarmResult",
        "UpdateSystemMessage",
        "initiate_swarm_chat",
    },
    "durable_swarm.errors": {
        "AgentNotFoundError",
        "BudgetExceededError",
        "ContextExpressionError",
        "DatabaseFaultError",
        "DatabaseUnavailableError",
        "DecisionConflictError",
        "DuplicateAgentError",
        "DurableSwarmError",
        "EncryptionKeyError",
        "ExecutorIdInUseError",
        "GuardrailTripped",
        "MCPServerUnavailableError",
        "ModelCallError",
        "ModelResponseError",
        "NonJsonValueError",
        "OutputValidationError",
        "RunCancelledError",
        "RunError",
        "RunNotFoundError",
        "SessionBusyError",
        "SessionNotFoundError",
        "SkillCompositionError",
        "SwarmNotFoundError",
        "ToolResultNotSerializableError",
        "ToolUnavailableError",
        "WorkspaceError",
    },
    "durable_swarm.compaction": {
        "CONTEXT_WINDOWS",
        "SUMMARY_INSTRUCTIONS",
        "SUMMARY_PREFIX",
        "Summarize",
        "Window",
        "check_compact_at",
        "compaction_budget",
        "estimate_tokens",
        "session_messages",
        "summary_message",
        "summary_request",
    },
    "durable_swarm.sessions": {
        "MemorySessions",
        "SessionInfo",
        "check_session_name",
        "session_loop",
    },
    "durable_swarm.guardrails": {
        "CheckGuardrail",
        "Guardrail",
        "GuardrailResult",
        "GuardrailTripped",
        "Parallel",
        "as_guardrail",
        "guardrail",
    },
    "durable_swarm.output": {
        "OUTPUT_MODES",
        "OUTPUT_TOOL",
        "Checked",
        "OutputShape",
        "ask_for_output",
        "check",
        "from_json",
        "shape_of",
        "to_json",
    },
    "durable_swarm.testing": {
        "AsyncScriptedClient",
        "Entry",
        "FakeOpenAIServer",
        "Fault",
        "Reply",
        "Script",
        "ScriptError",
        "ScriptExhaustedError",
        "ScriptFunction",
        "ScriptedClient",
        "ToolCall",
        "calls",
        "echo",
        "text",
    },
    "durable_swarm.toolkit": {
        "FileTools",
        "MCPTools",
        "ShellTool",
        "Skill",
        "SkillCompositionError",
        "WorkspaceError",
        "skill",
        "skill_instructions",
        "skill_tools",
        "source_tools",
        "tool",
    },
    "durable_swarm.limits": {
        "LIMITS_ENV",
        "Limits",
        "ModelLimits",
        "check_limits",
        "estimate_tokens",
        "limits_for",
        "parse_duration",
        "parse_limits",
        "retry_after",
    },
    "durable_swarm.usage": {
        "Budget",
        "Prices",
        "Tally",
        "Usage",
        "call_cost",
        "check_budget",
        "check_prices",
        "has_price",
    },
    "durable_swarm.tracing": {
        "CAPTURE_CONTENT_ENV",
        "ChatSpan",
        "Run",
        "chat",
        "current_traceparent",
        "enabled",
        "record_completion",
        "start_run",
        "tool",
        "tool_result",
    },
    "durable_swarm.types": {
        "Agent",
        "AgentFunction",
        "ChatCompletionMessage",
        "ChatCompletionMessageToolCall",
        "Function",
        "Response",
        "Result",
    },
    "durable_swarm.web": {"check_bind", "create_app", "serve"},
}

# Heavy or optional packages that `import durable_swarm` and in-memory runs leave alone.
DURABLE = ("dbos", "sqlalchemy", "durable_swarm.durable")
OPTIONAL = ("fastapi", "mcp", "opentelemetry")


def _import(module: str) -> Any:
    if module == "durable_swarm.web":
        pytest.importorskip("fastapi", reason="the web console needs the 'web' extra")
    return importlib.import_module(module)


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_all_is_exactly_the_public_names(module: str) -> None:
    assert set(_import(module).__all__) == PUBLIC[module]


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_every_public_name_resolves_and_is_documented(module: str) -> None:
    mod = _import(module)
    for name in mod.__all__:
        value = getattr(mod, name)
        if inspect.isclass(value) or inspect.isroutine(value):
            assert value.__doc__ and value.__doc__.strip(), f"{module}.{name} has no docstring"
        else:  # a constant or a type alias: its module's docstring says what it is
            assert name in (mod.__doc__ or ""), f"{module}.{name} is not in {module}'s docstring"


def _loaded_after(
    code: str, watched: tuple[str, ...] = (*DURABLE, *OPTIONAL, "openai", "genai_prices")
) -> dict[str, bool]:
    """Run `code` in a fresh interpreter; which of the `watched` modules it loaded."""
    report = f"print(json.dumps({{m: m in sys.modules for m in {watched!r}}}))"
    probe = f"{code}\nimport json, sys\n{report}"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
    ).stdout
    return dict(json.loads(out.splitlines()[-1]))


def test_importing_the_package_loads_nothing_heavy() -> None:
    loaded = _loaded_after("import durable_swarm")

    assert [name for name, is_loaded in loaded.items() if is_loaded] == []


def test_an_in_memory_run_never_loads_the_durable_layer() -> None:
    loaded = _loaded_after(
        "from durable_swarm import Agent, Swarm\n"
        "from durable_swarm.testing import ScriptedClient, text\n"
        "reply = Swarm(ScriptedClient([text('hi')])).run(Agent(), [{'role': 'user', "
        "'content': 'x'}])\n"
        "assert reply.messages[-1]['content'] == 'hi'"
    )

    assert [name for name in (*DURABLE, *OPTIONAL) if loaded[name]] == []


def test_a_durable_name_loads_the_durable_layer_when_used() -> None:
    loaded = _loaded_after("import durable_swarm\ndurable_swarm.DurableSwarm")

    assert all(loaded[name] for name in DURABLE)


def test_the_command_loads_no_turn_loop_worker_or_web_app_until_a_command_needs_one() -> None:
    running = ("durable_swarm.loop", "durable_swarm.durable._worker", "durable_swarm.web._app")
    code = (
        "import contextlib, io\n"
        "from durable_swarm.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--version'])"
    )

    loaded = _loaded_after(code, running)

    assert [name for name in running if loaded[name]] == []


def test_durable_client_is_exported_at_the_top_level() -> None:
    import durable_swarm
    from durable_swarm.durable import DurableClient

    assert durable_swarm.DurableClient is DurableClient


def test_star_import_gives_the_public_names_without_warnings() -> None:
    namespace: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec("from durable_swarm import *", namespace)

    assert set(namespace) - {"__builtins__"} == PUBLIC["durable_swarm"]


@pytest.mark.parametrize(
    ("old_module", "name", "new_module"),
    [
        ("durable_swarm", "SwarmAgent", "durable_swarm.ag2"),
        ("durable_swarm", "SwarmResult", "durable_swarm.ag2"),
        ("durable_swarm", "ON_CONDITION", "durable_swarm.ag2"),
        ("durable_swarm", "AFTER_WORK", "durable_swarm.ag2"),
        ("durable_swarm.types", "SwarmAgent", "durable_swarm.ag2"),
        ("durable_swarm.types", "SwarmResult", "durable_swarm.ag2"),
        ("durable_swarm.handoffs", "ON_CONDITION", "durable_swarm.ag2"),
        ("durable_swarm.handoffs", "AFTER_WORK", "durable_swarm.ag2"),
        ("durable_swarm", "JsonSerializer", "durable_swarm.durable"),
    ],
)
def test_a_moved_name_still_imports_with_a_warning_naming_its_new_place(
    old_module: str, name: str, new_module: str
) -> None:
    with pytest.warns(DeprecationWarning, match=rf"from {new_module} import {name}`") as caught:
        value = getattr(importlib.import_module(old_module), name)

    assert value is getattr(importlib.import_module(new_module), name)
    assert caught[0].filename == __file__  # the warning points at the importing line


def test_the_ag2_names_are_the_features_they_spell() -> None:
    from durable_swarm import AfterWork, Agent, OnCondition, Result
    from durable_swarm.ag2 import AFTER_WORK, ON_CONDITION, SwarmAgent, SwarmResult

    assert ON_CONDITION is OnCondition
    assert AFTER_WORK is AfterWork
    assert SwarmAgent("Helper", system_message="Be brief.").instructions == "Be brief."
    assert isinstance(SwarmAgent(), Agent)
    assert isinstance(SwarmResult(), Result)
    assert SwarmResult(values="done").value == "done"


def test_the_top_level_namespace_holds_only_its_public_names_and_modules() -> None:
    """No helper of `__init__` (typing, importlib, the lazy loader) is a public name there."""
    import subprocess
    import sys

    code = (
        "import types, durable_swarm as d; print(sorted(n for n, v in vars(d).items() if not "
        "n.startswith('_') and n not in d.__all__ and not isinstance(v, types.ModuleType)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
