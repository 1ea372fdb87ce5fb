"""Log files that tools in tests append to, one line per execution, and tests read back (often
across processes): a line is on disk when `append_line` returns, so a process killed right after
the tool ran still leaves it."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["append_line", "read_lines"]


def append_line(path: Path, line: str) -> None:
    """Append `line` to the file at `path` and flush it to disk before returning."""
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_lines(path: Path) -> list[str]:
    """The lines of the file at `path` so far (none when it does not exist yet)."""
    return path.read_text().splitlines() if path.exists() else []
