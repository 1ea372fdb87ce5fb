"""The agent toolkit: `@tool` options, skills, and file tools confined to a workspace.

* `tool`: mark a function as a tool with options (name, description, timeout, retries,
  needs_approval); the schema comes from its type hints and docstring.
* `Skill` / `skill`: bundle a system-prompt fragment with tools; skills include other skills.
  `skill_tools` and `skill_instructions` give what a list of skills adds to an agent.
* `FileTools`: `read_file`, `write_file`, `edit_file`, `list_dir`, `search_files` confined to a
  workspace root, with file-size and answer-size limits.
* `MCPTools`: the tools of an MCP server (stdio or streamable HTTP; extra `mcp`), each call a
  tool step; `source_tools` gives what such tool sources add to an agent.
* `ShellTool`: a command (an argument vector) run in a workspace directory, with a timeout, an
  output cap, a scrubbed environment and approval by default.
"""

from ._files import FileTools, WorkspaceError
from ._mcp import MCPTools, source_tools
from ._shell import ShellTool
from ._skill import Skill, SkillCompositionError, skill, skill_instructions, skill_tools
from ._tool import tool

__all__ = [
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
