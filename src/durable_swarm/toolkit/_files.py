"""File tools confined to a workspace root: read, write, edit, list and search text files.

Every path a tool receives is resolved (symbolic links followed, `..` applied as the operating
system applies it) and must land inside the workspace root; otherwise the tool answers with an
error the model can read. Tools never raise for the model's mistakes: refusals, missing files,
binary files, size limits and operating-system errors all come back as text starting with
`"Error:"`, and every answer is at most `max_result_chars` characters long.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import WorkspaceError
from ._skill import Skill

__all__ = ["FileTools", "WorkspaceError"]

# Files are opened without following a symbolic link in the last path component (where the OS
# allows it), so a link swapped in after the path was checked is not followed.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_MIN_RESULT_CHARS = 200
_MAX_LINE_CHARS = 300


def _positive(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"FileTools({name}=...) must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"FileTools({name}=...) must be at least {minimum}, got {value}")
    return value


def _clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, its `[truncated: N more characters]` note
    included."""
    if len(text) <= limit:
        return text
    shown = text[: limit - len(f"\n[truncated: {len(text)} more characters]")]
    return f"{shown}\n[truncated: {len(text) - len(shown)} more characters]"


def _read_on(omitted: int, next_line: int) -> str:
    return (
        f"\n[truncated: {omitted} more characters]"
        f"\n[to read on, call read_file with start_line={next_line}]"
    )


def _decode(data: bytes, shown: str) -> str:
    if b"\0" in data:
        raise WorkspaceError(f"{shown!r} is a binary file; only text files can be read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise WorkspaceError(
            f"{shown!r} is not UTF-8 text (a binary file?); only text files can be read"
        ) from None


class FileTools:
    """Built-in file tools bound to one workspace directory.

    `tools` is `[read_file, write_file, edit_file, list_dir, search_files]`: plain functions, to
    pass as `Agent(functions=files.tools)`, or together with usage instructions as
    `Agent(skills=[files.skill])`. Each is also an attribute (`files.read_file("notes.md")`).
    Decorate one with `tool(...)` to add options: `tool(needs_approval=True)(files.write_file)`.

    Paths are relative to the root (absolute paths are accepted when they lie inside it). Paths
    outside the root, `..` escapes and symbolic links leading out are refused; the root itself may
    be a symbolic link. Files are UTF-8 text.

    Args:
        root: the workspace directory (must exist).
        max_file_bytes: the largest file read_file/edit_file/search_files read and
            write_file/edit_file write.
        max_result_chars: the longest answer any tool gives; longer answers are truncated with a
            `[truncated: N more characters]` note (at least 200).
        max_matches: the most matching lines search_files reports.
    """

    root: Path
    read_file: Callable[..., str]
    write_file: Callable[..., str]
    edit_file: Callable[..., str]
    list_dir: Callable[..., str]
    search_files: Callable[..., str]

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_file_bytes: int = 1_000_000,
        max_result_chars: int = 20_000,
        max_matches: int = 100,
    ) -> None:
        given = Path(root)
        try:
            resolved = given.resolve(strict=True)
        except (OSError, RuntimeError) as e:
            raise ValueError(f"FileTools: the workspace root {str(root)!r} does not exist") from e
        if not resolved.is_dir():
            raise ValueError(f"FileTools: the workspace root {str(root)!r} is not a directory")
        self.root = resolved
        self._given_root = Path(os.path.abspath(given))
        self.max_file_bytes = _positive("max_file_bytes", max_file_bytes)
        self.max_result_chars = _positive("max_result_chars", max_result_chars, _MIN_RESULT_CHARS)
        self.max_matches = _positive("max_matches", max_matches)
        self.tools = _make_tools(self)
        for func in self.tools:
            setattr(self, func.__name__, func)
        self.skill = Skill("files", _instructions(self), self.tools)

    def __repr__(self) -> str:
        return f"FileTools({str(self.root)!r})"

    def resolve(self, path: str) -> Path:
        """The real path `path` names inside the workspace (symbolic links resolved).

        Raises:
            WorkspaceError: `path` lies outside the root, lexically or through a symbolic link.
        """
        if "\0" in path:
            raise WorkspaceError(f"{path!r} contains a NUL character, which no path may contain")
        candidate = Path(path)
        if candidate.is_absolute():
            lexical = Path(os.path.normpath(candidate))
            inside = lexical.is_relative_to(self.root) or lexical.is_relative_to(self._given_root)
        else:
            candidate = self.root / candidate
            inside = Path(os.path.normpath(candidate)).is_relative_to(self.root)
        if not inside:
            raise WorkspaceError(
                f"{path!r} is outside the workspace; use a path relative to the workspace root"
            )
        try:
            real = candidate.resolve()
        except (OSError, RuntimeError) as e:
            raise WorkspaceError(f"{path!r} cannot be resolved (a symbolic link loop?)") from e
        if not real.is_relative_to(self.root):
            raise WorkspaceError(
                f"{path!r} leads outside the workspace through a symbolic link; it is refused"
            )
        return real

    def _inside(self, path: Path) -> bool:
        """Whether `path` resolves to somewhere inside the root (False for link loops)."""
        try:
            return path.resolve().is_relative_to(self.root)
        except (OSError, RuntimeError):
            return False

    def _shown(self, real: Path) -> str:
        """`real` as the model should see it: relative to the root, with forward slashes."""
        return real.relative_to(self.root).as_posix()

    def _guard(self, action: Callable[..., str], path: str, *args: Any) -> str:
        """Run a tool's `action`, turning refusals and OS errors into an answer for the model."""
        try:
            answer = action(path, *args)
        except WorkspaceError as e:
            answer = f"Error: {e.message}"
        except OSError as e:
            answer = f"Error: {path!r}: {e.strerror or type(e).__name__}"
        return _clip(answer, self.max_result_chars)

    def _existing_file(self, path: str) -> Path:
        real = self.resolve(path)
        if real.is_dir():
            raise WorkspaceError(f"{path!r} is a directory; use list_dir to see what is in it")
        if not real.exists():
            raise WorkspaceError(f"{path!r} does not exist; use list_dir or search_files")
        if not real.is_file():
            raise WorkspaceError(f"{path!r} is not a regular file")
        return real

    def _read_text(self, real: Path, shown: str) -> str:
        with os.fdopen(os.open(real, os.O_RDONLY | _NOFOLLOW), "rb") as f:
            data = f.read(self.max_file_bytes + 1)
        if len(data) > self.max_file_bytes:
            raise WorkspaceError(
                f"{shown!r} is larger than the {self.max_file_bytes}-byte limit; "
                "use search_files to find what you need in it"
            )
        return _decode(data, shown)

    def _write_bytes(self, real: Path, data: bytes, path: str) -> None:
        if len(data) > self.max_file_bytes:
            raise WorkspaceError(
                f"the new content of {path!r} is {len(data)} bytes, over the "
                f"{self.max_file_bytes}-byte limit; write smaller files"
            )
        real.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW
        with os.fdopen(os.open(real, flags, 0o666), "wb") as f:
            f.write(data)

    def _read_file(self, path: str, start_line: int, max_lines: int | None) -> str:
        if start_line < 1:
            raise WorkspaceError(f"start_line must be 1 or more, got {start_line}")
        if max_lines is not None and max_lines < 1:
            raise WorkspaceError(f"max_lines must be 1 or more, got {max_lines}")
        real = self._existing_file(path)
        lines = self._read_text(real, path).splitlines(keepends=True)
        if start_line > max(len(lines), 1):
            raise WorkspaceError(
                f"{path!r} has {len(lines)} lines; start_line {start_line} is past the end"
            )
        end = None if max_lines is None else start_line - 1 + max_lines
        selected = lines[start_line - 1 : end]
        text = "".join(selected)
        if len(text) <= self.max_result_chars:
            return text
        # Show the whole lines that fit, then say how much is left and where to read on.
        budget = self.max_result_chars - len(_read_on(len(text), start_line + len(selected)))
        fit = size = 0
        while fit < len(selected) and size + len(selected[fit]) <= budget:
            size += len(selected[fit])
            fit += 1
        shown = "".join(selected[:fit]) if fit else selected[0][:budget]
        return shown + _read_on(len(text) - len(shown), start_line + max(fit, 1))

    def _write_file(self, path: str, content: str) -> str:
        real = self.resolve(path)
        if real.is_dir():
            raise WorkspaceError(f"{path!r} is a directory; give a file path")
        existed = real.exists()
        if existed and not real.is_file():
            raise WorkspaceError(f"{path!r} is not a regular file")
        data = content.encode("utf-8")
        self._write_bytes(real, data, path)
        verb = "Overwrote" if existed else "Created"
        return f"{verb} {self._shown(real)!r} ({len(data)} bytes)."

    def _edit_file(self, path: str, old_string: str, new_string: str, replace_all: bool) -> str:
        if not old_string:
            raise WorkspaceError("old_string is empty; give the exact text to replace")
        real = self._existing_file(path)
        text = self._read_text(real, path)
        count = text.count(old_string)
        if count == 0:
            raise WorkspaceError(
                f"old_string was not found in {path!r}; read the file and copy the text exactly, "
                "including whitespace and line breaks"
            )
        if count > 1 and not replace_all:
            raise WorkspaceError(
                f"old_string occurs {count} times in {path!r}; include more surrounding text to "
                "make it unique, or pass replace_all=true to replace every occurrence"
            )
        self._write_bytes(real, text.replace(old_string, new_string).encode("utf-8"), path)
        plural = "occurrence" if count == 1 else "occurrences"
        return f"Replaced {count} {plural} in {self._shown(real)!r}."

    def _list_dir(self, path: str) -> str:
        real = self.resolve(path)
        if not real.exists():
            raise WorkspaceError(f"{path!r} does not exist")
        if not real.is_dir():
            raise WorkspaceError(f"{path!r} is a file; use read_file to read it")
        lines = []
        for entry in sorted(os.scandir(real), key=lambda e: e.name):
            if entry.is_symlink():
                outside = "" if self._inside(Path(entry.path)) else " (leads outside; refused)"
                lines.append(f"{entry.name}@{outside}")
            elif entry.is_dir():
                lines.append(f"{entry.name}/")
            else:
                lines.append(f"{entry.name} ({entry.stat().st_size} bytes)")
        return "\n".join(lines) if lines else "(empty directory)"

    def _text_files(self, real: Path) -> Iterator[Path]:
        """The files under `real` (or `real` itself), sorted, without leaving the workspace."""
        if real.is_file():
            yield real
            return
        for dirpath, dirnames, filenames in os.walk(real):
            dirnames.sort()
            for name in sorted(filenames):
                file = Path(dirpath, name)
                if (not file.is_symlink() or self._inside(file)) and file.is_file():
                    yield file

    def _search_files(self, path: str, pattern: str, regex: bool, ignore_case: bool) -> str:
        if not pattern:
            raise WorkspaceError("pattern is empty; give the text to search for")
        try:
            matcher = re.compile(
                pattern if regex else re.escape(pattern), re.IGNORECASE if ignore_case else 0
            )
        except re.error as e:
            raise WorkspaceError(f"pattern is not a valid regular expression: {e}") from e
        real = self.resolve(path)
        if not real.exists():
            raise WorkspaceError(f"{path!r} does not exist")
        found: list[str] = []
        for file in self._text_files(real):
            try:
                if file.stat().st_size > self.max_file_bytes:
                    continue
                text = _decode(file.read_bytes(), str(file))
            except (OSError, WorkspaceError):
                continue
            shown = file.relative_to(self.root).as_posix()
            for number, line in enumerate(text.splitlines(), 1):
                if matcher.search(line):
                    if len(found) == self.max_matches:
                        found.append(
                            f"[stopped after {self.max_matches} matches; narrow the pattern or "
                            "the path]"
                        )
                        return "\n".join(found)
                    if len(line) > _MAX_LINE_CHARS:
                        line = line[:_MAX_LINE_CHARS] + " [line cut]"
                    found.append(f"{shown}:{number}: {line}")
        return "\n".join(found) if found else f"No matches for {pattern!r} in {path!r}."


def _instructions(files: FileTools) -> str:
    return f"""You can work with the files of a workspace: read_file, write_file, edit_file,
list_dir and search_files. Paths are relative to the workspace root; paths that lead outside it
are refused. Files are UTF-8 text of at most {files.max_file_bytes} bytes. Read a file before
editing it, and give edit_file's old_string exactly as read_file showed it. Answers longer than
{files.max_result_chars} characters are truncated; a tool answer starting with "Error:" explains
what went wrong and what to do instead."""


def _make_tools(files: FileTools) -> list[Callable[..., str]]:
    """The five tool functions, bound to `files` (their docstrings are what the model reads)."""

    def read_file(path: str, start_line: int = 1, max_lines: int | None = None) -> str:
        """Read a text file of the workspace and return its content.

        Long files are truncated; the answer then says which start_line to read on from.

        Args:
            path: the file, relative to the workspace root.
            start_line: the first line to return (1 is the first line of the file).
            max_lines: the most lines to return (default: up to the end of the file).
        """
        return files._guard(files._read_file, path, start_line, max_lines)

    def write_file(path: str, content: str) -> str:
        """Write a text file of the workspace, creating it (and its folders) or replacing it.

        Args:
            path: the file, relative to the workspace root.
            content: the complete new content of the file.
        """
        return files._guard(files._write_file, path, content)

    def edit_file(path: str, old_string: str, new_string: str, replace_all: bool = False) -> str:
        """Replace exact text in a text file of the workspace.

        old_string must occur exactly once (or pass replace_all=true to replace every occurrence);
        copy it from read_file's answer, whitespace and line breaks included.

        Args:
            path: the file, relative to the workspace root.
            old_string: the exact text to replace.
            new_string: the text to put in its place.
            replace_all: replace every occurrence instead of requiring exactly one.
        """
        return files._guard(files._edit_file, path, old_string, new_string, replace_all)

    def list_dir(path: str = ".") -> str:
        """List a folder of the workspace: folders end with "/", files show their size.

        Args:
            path: the folder, relative to the workspace root ("." is the root).
        """
        return files._guard(files._list_dir, path)

    def search_files(
        pattern: str, path: str = ".", regex: bool = False, ignore_case: bool = False
    ) -> str:
        """Find the lines of text files that contain a pattern, as "file:line: text".

        Searches a file, or every text file under a folder (binary and oversized files are
        skipped); stops after a fixed number of matches.

        Args:
            pattern: the text to look for (a regular expression if regex is true).
            path: the file or folder to search, relative to the workspace root.
            regex: treat pattern as a Python regular expression.
            ignore_case: match regardless of upper and lower case.
        """
        return files._guard(files._search_files, path, pattern, regex, ignore_case)

    tools: list[Callable[..., str]] = [read_file, write_file, edit_file, list_dir, search_files]
    for func in tools:  # the docstring is the description the model reads: no indentation
        func.__doc__ = inspect.cleandoc(func.__doc__ or "")
    return tools
