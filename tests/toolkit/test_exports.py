"""The toolkit exports exactly its public names, each documented."""

from __future__ import annotations

import durable_swarm.toolkit as toolkit

PUBLIC = [
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
]


def test_exported_names_are_exactly_the_public_api():
    assert sorted(toolkit.__all__) == PUBLIC
    assert sorted(n for n in dir(toolkit) if not n.startswith("_")) == PUBLIC


def test_every_public_name_has_a_docstring():
    for name in PUBLIC:
        assert (getattr(toolkit, name).__doc__ or "").strip(), name
