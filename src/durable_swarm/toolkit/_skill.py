"""Skills: a system-prompt fragment bundled with the tools it explains, composable and checked.

An agent's tools are its own `functions` followed by the tools of its skills. Skills are walked
depth-first in the order given (a skill before the skills it includes), each skill once; a tool
offered twice (the same callable) is offered once, and two different callables offered under one
tool name are an error naming both.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, overload

from ..errors import SkillCompositionError
from ..tools import tool_name
from ._tool import check_tool_name, describe_callable

__all__ = ["Skill", "SkillCompositionError", "skill", "skill_instructions", "skill_tools"]

_AGENT_FUNCTIONS = "the agent's own functions"


@dataclass(frozen=True)
class Skill:
    """A system-prompt fragment bundled with tools, which agents take as `Agent(skills=[...])`.

    Attributes:
        name: names the skill in the system prompt (as a `## name` heading) and in errors.
        instructions: the fragment added to the agent's system prompt (may be empty).
        tools: functions the agent may call, `@tool`-decorated or plain, in the order given.
        skills: skills this one includes; their instructions and tools come after this skill's.

    Sequences are stored as tuples. The skill is checked when it is created: tool names must be
    valid and unique across the skill and everything it includes (`SkillCompositionError`).
    """

    name: str
    instructions: str = ""
    tools: Sequence[Callable[..., Any]] = ()
    skills: Sequence[Skill] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"A skill's name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.instructions, str):
            raise TypeError(
                f"Skill {self.name!r}: instructions must be a string, "
                f"got {type(self.instructions).__name__}"
            )
        for field_name in ("tools", "skills"):
            value = getattr(self, field_name)
            if isinstance(value, (str, bytes, Skill)) or not isinstance(value, Iterable):
                raise TypeError(
                    f"Skill {self.name!r}: {field_name} must be a list, got {type(value).__name__}"
                )
            object.__setattr__(self, field_name, tuple(value))
        for func in self.tools:
            if isinstance(func, Skill):
                raise TypeError(
                    f"Skill {self.name!r}: skill {func.name!r} is listed among the tools; "
                    "pass included skills as skills=[...]"
                )
            if not callable(func):
                raise TypeError(
                    f"Skill {self.name!r}: tools must be functions, got {type(func).__name__} "
                    f"{func!r}"
                )
            check_tool_name(tool_name(func), func)
        for included in self.skills:
            _check_skill(included, f"skill {self.name!r} includes")
        skill_tools([self])


def _check_skill(obj: Any, where: str) -> None:
    if not isinstance(obj, Skill):
        hint = " (decorate a class with @skill, or build Skill(...))" if callable(obj) else ""
        raise TypeError(f"{where} {type(obj).__name__} {obj!r}, which is not a Skill{hint}")


def _walk(skills: Iterable[Skill]) -> list[tuple[Skill, str]]:
    """Every skill once, depth-first in order, with a description of where it was included."""
    ordered: list[tuple[Skill, str]] = []
    seen: dict[str, tuple[Skill, str]] = {}

    def visit(skill: Skill, path: tuple[str, ...]) -> None:
        where = f"skill {skill.name!r}" + (
            f" (included by {' > '.join(repr(p) for p in path)})" if path else ""
        )
        first = seen.get(skill.name)
        if first is not None:
            if first[0] is skill or first[0] == skill:
                return
            raise SkillCompositionError(
                f"Two different skills are named {skill.name!r}: {first[1]} and {where}. "
                "Skill names must be unique per agent: rename one of them.",
                name=skill.name,
            )
        seen[skill.name] = (skill, where)
        ordered.append((skill, where))
        for included in skill.skills:
            visit(included, (*path, skill.name))

    for item in skills:
        _check_skill(item, "skills must be Skill objects, got")
        visit(item, ())
    return ordered


def skill_tools(
    skills: Iterable[Skill], functions: Sequence[Callable[..., Any]] = ()
) -> list[Callable[..., Any]]:
    """The tools `skills` add to an agent whose own functions are `functions`.

    Skills are walked depth-first in order (a skill's own tools, then those of the skills it
    includes); each skill and each tool appears once, and tools already in `functions` are not
    repeated. The agent's full tool list is `[*functions, *skill_tools(skills, functions)]`.

    Raises:
        SkillCompositionError: two different callables share a tool name (between two skills, or
            a skill and `functions`), or two different skills share a name.
    """
    owners: dict[str, tuple[Callable[..., Any], str]] = {}
    for func in functions:
        owners.setdefault(tool_name(func), (func, _AGENT_FUNCTIONS))
    added: list[Callable[..., Any]] = []
    for skill, where in _walk(skills):
        for func in skill.tools:
            name = tool_name(func)
            first = owners.get(name)
            if first is None:
                owners[name] = (func, where)
                added.append(func)
            elif first[0] is not func and first[0] != func:
                raise SkillCompositionError(
                    f"Tool name {name!r} is used twice: by {first[1]} "
                    f"({describe_callable(first[0])}) and by {where} ({describe_callable(func)}). "
                    "Tool names must be unique per agent: rename one with @tool(name=...) or "
                    "remove one of them.",
                    name=name,
                )
    return added


def skill_instructions(skills: Iterable[Skill]) -> str:
    """The system-prompt text of `skills`: one `## name` section per skill with instructions.

    Same order as `skill_tools`; sections are separated by a blank line, and each skill's text is
    dedented and stripped (`inspect.cleandoc`). Empty when no skill has instructions.
    """
    return "\n\n".join(
        f"## {skill.name}\n{inspect.cleandoc(skill.instructions).strip()}"
        for skill, _ in _walk(skills)
        if skill.instructions.strip()
    )


_ToolsFunction = Callable[[], Iterable[Callable[..., Any]]]


def _skill_from_function(
    func: Any, name: str | None, instructions: str | None, skills: Sequence[Skill]
) -> Skill:
    if isinstance(func, type) or not callable(func) or inspect.iscoroutinefunction(func):
        raise TypeError(
            f"@skill decorates a plain function that returns the skill's tools, got "
            f"{type(func).__name__} {func!r}; to bundle existing functions, you can also write "
            "Skill(name, instructions, tools=[...])."
        )
    required = [
        p.name
        for p in inspect.signature(func).parameters.values()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if required:
        raise TypeError(
            f"@skill calls {describe_callable(func)} once with no arguments, but it requires "
            f"{', '.join(required)}: give them defaults, or call it yourself and build Skill(...)."
        )
    return Skill(
        name=name or str(getattr(func, "__name__", "")),
        instructions=inspect.cleandoc(func.__doc__ or "") if instructions is None else instructions,
        tools=func(),
        skills=skills,
    )


@overload
def skill(func: _ToolsFunction, /) -> Skill: ...


@overload
def skill(
    *, name: str | None = None, instructions: str | None = None, skills: Sequence[Skill] = ()
) -> Callable[[_ToolsFunction], Skill]: ...


def skill(
    func: _ToolsFunction | None = None,
    /,
    *,
    name: str | None = None,
    instructions: str | None = None,
    skills: Sequence[Skill] = (),
) -> Skill | Callable[[_ToolsFunction], Skill]:
    """Build a `Skill` from a function: its docstring is the instructions, it returns the tools.

    The function is called once, with no arguments, when it is decorated; the decorated name is
    bound to the resulting `Skill` (usable bare, `@skill`, or with options, `@skill(...)`). Tools
    defined inside it may share state through the closure. State kept there lives in process
    memory, not in the run log: keep what a run must remember in `context_variables`. ::

        @skill
        def notes():
            '''Keep notes with add_note; read them back with list_notes.'''
            saved: list[str] = []

            @tool(timeout=5)
            def add_note(text: str) -> str:
                '''Remember `text`.'''
                saved.append(text)
                return "noted"

            def list_notes() -> str:
                '''Every note so far, one per line.'''
                return "\\n".join(saved)

            return [add_note, list_notes]

        agent = Agent(skills=[notes])

    Args:
        name: the skill's name (default: the function's name).
        instructions: the prompt fragment (default: the function's docstring, dedented).
        skills: skills this one includes.
    """
    if func is None:
        return lambda f: _skill_from_function(f, name, instructions, skills)
    return _skill_from_function(func, name, instructions, skills)
