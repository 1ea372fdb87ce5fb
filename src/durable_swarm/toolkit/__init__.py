"""The agent toolkit: `@tool` options, skills, and file tools confined to a workspace.

* `tool`: mark a function as a tool with options (name, description, timeout, retries,
  needs_approval); the schema comes from its type hints and docstring.
* `Skill` / `skill`: bundle a system-prompt fragment with tools; skills include other skills.
  `skill_tools` and `skill_instructions` give what a list of skills adds to an agent.
* `FileTools`: `read_file`, `write_file`, `edit_file`, `list_dir`, `search_files` confined to a
  workspace root, with file-size and answer-size limits.
"""

from ._files import FileTools, WorkspaceError
from ._skill import Skill, SkillCompositionError, skill, skill_instructions, skill_tools
from ._tool import tool

__all__ = [
    "FileTools",
    "Skill",
    "SkillCompositionError",
    "WorkspaceError",
    "skill",
    "skill_instructions",
    "skill_tools",
    "tool",
]
