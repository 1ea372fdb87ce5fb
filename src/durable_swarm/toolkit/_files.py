"""File tools confined to a workspace root: read, write, edit, list and search text files.

Every access goes through directory file descriptors, one path component at a time, and never lets
the operating system follow a symbolic link: each link is read and resolved by the tools
themselves, and only within the root. A link that leads outside, a `..` that climbs out, or a link
swapped in between a check and an open is refused, never followed. Files with more than one hard
link are refused for reading and writing (a hard link may share its content with a file outside
the workspace). Writes go to a new file that atomically replaces the old one, so they never write
through a link. Searches use RE2, a regular-expression engine that runs in linear time.

Tools never raise for the model's mistakes: refusals, missing files, binary files, size limits and
operating-system errors all come back as text starting with `"Error:"`, and every answer is at most
`max_result_chars` characters long.

Nothing the workspace holds or the model asks makes a tool use memory or descriptors without
bound: sizes are checked before content is read or built (a file's size from `fstat`, an edit's
result from the number of occurrences), a listing keeps only the first names of a huge folder, and
a search walks the tree holding at most `_WALK_DESCRIPTORS` directory descriptors.
"""

from __future__ import annotations

import errno
import heapq
import inspect
import os
import secrets
import stat
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import re2

from ..errors import WorkspaceError
from ._skill import Skill

__all__ = ["FileTools", "WorkspaceError"]

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_MIN_RESULT_CHARS = 200
_MAX_LINE_CHARS = 300
_MAX_PATTERN_CHARS = 1000
# As many symbolic links as Linux follows in one path before it reports a loop.
_MAX_LINKS = 40
# list_dir keeps (and stats) at most max(max_result_chars, this) names of a folder.
_LISTED_AT_LEAST = 10_000
# The most directory descriptors one search_files walk holds at once.
_WALK_DESCRIPTORS = 8
# The most entries of one folder a search looks at (the first, by name): about 10 MB of names.
_FOLDER_ENTRIES = 100_000
# How many of the folders and files a search could not open its answer names.
_SKIPPED_SHOWN = 5


def _some_of(names: list[str]) -> str:
    """The first `_SKIPPED_SHOWN` of `names`, and how many more there are."""
    more = len(names) - _SKIPPED_SHOWN
    return ", ".join(names[:_SKIPPED_SHOWN]) + (f" and {more} more" if more > 0 else "")


# Lines are split from a file's text this many characters at a time.
_LINES_SLICE = 65536


def _positive(name: str, value: Any, minimum: int = 1, number: bool = False) -> Any:
    kinds = (int, float) if number else int
    if isinstance(value, bool) or not isinstance(value, kinds):
        what = "a number" if number else "an integer"
        raise TypeError(f"FileTools({name}=...) must be {what}, got {value!r}")
    if value < minimum or value != value:
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


def _utf8_size(text: str) -> int:
    """The length of `text` in UTF-8, counted in slices: never a whole second copy in memory."""
    if text.isascii():
        return len(text)
    step = 65536
    return sum(len(text[i : i + step].encode("utf-8")) for i in range(0, len(text), step))


def _components(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


@dataclass
class _Level:
    """One folder on the path of a search's walk: its name in its parent, its descriptor (None
    once given up), and its subfolders still to visit (reversed: `pop()` gives the next)."""

    name: str
    fd: int | None
    folders: list[str] = field(default_factory=list)


@dataclass
class _Walk:
    """How one search's walk went: until when it may run, whether it ran out of time, and what
    it could not open (shown path and reason)."""

    deadline: float
    timed_out: bool = False
    skipped: list[str] = field(default_factory=list)
    crowded: list[str] = field(default_factory=list)  # folders searched in part, and their size

    def skip(self, shown: str, error: OSError) -> None:
        if len(shown) > _MAX_LINE_CHARS:
            shown = "..." + shown[-_MAX_LINE_CHARS:]
        self.skipped.append(f"{shown} ({error.strerror or type(error).__name__})")


class _OutOfTime(Exception):
    """A search's time ran out while it listed a folder."""


def _first_names(fd: int, walk: _Walk, shown: str) -> list[str]:
    """The first `_FOLDER_ENTRIES` names (sorted) of the directory `fd`, however many it has;
    a folder with more is recorded in `walk.crowded`."""
    total = 0

    def counted(entries: Iterator[os.DirEntry[str]]) -> Iterator[str]:
        nonlocal total
        for entry in entries:
            total += 1
            if total % 4096 == 0 and time.monotonic() > walk.deadline:
                raise _OutOfTime
            yield entry.name

    with os.scandir(fd) as entries:
        names = heapq.nsmallest(_FOLDER_ENTRIES, counted(entries))
    if total > len(names):
        walk.crowded.append(f"{shown}/ ({total} entries)")
    return names


def _names(levels: list[_Level]) -> list[str]:
    return [level.name for level in levels[1:]]


def _shown(parts: list[str]) -> str:
    return "/".join(parts) or "."


def _hold_at_most(levels: list[_Level], most: int) -> None:
    """Give up the descriptors of the shallowest folders (never the first, nor the last) until at
    most `most` are held."""
    held = [i for i, level in enumerate(levels) if level.fd is not None]
    for i in held[1:-1][: max(0, len(held) - most)]:
        fd = levels[i].fd
        assert fd is not None
        os.close(fd)
        levels[i].fd = None


def _fit(body: str, note: str, limit: int) -> str:
    """`body` cut to fit `limit` characters together with `note`, which is never cut."""
    if not note:
        return _clip(body, limit)
    if len(note) >= limit:
        return _clip(note, limit)
    return f"{_clip(body, max(limit - len(note) - 1, 0))}\n{note}" if body else note


def _slices(text: str) -> Iterator[str]:
    """`text` in slices of about `_LINES_SLICE` characters, each ending after a newline (or at the
    end): splitting each slice into lines gives the lines of the whole text, in order."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + _LINES_SLICE)
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end


def _lines(text: str) -> Iterator[str]:
    """`text.splitlines(keepends=True)`, made a slice at a time: never a list of every line of a
    large file (a list of a million short lines takes some 60 MB)."""
    for piece in _slices(text):
        yield from piece.splitlines(keepends=True)


def _sliceable(pattern: str, regex: bool) -> bool:
    """Whether a slice of lines without a match of `pattern` has no matching line either. True
    unless the pattern anchors at the start or end of the text (`^`, `$`, `\\A`, `\\z`), which in
    a slice are not the lines' starts and ends: a match in a line is a match in any text around
    it, and a word boundary at a line's edge stays one (every line separator is a non-word
    character)."""
    return not regex or not any(anchor in pattern for anchor in ("^", "$", "\\A", "\\z"))


@dataclass
class _Place:
    """Where a path leads: an open directory (`parent`, owned: close it) and the entry `name` in
    it (None for the directory itself), with the entry's `lstat` (None if it does not exist)."""

    parent: int
    name: str | None
    parts: list[str]  # the real path, component by component from the root
    info: os.stat_result | None

    def close(self) -> None:
        os.close(self.parent)


class FileTools:
    """Built-in file tools bound to one workspace directory.

    `tools` is `[read_file, write_file, edit_file, list_dir, search_files]`: plain functions, to
    pass as `Agent(functions=files.tools)`, or together with usage instructions as
    `Agent(skills=[files.skill])`. Each is also an attribute (`files.read_file("notes.md")`).
    Decorate one with `tool(...)` to add options: `tool(needs_approval=True)(files.write_file)`.

    Paths are relative to the root (absolute paths are accepted when they lie inside it). Paths
    outside the root, `..` escapes and symbolic links leading out are refused; links that stay
    inside are followed by the tools themselves (`search_files` skips links), and the root itself
    may be a symbolic link. Files with more than one hard link are refused. Files are UTF-8 text.

    Limits: a file over `max_file_bytes` is refused from its size before it is read (search_files
    skips it), and an edit whose result would be over it is refused before the result is built,
    the answer saying what size it would have been. `list_dir` keeps at most
    `max(max_result_chars, 10000)` names of a folder (the first in sorted order) and says how
    many more there are. `search_files` walks folders depth first (each folder's files, then its
    subfolders, names sorted), holding at most 8 directory descriptors at once however wide or
    deep the tree is, never following links, and looks at the first 100,000 entries (by name) of
    a folder; its answer ends with a note when it stopped early (time limit, match limit),
    searched a crowded folder in part, or skipped folders or files it could not open (how many,
    and the first few with the reason). Notes are never cut: the matches before them are.

    Args:
        root: the workspace directory (must exist).
        max_file_bytes: the largest file read_file/edit_file/search_files read and
            write_file/edit_file write.
        max_result_chars: the longest answer any tool gives; longer answers are truncated with a
            `[truncated: N more characters]` note (at least 200).
        max_matches: the most matching lines search_files reports.
        max_search_seconds: how long one search_files call may run; it then stops and says so.
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
        max_search_seconds: float = 10.0,
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
        self.max_search_seconds = _positive(
            "max_search_seconds", max_search_seconds, 0, number=True
        )
        self._listed_at_most = max(self.max_result_chars, _LISTED_AT_LEAST)
        self.tools = _make_tools(self)
        for func in self.tools:
            setattr(self, func.__name__, func)
        self.skill = Skill("files", _instructions(self), self.tools)

    def __repr__(self) -> str:
        return f"FileTools({str(self.root)!r})"

    # --- finding a path, one directory descriptor at a time -------------------------------------

    def _below_root(self, path: str) -> list[str] | None:
        """The components of absolute `path` below the root (given or real), else None."""
        parts = Path(path).parts
        for root in (self.root, self._given_root):
            if parts[: len(root.parts)] == root.parts:
                return list(parts[len(root.parts) :])
        lexical = Path(os.path.normpath(path))
        for root in (self.root, self._given_root):
            if lexical.is_relative_to(root):
                return list(lexical.relative_to(root).parts)
        return None

    def _start(self, path: str) -> list[str]:
        """The components of `path` from the root, refusing lexical escapes."""
        if "\0" in path:
            raise WorkspaceError(f"{path!r} contains a NUL character, which no path may contain")
        outside = WorkspaceError(
            f"{path!r} is outside the workspace; use a path relative to the workspace root"
        )
        if os.path.isabs(path):
            parts = self._below_root(path)
            if parts is None:
                raise outside
            return parts
        if not Path(os.path.normpath(self.root / path)).is_relative_to(self.root):
            raise outside
        return _components(path)

    def _locate(self, path: str, *, make_dirs: bool = False) -> _Place:
        """Walk `path` from the root with directory descriptors, resolving symbolic links by hand
        and only within the root. The caller closes the returned place."""
        todo = self._start(path)
        stack = [os.open(self.root, _DIRECTORY)]
        names: list[str] = []
        links = 0
        leads_out = WorkspaceError(
            f"{path!r} leads outside the workspace through a symbolic link; it is refused"
        )
        try:
            while todo:
                part = todo.pop(0)
                if part in ("", "."):
                    continue
                if part == "..":
                    if not names:  # only a link can lead here: lexical escapes were refused
                        raise leads_out
                    os.close(stack.pop())
                    names.pop()
                    continue
                try:
                    info = os.stat(part, dir_fd=stack[-1], follow_symlinks=False)
                except FileNotFoundError:
                    if not todo:
                        return _Place(stack.pop(), part, [*names, part], None)
                    if not make_dirs:
                        raise WorkspaceError(f"{path!r} does not exist") from None
                    os.mkdir(part, 0o777, dir_fd=stack[-1])
                    todo.insert(0, part)
                    continue
                if stat.S_ISLNK(info.st_mode):
                    links += 1
                    if links > _MAX_LINKS:
                        raise WorkspaceError(f"{path!r} cannot be resolved (a symbolic link loop?)")
                    target = os.readlink(part, dir_fd=stack[-1])
                    if os.path.isabs(target):
                        below = self._below_root(target)
                        if below is None:
                            raise leads_out
                        while len(stack) > 1:
                            os.close(stack.pop())
                        names.clear()
                        todo[:0] = below
                    else:
                        todo[:0] = target.split("/")
                    continue
                if not todo:
                    return _Place(stack.pop(), part, [*names, part], info)
                if not stat.S_ISDIR(info.st_mode):
                    if make_dirs:
                        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST))
                    raise WorkspaceError(f"{path!r} does not exist")
                try:
                    stack.append(os.open(part, _DIRECTORY, dir_fd=stack[-1]))
                except OSError as e:  # swapped for a link or a file since the stat: look again
                    if e.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                        raise
                    links += 1
                    if links > _MAX_LINKS:
                        raise WorkspaceError(f"{path!r} keeps changing while it is opened") from e
                    todo.insert(0, part)
                    continue
                names.append(part)
            return _Place(stack.pop(), None, names, None)
        finally:
            for fd in stack:
                os.close(fd)

    def resolve(self, path: str) -> Path:
        """The real path `path` names inside the workspace (symbolic links resolved).

        Raises:
            WorkspaceError: `path` lies outside the root, lexically or through a symbolic link.
        """
        place = self._locate(path)
        place.close()
        return self.root.joinpath(*place.parts)

    def _guard(self, action: Callable[..., str], path: str, *args: Any) -> str:
        """Run a tool's `action`, turning refusals and OS errors into an answer for the model."""
        try:
            answer = action(path, *args)
        except WorkspaceError as e:
            answer = f"Error: {e.message}"
        except OSError as e:
            answer = f"Error: {path!r}: {e.strerror or type(e).__name__}"
        except UnicodeEncodeError:
            answer = (
                f"Error: the text for {path!r} contains characters UTF-8 cannot encode (lone "
                "surrogates); nothing was written"
            )
        return _clip(answer, self.max_result_chars)

    # --- reading and writing --------------------------------------------------------------------

    def _check_file(self, info: os.stat_result, path: str, *, directory_hint: str) -> None:
        if stat.S_ISDIR(info.st_mode):
            raise WorkspaceError(f"{path!r} is a directory; {directory_hint}")
        if not stat.S_ISREG(info.st_mode):
            raise WorkspaceError(f"{path!r} is not a regular file")
        if info.st_nlink > 1:
            raise WorkspaceError(
                f"{path!r} has {info.st_nlink} hard links; file tools refuse files with more "
                "than one link, which may share their content with a file outside the workspace"
            )

    def _too_large(self, path: str, size: int | None) -> WorkspaceError:
        what = f"{size} bytes" if size is not None else "it grew while it was read"
        return WorkspaceError(
            f"{path!r} is larger than the {self.max_file_bytes}-byte limit ({what}; "
            f"FileTools(max_file_bytes={self.max_file_bytes}) sets it); use search_files to find "
            "what you need in it"
        )

    def _read_at(self, parent: int, name: str, path: str) -> str:
        """The text of file `name` in directory `parent`, opened without following a link; its
        size is checked before anything is read, and at most `max_file_bytes` + 1 are read."""
        fd = os.open(name, _READ, dir_fd=parent)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(fd)
            self._check_file(info, path, directory_hint="use list_dir to see what is in it")
            if info.st_size > self.max_file_bytes:
                raise self._too_large(path, info.st_size)
            data = f.read(self.max_file_bytes + 1)
        if len(data) > self.max_file_bytes:
            raise self._too_large(path, None)
        return _decode(data, path)

    def _read_place(self, place: _Place, path: str) -> str:
        hint = "use list_dir to see what is in it"
        if place.name is None:
            raise WorkspaceError(f"{path!r} is a directory; {hint}")
        if place.info is None:
            raise WorkspaceError(f"{path!r} does not exist; use list_dir or search_files")
        self._check_file(place.info, path, directory_hint=hint)
        return self._read_at(place.parent, place.name, path)

    def _too_much(self, path: str, size: int, *, edit: bool = False) -> WorkspaceError:
        limit = self.max_file_bytes
        if edit:
            return WorkspaceError(
                f"the new content of {path!r} would be {size} bytes, over the {limit}-byte limit "
                f"(FileTools(max_file_bytes={limit}) sets it); nothing was changed: replace fewer "
                "occurrences, or with shorter text"
            )
        return WorkspaceError(
            f"the new content of {path!r} is {size} bytes, over the {limit}-byte limit "
            f"(FileTools(max_file_bytes={limit}) sets it); write smaller files"
        )

    def _replace(self, place: _Place, data: bytes, path: str) -> None:
        """Write `data` to a new file beside the target and rename it over the target: the old
        file's directory entry is replaced, nothing is written through a link."""
        if len(data) > self.max_file_bytes:
            raise self._too_much(path, len(data))
        if place.name is None:
            raise WorkspaceError(f"{path!r} is a directory; give a file path")
        mode = 0o666
        if place.info is not None:
            self._check_file(place.info, path, directory_hint="give a file path")
            mode = stat.S_IMODE(place.info.st_mode)
        temporary = f".{place.name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(temporary, _CREATE, mode, dir_fd=place.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                if place.info is not None:
                    os.fchmod(fd, mode)
                f.write(data)
            os.replace(temporary, place.name, src_dir_fd=place.parent, dst_dir_fd=place.parent)
        except BaseException:
            os.unlink(temporary, dir_fd=place.parent)
            raise

    def _read_file(self, path: str, start_line: int, max_lines: int | None) -> str:
        if start_line < 1:
            raise WorkspaceError(f"start_line must be 1 or more, got {start_line}")
        if max_lines is not None and max_lines < 1:
            raise WorkspaceError(f"max_lines must be 1 or more, got {max_lines}")
        place = self._locate(path)
        try:
            text = self._read_place(place, path)
        finally:
            place.close()
        last = None if max_lines is None else start_line - 1 + max_lines
        # Count the lines and the selected characters; keep only the lines an answer can show.
        count = chosen = chars = kept_chars = 0
        kept: list[str] = []
        for line in _lines(text):
            count += 1
            if count < start_line:
                continue
            chosen += 1
            chars += len(line)
            if kept_chars <= self.max_result_chars:
                kept.append(line)
                kept_chars += len(line)
            if count == last:
                break
        if start_line > max(count, 1):
            raise WorkspaceError(
                f"{path!r} has {count} lines; start_line {start_line} is past the end"
            )
        if chars <= self.max_result_chars:
            return "".join(kept)
        # Show the whole lines that fit, then say how much is left and where to read on.
        budget = self.max_result_chars - len(_read_on(chars, start_line + chosen))
        fit = size = 0
        while fit < len(kept) and size + len(kept[fit]) <= budget:
            size += len(kept[fit])
            fit += 1
        shown = "".join(kept[:fit]) if fit else kept[0][:budget]
        return shown + _read_on(chars - len(shown), start_line + max(fit, 1))

    def _write_file(self, path: str, content: str) -> str:
        if len(content) > self.max_file_bytes:  # every character is at least one byte
            size = len(content) if content.isascii() else _utf8_size(content)
            raise self._too_much(path, size)
        place = self._locate(path, make_dirs=True)
        try:
            existed = place.info is not None
            data = content.encode("utf-8")
            self._replace(place, data, path)
        finally:
            place.close()
        verb = "Overwrote" if existed else "Created"
        return f"{verb} {'/'.join(place.parts)!r} ({len(data)} bytes)."

    def _edit_file(self, path: str, old_string: str, new_string: str, replace_all: bool) -> str:
        if not old_string:
            raise WorkspaceError("old_string is empty; give the exact text to replace")
        place = self._locate(path)
        try:
            text = self._read_place(place, path)
            count = text.count(old_string)
            if count == 0:
                raise WorkspaceError(
                    f"old_string was not found in {path!r}; read the file and copy the text "
                    "exactly, including whitespace and line breaks"
                )
            if count > 1 and not replace_all:
                raise WorkspaceError(
                    f"old_string occurs {count} times in {path!r}; include more surrounding text "
                    "to make it unique, or pass replace_all=true to replace every occurrence"
                )
            # The size of the result first: nothing over the limit is ever built in memory.
            grows = _utf8_size(new_string) - _utf8_size(old_string)
            size = _utf8_size(text) + count * grows
            if size > self.max_file_bytes:
                raise self._too_much(path, size, edit=True)
            self._replace(place, text.replace(old_string, new_string).encode("utf-8"), path)
        finally:
            place.close()
        plural = "occurrence" if count == 1 else "occurrences"
        return f"Replaced {count} {plural} in {'/'.join(place.parts)!r}."

    # --- listing and searching ------------------------------------------------------------------

    def _open_dir(self, place: _Place, path: str) -> int | None:
        """A descriptor of the directory `place` names (owned by the caller); None for a file."""
        if place.name is None:
            return os.dup(place.parent)
        if place.info is None:
            raise WorkspaceError(f"{path!r} does not exist")
        if not stat.S_ISDIR(place.info.st_mode):
            return None
        return os.open(place.name, _DIRECTORY, dir_fd=place.parent)

    def _leads_inside(self, path: str) -> bool:
        try:
            self._locate(path).close()
        except (WorkspaceError, OSError):
            return False
        return True

    def _list_dir(self, path: str) -> str:
        place = self._locate(path)
        try:
            fd = self._open_dir(place, path)
        finally:
            place.close()
        if fd is None:
            raise WorkspaceError(f"{path!r} is a file; use read_file to read it")
        # Only the first names (in order) are kept, however many entries the folder has: more
        # than an answer can show (every line takes at least 2 characters).
        total = 0

        def counted(entries: Iterator[os.DirEntry[str]]) -> Iterator[str]:
            nonlocal total
            for entry in entries:
                total += 1
                yield entry.name

        lines = []
        try:
            with os.scandir(fd) as entries:
                names = heapq.nsmallest(self._listed_at_most, counted(entries))
            for name in names:
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:  # removed since it was listed
                    continue
                if stat.S_ISLNK(info.st_mode):
                    inside = self._leads_inside("/".join([*place.parts, name]))
                    lines.append(f"{name}@" if inside else f"{name}@ (leads outside; refused)")
                elif stat.S_ISDIR(info.st_mode):
                    lines.append(f"{name}/")
                else:
                    lines.append(f"{name} ({info.st_size} bytes)")
        finally:
            os.close(fd)
        if not lines:
            return "(empty directory)"
        note = ""
        if total > len(names):
            note = (
                f"[{total - len(names)} more entries not shown (the folder has {total}); list a "
                "subfolder or use search_files]"
            )
        return _fit("\n".join(lines), note, self.max_result_chars)

    def _files_under(
        self, top: int, prefix: list[str], walk: _Walk
    ) -> Iterator[tuple[int, str, str]]:
        """(directory descriptor, name, shown path) of every regular file under the directory
        `top` (owned; closed here), depth first, each folder's files (sorted) before its
        subfolders; links are not followed.

        At most `_WALK_DESCRIPTORS` directory descriptors are held at once, however wide or deep
        the tree: a folder whose descriptor was given up is opened again from the nearest held
        ancestor, one component at a time without following links. Folders that cannot be
        opened or listed are recorded in `walk.skipped`; the walk ends at `walk.deadline`."""
        levels = [_Level("", top)]
        try:
            yield from self._visit(levels, prefix, walk)
            while levels:
                level = levels[-1]
                if not level.folders or walk.timed_out:
                    if level.fd is not None:
                        os.close(level.fd)
                    levels.pop()
                    continue
                name = level.folders.pop()
                parent = self._reopen(levels, prefix, walk)
                if parent is None:
                    level.folders.clear()
                    continue
                try:
                    fd = os.open(name, _DIRECTORY, dir_fd=parent)
                except OSError as e:
                    if e.errno != errno.ENOENT:  # not removed since the listing: say so
                        walk.skip(_shown([*prefix, *_names(levels), name]) + "/", e)
                    continue
                levels.append(_Level(name, fd))
                _hold_at_most(levels, _WALK_DESCRIPTORS)
                yield from self._visit(levels, prefix, walk)
        finally:
            for level in levels:
                if level.fd is not None:
                    os.close(level.fd)

    def _visit(
        self, levels: list[_Level], prefix: list[str], walk: _Walk
    ) -> Iterator[tuple[int, str, str]]:
        """The files of the folder `levels[-1]` (open); its subfolders noted to visit next."""
        level = levels[-1]
        assert level.fd is not None
        fd = level.fd
        if time.monotonic() > walk.deadline:
            walk.timed_out = True
            return
        parts = [*prefix, *_names(levels)]
        try:
            names = _first_names(fd, walk, _shown(parts))
        except OSError as e:
            walk.skip(_shown(parts) + "/", e)
            return
        except _OutOfTime:
            walk.timed_out = True
            return
        folders = []
        for name in names:
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                yield fd, name, "/".join([*parts, name])
            elif stat.S_ISDIR(info.st_mode):
                folders.append(name)
        level.folders = folders[::-1]

    def _reopen(self, levels: list[_Level], prefix: list[str], walk: _Walk) -> int | None:
        """The descriptor of `levels[-1]`, opened again from the nearest held ancestor if it was
        given up; None (recorded as skipped) if the path changed since."""
        level = levels[-1]
        if level.fd is not None:
            return level.fd
        anchor = max(i for i, held in enumerate(levels) if held.fd is not None)
        start = levels[anchor].fd
        current = start
        assert current is not None
        try:
            for below in levels[anchor + 1 :]:
                following = os.open(below.name, _DIRECTORY, dir_fd=current)
                if current != start:
                    os.close(current)
                current = following
        except OSError as e:
            if current != start:
                os.close(current)
            walk.skip(_shown([*prefix, *_names(levels)]) + "/", e)
            return None
        level.fd = current
        _hold_at_most(levels, _WALK_DESCRIPTORS)
        return current

    def _matcher(self, pattern: str, regex: bool, ignore_case: bool) -> Any:
        if not pattern:
            raise WorkspaceError("pattern is empty; give the text to search for")
        if len(pattern) > _MAX_PATTERN_CHARS:
            raise WorkspaceError(
                f"pattern is {len(pattern)} characters long, over the {_MAX_PATTERN_CHARS}-"
                "character limit; search for a shorter pattern"
            )
        options = re2.Options()
        options.log_errors = False
        options.case_sensitive = not ignore_case
        options.literal = not regex
        try:
            return re2.compile(pattern, options)
        except re2.error as e:
            reason = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
            raise WorkspaceError(
                f"pattern is not a valid regular expression: {reason} (search_files uses RE2 "
                "syntax: no backreferences or lookarounds)"
            ) from None

    def _search_files(self, path: str, pattern: str, regex: bool, ignore_case: bool) -> str:
        matcher = self._matcher(pattern, regex, ignore_case)
        walk = _Walk(time.monotonic() + self.max_search_seconds)
        place = self._locate(path)
        try:
            top = self._open_dir(place, path)
            if top is None:
                candidates: Iterator[tuple[int, str, str]] = iter(
                    [(place.parent, str(place.name), "/".join(place.parts))]
                )
            else:
                candidates = self._files_under(top, place.parts, walk)
            return self._search(candidates, walk, matcher, pattern, regex, path)
        finally:
            place.close()

    def _search(
        self,
        candidates: Iterator[tuple[int, str, str]],
        walk: _Walk,
        matcher: Any,
        pattern: str,
        regex: bool,
        path: str,
    ) -> str:
        found: list[str] = []
        full = False
        sliceable = _sliceable(pattern, regex)
        for parent, name, shown in candidates:
            if time.monotonic() > walk.deadline:
                walk.timed_out = True
                break
            try:
                text = self._read_at(parent, name, shown)
            except WorkspaceError:  # binary, oversized or hard-linked: skipped by design
                continue
            except OSError as e:
                if e.errno != errno.ENOENT:  # not removed since the listing: say so
                    walk.skip(shown, e)
                continue
            number = 0
            for piece in _slices(text):
                lines = piece.splitlines()
                # one search of the slice instead of one a line, when that cannot miss a line
                if sliceable and not matcher.search(piece):
                    number += len(lines)
                    continue
                for line in lines:
                    number += 1
                    if not matcher.search(line):
                        continue
                    if len(found) == self.max_matches:
                        full = True
                        break
                    if len(line) > _MAX_LINE_CHARS:
                        line = line[:_MAX_LINE_CHARS] + " [line cut]"
                    found.append(f"{shown}:{number}: {line}")
                if full:
                    break
            if full:
                break
        if isinstance(candidates, Generator):
            candidates.close()  # its descriptors now, not when it is collected
        notes = []
        if walk.timed_out:
            notes.append(f"[stopped after {self.max_search_seconds:g} s; search a smaller folder]")
        if full:
            notes.append(
                f"[stopped after {self.max_matches} matches; narrow the pattern or the path]"
            )
        if walk.skipped:
            notes.append(
                f"[skipped {len(walk.skipped)} folders or files that could not be opened: "
                f"{_some_of(walk.skipped)}; the search may have missed matches in them]"
            )
        if walk.crowded:
            notes.append(
                f"[searched only the first {_FOLDER_ENTRIES} entries (by name) of folders with "
                f"more: {_some_of(walk.crowded)}; search a file there by its path]"
            )
        if found or walk.timed_out:
            return _fit("\n".join(found), "\n".join(notes), self.max_result_chars)
        return _fit(
            f"No matches for {pattern!r} in {path!r}.", "\n".join(notes), self.max_result_chars
        )


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
        skipped); stops after a fixed number of matches or a time limit, and says so, and names
        folders it could not open.

        Args:
            pattern: the text to look for (a regular expression if regex is true).
            path: the file or folder to search, relative to the workspace root.
            regex: treat pattern as a regular expression (RE2 syntax: no backreferences).
            ignore_case: match regardless of upper and lower case.
        """
        return files._guard(files._search_files, path, pattern, regex, ignore_case)

    tools: list[Callable[..., str]] = [read_file, write_file, edit_file, list_dir, search_files]
    for func in tools:  # the docstring is the description the model reads: no indentation
        func.__doc__ = inspect.cleandoc(func.__doc__ or "")
    return tools
