"""A small MCP server for the `mcp_notes` example: a notebook kept in a JSON file.

Written with the official `mcp` package (`MCPServer`, once called FastMCP) and served over stdio:
`MCPTools(command=[python, "server.py"])` starts it. `add_note` has a side effect, so it uses the
idempotency key durable-swarm sends in the request's `_meta`: a call repeated with the same key
(a retry) returns the first answer instead of adding the note twice.

Run it by hand with `python examples/mcp_notes/server.py` (it speaks MCP on stdin/stdout); the
notebook is the file named by `NOTES_FILE` (default: `notes.json` in the working directory).
"""

import json
import os
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("notes", log_level="ERROR")


def _path() -> Path:
    return Path(os.environ.get("NOTES_FILE", "notes.json"))


def _load() -> dict:
    path = _path()
    return json.loads(path.read_text()) if path.exists() else {"notes": [], "keys": {}}


@server.tool()
def add_note(text: str, ctx: Context) -> str:
    """Save a note in the notebook."""
    book = _load()
    key = (ctx.request_context.meta or {}).get("idempotency_key")
    if key and key in book["keys"]:
        return book["keys"][key]  # the same call again: it already happened
    book["notes"].append(text)
    answer = f"Saved note {len(book['notes'])}: {text}"
    if key:
        book["keys"][key] = answer
    _path().write_text(json.dumps(book, indent=2))
    return answer


@server.tool()
def list_notes() -> str:
    """Every note in the notebook, one per line, numbered."""
    notes = _load()["notes"]
    return "\n".join(f"{i}. {note}" for i, note in enumerate(notes, 1)) or "The notebook is empty."


@server.tool()
def search_notes(query: str) -> str:
    """The notes that contain `query` (case-insensitive)."""
    found = [n for n in _load()["notes"] if query.lower() in n.lower()]
    return "\n".join(found) or f"No note mentions {query!r}."


if __name__ == "__main__":
    server.run()
