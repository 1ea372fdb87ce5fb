"""Skills: definition checks, nesting, deterministic order, clash errors, `@skill`."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from durable_swarm import Agent, DurableSwarmError, Swarm
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text
from durable_swarm.toolkit import (
    Skill,
    SkillCompositionError,
    skill,
    skill_instructions,
    skill_tools,
)
from durable_swarm.toolkit import tool as tool_decorator
from durable_swarm.tools import model_tool_schema, tool_name, tool_spec


def make(name: str) -> Any:
    """A distinct plain function named `name`."""

    def func() -> str:
        return name

    func.__name__ = func.__qualname__ = name
    return func


def names(tools: list[Any]) -> list[str]:
    return [tool_name(t) for t in tools]


# --- definition ----------------------------------------------------------------------------------


def test_skill_stores_tuples_and_is_frozen():
    a = make("a")
    s = Skill("s", "Use a.", [a])

    assert s.tools == (a,) and s.skills == ()
    with pytest.raises(AttributeError):
        s.name = "t"
    assert Skill("s", "Use a.", (a,)) == s


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"name": ""}, ValueError, "non-empty string"),
        ({"name": "s", "instructions": 3}, TypeError, "instructions must be a string"),
        ({"name": "s", "tools": "abc"}, TypeError, "tools must be a list, got str"),
        ({"name": "s", "tools": [3]}, TypeError, "tools must be functions, got int 3"),
        ({"name": "s", "tools": [lambda: ""]}, ValueError, "'<lambda>'.*@tool\\(name=...\\)"),
        ({"name": "s", "skills": [make("f")]}, TypeError, "includes function .*not a Skill"),
        ({"name": "s", "skills": Skill("t")}, TypeError, "skills must be a list, got Skill"),
    ],
)
def test_bad_definitions_fail_early(kwargs, error, match):
    with pytest.raises(error, match=match):
        Skill(**kwargs)


def test_a_skill_among_tools_points_to_skills():
    with pytest.raises(
        TypeError, match=r"skill 'inner' is listed among the tools.*skills=\[\.\.\.\]"
    ):
        Skill("outer", tools=[Skill("inner")])


def test_helpers_refuse_non_skills():
    with pytest.raises(TypeError, match=r"skills must be Skill objects, got function .*@skill"):
        skill_tools([make("f")])
    with pytest.raises(TypeError, match="skills must be Skill objects, got str"):
        skill_instructions(["files"])


# --- composition ---------------------------------------------------------------------------------

A1, A2, B1, C1, D1, E1 = (make(n) for n in ("a1", "a2", "b1", "c1", "d1", "e1"))


def tree() -> Skill:
    c = Skill("c", "Use c1.", [C1])
    b = Skill("b", "Use b1.", [B1], skills=[c])
    d = Skill("d", "", [D1])  # no instructions: no section
    return Skill("a", "Use a1 and a2.", [A1, A2], skills=[b, d])


def test_nested_skills_depth_first_in_order():
    skills = [tree(), Skill("e", "  Use e1.\n    Carefully.  ", [E1])]

    assert names(skill_tools(skills)) == ["a1", "a2", "b1", "c1", "d1", "e1"]
    assert skill_instructions(skills) == (
        "## a\nUse a1 and a2.\n\n## b\nUse b1.\n\n## c\nUse c1.\n\n## e\nUse e1.\nCarefully."
    )


def test_order_follows_the_list_given():
    x, y = Skill("x", "X.", [A1]), Skill("y", "Y.", [B1])

    assert names(skill_tools([y, x])) == ["b1", "a1"]
    assert skill_instructions([y, x]) == "## y\nY.\n\n## x\nX."


def test_no_skills_add_nothing():
    assert skill_tools([]) == []
    assert skill_instructions([]) == ""
    assert skill_instructions([Skill("quiet", "", [A1])]) == ""


def test_shared_skill_and_shared_tool_count_once():
    shared = Skill("shared", "Shared.", [C1])
    left = Skill("left", "Left.", [A1, C1], skills=[shared])
    right = Skill("right", "Right.", [B1], skills=[shared, Skill("shared", "Shared.", [C1])])

    assert names(skill_tools([left, right])) == ["a1", "c1", "b1"]
    assert (
        skill_instructions([left, right])
        == "## left\nLeft.\n\n## shared\nShared.\n\n## right\nRight."
    )


def test_tool_clash_between_skills_names_both():
    def lookup() -> str:
        return "one"

    first = Skill("search", tools=[lookup])
    lookup_again = make("lookup")
    second = Skill("catalog", tools=[lookup_again])

    with pytest.raises(SkillCompositionError) as caught:
        skill_tools([first, second])

    message = str(caught.value)
    assert "Tool name 'lookup' is used twice" in message
    assert (
        f"skill 'search' ({__name__}.test_tool_clash_between_skills_names_both.<locals>" in message
    )
    assert f"skill 'catalog' ({__name__}.lookup)" in message
    assert "@tool(name=...)" in message
    assert caught.value.name == "lookup"


def test_tool_clash_inside_a_nested_skill_fails_at_definition():
    inner = Skill("inner", tools=[make("fetch")])
    middle = Skill("middle", skills=[inner])

    with pytest.raises(
        SkillCompositionError, match=r"skill 'inner' \(included by 'outer' > 'middle'\)"
    ):
        Skill("outer", tools=[make("fetch")], skills=[middle])


def test_tool_clash_with_the_agents_own_functions():
    mine = make("save")
    theirs = Skill("storage", tools=[make("save"), make("load")])

    with pytest.raises(
        SkillCompositionError, match=r"by the agent's own functions .* by skill 'storage'"
    ):
        skill_tools([theirs], functions=[mine])


def test_renaming_with_tool_resolves_a_clash():
    theirs = Skill("storage", tools=[tool_decorator(name="storage_save")(make("save"))])

    assert names(skill_tools([theirs], functions=[make("save")])) == ["storage_save"]


def test_a_tool_the_agent_already_has_is_not_repeated():
    shared = make("shared")

    assert skill_tools([Skill("s", tools=[shared, A1])], functions=[shared]) == [A1]


def test_two_different_skills_with_one_name():
    with pytest.raises(SkillCompositionError, match="Two different skills are named 'files'"):
        skill_instructions([Skill("files", "One."), Skill("files", "Two.")])


def test_composition_error_is_a_value_error_and_pickles():
    try:
        skill_tools([Skill("x", tools=[make("t")]), Skill("y", tools=[make("t")])])
    except SkillCompositionError as e:
        error = e
    assert isinstance(error, ValueError) and isinstance(error, DurableSwarmError)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is SkillCompositionError
    assert (str(copy), copy.name) == (str(error), "t")


# --- @skill on a function ------------------------------------------------------------------------


@skill
def notes() -> list[Any]:
    """Keep notes with add_note;
    read them back with list_notes."""
    saved: list[str] = []

    @tool_decorator(timeout=5, retries=1)
    def add_note(text: str) -> str:
        """Remember a note.

        Args:
            text: what to remember.
        """
        saved.append(text)
        return "noted"

    def list_notes() -> str:
        """Every note so far, one per line."""
        return "\n".join(saved)

    def clear_notes() -> str:
        """Forget every note."""
        saved.clear()
        return "cleared"

    return [add_note, list_notes, clear_notes]


def test_skill_function_bare():
    assert isinstance(notes, Skill)
    assert notes.name == "notes"
    assert notes.instructions == "Keep notes with add_note;\nread them back with list_notes."
    assert names(list(notes.tools)) == ["add_note", "list_notes", "clear_notes"]

    add_note, list_notes, clear_notes = notes.tools
    assert clear_notes() == "cleared"
    assert add_note("milk") == "noted" and add_note("eggs") == "noted"
    assert list_notes() == "milk\neggs"  # the tools share state through the closure
    assert (tool_spec(add_note).timeout, tool_spec(add_note).retries) == (5.0, 1)
    schema = model_tool_schema(add_note)["function"]["parameters"]
    assert schema["properties"] == {"text": {"type": "string", "description": "what to remember."}}


def test_skill_function_with_options_and_nesting():
    calls_made: list[str] = []

    @skill(name="diagnostics", instructions="Use ping first.", skills=[notes])
    def diagnostics_tools() -> tuple[Any, ...]:
        """Ignored: instructions are given."""
        calls_made.append("built")
        return (make("ping"), make("uptime"))

    assert calls_made == ["built"]  # called once, when decorated
    assert diagnostics_tools.name == "diagnostics"
    assert names(skill_tools([diagnostics_tools])) == [
        "ping",
        "uptime",
        "add_note",
        "list_notes",
        "clear_notes",
    ]
    assert skill_instructions([diagnostics_tools]).startswith(
        "## diagnostics\nUse ping first.\n\n## notes\n"
    )


def test_skill_decorator_misuse():
    class Toolbox:
        pass

    with pytest.raises(TypeError, match=r"decorates a plain function .* Skill\(name, instructions"):
        skill(Toolbox)
    with pytest.raises(TypeError, match=r"with no arguments, but it requires root: give them"):

        @skill
        def configured(root: str) -> list[Any]:
            return []

    with pytest.raises(TypeError, match="tools must be a list, got NoneType"):

        @skill
        def forgot_to_return() -> Any:
            """Instructions only."""

    with pytest.raises(TypeError, match=r"skill 'inner' is listed among the tools"):

        @skill
        def returns_a_skill() -> list[Any]:
            return [Skill("inner")]

    with pytest.raises(SkillCompositionError, match="'lookup' is used twice"):

        @skill(skills=[Skill("other", tools=[make("lookup")])])
        def clashing() -> list[Any]:
            return [make("lookup")]


# --- end to end, wired the way Agent(skills=...) will be -----------------------------------------


def test_skills_as_agent_tools_and_prompt_end_to_end():
    functions = [make("own")]
    skills = [notes, Skill("echo", "Echo with echo.", [tool_decorator(name="echo")(make("say"))])]
    agent = Agent(
        name="noter",
        instructions="You are helpful.\n\n" + skill_instructions(skills),
        functions=[*functions, *skill_tools(skills, functions)],
    )
    client = ScriptedClient(
        [
            calls(ToolCall("add_note", {"text": "buy milk"}), ToolCall("list_notes")),
            text("done"),
        ]
    )

    response = Swarm(client).run(agent, [{"role": "user", "content": "note: buy milk"}])

    request = client.requests[0]
    assert request["messages"][0]["content"].startswith("You are helpful.\n\n## notes\nKeep notes")
    assert "## echo\nEcho with echo." in request["messages"][0]["content"]
    offered = [t["function"]["name"] for t in request["tools"]]
    assert offered == ["own", "add_note", "list_notes", "clear_notes", "echo"]
    assert next(m["content"] for m in response.messages if m["role"] == "tool") == "noted"
    assert "buy milk" in response.messages[2]["content"]
