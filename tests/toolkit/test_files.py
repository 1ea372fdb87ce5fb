"""File tools: confinement to the workspace root, limits, behaviour, and use by an agent."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from durable_swarm import Agent, Swarm
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text
from durable_swarm.toolkit import FileTools, Skill, WorkspaceError, skill_tools, tool
from durable_swarm.tools import model_tool_schema, tool_spec

SECRET = "top secret outside the workspace\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the workspace, holding a file no tool may touch."""
    path = tmp_path / "outside"
    (path / "sub").mkdir(parents=True)
    (path / "secret.txt").write_text(SECRET)
    return path


@pytest.fixture
def root(tmp_path: Path, outside: Path) -> Path:
    """The workspace, seeded with a few files and with symbolic links that lead out."""
    ws = tmp_path / "ws"
    (ws / "docs").mkdir(parents=True)
    (ws / "docs" / "readme.md").write_text("hello\nworld\n")
    (ws / "a" / "b").mkdir(parents=True)
    (ws / "leak.txt").symlink_to(outside / "secret.txt")  # a file link out
    (ws / "out").symlink_to(outside)  # a directory link out
    (ws / "a" / "b" / "link").symlink_to(outside)  # a link in the middle of a path
    (ws / "a" / "up").symlink_to(outside / "sub")  # `up/..` is outside, not `a`
    (ws / "dangling.txt").symlink_to(outside / "new.txt")  # a link out to a missing file
    (ws / "alias").symlink_to(ws / "docs")  # a link that stays inside
    return ws


@pytest.fixture
def files(root: Path) -> FileTools:
    return FileTools(root)


def outside_state(outside: Path) -> dict[str, str]:
    return {
        p.relative_to(outside).as_posix(): p.read_text() for p in outside.rglob("*") if p.is_file()
    }


# --- every escape is refused, by every tool ------------------------------------------------------

LEXICAL_ESCAPES = ["../outside/secret.txt", "a/../../outside/secret.txt", "docs/../../outside"]
LINK_ESCAPES = [
    "leak.txt",
    "out/secret.txt",
    "out",
    "a/b/link/secret.txt",
    "a/b/link",
    "a/up/../secret.txt",
    "dangling.txt",
    "./out/../out/sub/new.txt",
]


def each_tool(files: FileTools, path: str) -> dict[str, str]:
    return {
        "read_file": files.read_file(path),
        "write_file": files.write_file(path, "pwned"),
        "edit_file": files.edit_file(path, "secret", "pwned"),
        "list_dir": files.list_dir(path),
        "search_files": files.search_files("secret", path),
    }


@pytest.mark.parametrize("path", LEXICAL_ESCAPES)
def test_dot_dot_escapes_are_refused(files, outside, path):
    before = outside_state(outside)

    for name, answer in each_tool(files, path).items():
        assert answer == (
            f"Error: {path!r} is outside the workspace; use a path relative to the workspace root"
        ), name

    assert outside_state(outside) == before


@pytest.mark.parametrize("target", ["secret.txt", "sub", "new.txt", "."])
def test_absolute_paths_outside_are_refused(files, outside, target):
    path = str(outside / target)
    before = outside_state(outside)

    for name, answer in each_tool(files, path).items():
        assert answer.startswith(f"Error: {path!r} is outside the workspace"), name

    assert outside_state(outside) == before
    for path in ("/etc/passwd", "/", "/tmp"):
        assert files.read_file(path).startswith("Error:")


@pytest.mark.parametrize("path", LINK_ESCAPES)
def test_symlinks_leading_out_are_refused(files, outside, path):
    before = outside_state(outside)

    for name, answer in each_tool(files, path).items():
        assert answer == (
            f"Error: {path!r} leads outside the workspace through a symbolic link; it is refused"
        ), name
        assert "top secret" not in answer

    assert outside_state(outside) == before
    assert not (outside / "new.txt").exists()
    assert not (outside / "sub" / "new.txt").exists()


def test_writes_through_links_out_change_nothing(files, root, outside):
    assert files.write_file("leak.txt", "pwned").startswith("Error:")
    assert files.write_file("dangling.txt", "pwned").startswith("Error:")
    assert files.write_file("out/new/deep.txt", "pwned").startswith("Error:")
    assert files.write_file("a/b/link/secret.txt", "pwned").startswith("Error:")
    assert files.edit_file("out/secret.txt", "top", "pwned").startswith("Error:")

    assert outside_state(outside) == {"secret.txt": SECRET}
    assert (root / "leak.txt").is_symlink() and (root / "dangling.txt").is_symlink()


def test_searching_the_root_skips_links_out(files):
    assert files.search_files("secret") == "No matches for 'secret' in '.'."
    assert files.search_files("hello") == "docs/readme.md:1: hello"  # `alias/` is not followed


def test_listing_marks_links_out(files):
    assert files.list_dir() == "\n".join(
        [
            "a/",
            "alias@",
            "dangling.txt@ (leads outside; refused)",
            "docs/",
            "leak.txt@ (leads outside; refused)",
            "out@ (leads outside; refused)",
        ]
    )


def test_links_that_stay_inside_work(files, root):
    assert files.read_file("alias/readme.md") == "hello\nworld\n"
    assert files.read_file("a/../docs/readme.md") == "hello\nworld\n"
    assert files.write_file("alias/new.md", "via alias") == "Created 'docs/new.md' (9 bytes)."
    assert (root / "docs" / "new.md").read_text() == "via alias"
    (root / "docs" / "me.md").symlink_to(root / "docs" / "readme.md")
    assert (
        files.edit_file("docs/me.md", "world", "there")
        == "Replaced 1 occurrence in 'docs/readme.md'."
    )
    assert (root / "docs" / "me.md").is_symlink()


def test_a_root_that_is_itself_a_symlink_is_fine(tmp_path, root, outside):
    link = tmp_path / "link-to-ws"
    link.symlink_to(root)
    files = FileTools(link)

    assert files.root == root.resolve()
    assert files.read_file("docs/readme.md") == "hello\nworld\n"
    assert files.read_file(str(link / "docs" / "readme.md")) == "hello\nworld\n"  # via the link
    assert files.read_file(str(root / "docs" / "readme.md")) == "hello\nworld\n"  # the real path
    assert files.write_file("x/y.txt", "ok") == "Created 'x/y.txt' (2 bytes)."
    assert (root / "x" / "y.txt").read_text() == "ok"
    assert files.read_file(str(link / ".." / "outside" / "secret.txt")).startswith("Error:")
    assert files.read_file("leak.txt").startswith("Error:")


def test_link_loops_and_nul_characters(files, root):
    (root / "loop").symlink_to(root / "loop")

    assert files.read_file("loop") == "Error: 'loop' cannot be resolved (a symbolic link loop?)"
    assert "loop@ (leads outside; refused)" in files.list_dir()
    assert files.read_file("docs/\0readme.md").startswith(
        "Error: 'docs/\\x00readme.md' contains a NUL"
    )


def test_resolve_raises_workspace_error(files, root):
    assert files.resolve("docs/readme.md") == root / "docs" / "readme.md"
    assert files.resolve("") == files.resolve(".") == root
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        files.resolve("../x")
    with pytest.raises(WorkspaceError, match="symbolic link"):
        files.resolve("out/x")


# --- limits --------------------------------------------------------------------------------------


def test_file_size_limit_on_read_write_and_edit(root):
    files = FileTools(root, max_file_bytes=10)
    (root / "ten.txt").write_text("0123456789")
    (root / "eleven.txt").write_text("0123456789A")

    assert files.read_file("ten.txt") == "0123456789"
    assert files.read_file("eleven.txt") == (
        "Error: 'eleven.txt' is larger than the 10-byte limit (11 bytes; "
        "FileTools(max_file_bytes=10) sets it); use search_files to find what you need in it"
    )
    assert files.write_file("new.txt", "é" * 6) == (
        "Error: the new content of 'new.txt' is 12 bytes, over the 10-byte limit "
        "(FileTools(max_file_bytes=10) sets it); write smaller files"
    )
    assert files.write_file("new.txt", "é" * 11) == (
        "Error: the new content of 'new.txt' is 22 bytes, over the 10-byte limit "
        "(FileTools(max_file_bytes=10) sets it); write smaller files"
    )
    assert not (root / "new.txt").exists()
    assert files.edit_file("ten.txt", "9", "99").startswith("Error: the new content of 'ten.txt'")
    assert (root / "ten.txt").read_text() == "0123456789"
    assert files.search_files("A") == "No matches for 'A' in '.'."  # oversized files are skipped


def test_every_answer_is_capped_with_a_truncation_note(root):
    for i in range(300):
        (root / "docs" / f"file_{i:03}.txt").write_text("x")
    full = FileTools(root).list_dir("docs")
    capped = FileTools(root, max_result_chars=200).list_dir("docs")

    assert len(full) > 200 and len(capped) <= 200
    shown, note = capped.split("\n[truncated: ")
    assert full.startswith(shown)
    assert note == f"{len(full) - len(shown)} more characters]"


def test_long_files_read_in_pieces(root):
    content = "".join(f"line {i:03}\n" for i in range(100))  # 9 characters a line
    (root / "long.txt").write_text(content)
    files = FileTools(root, max_result_chars=300)

    pieces, start = [], 1
    while True:
        answer = files.read_file("long.txt", start_line=start)
        assert len(answer) <= 300
        if "[truncated: " not in answer:
            pieces.append(answer)
            break
        body, note = answer.split("\n[truncated: ")
        pieces.append(body)
        omitted, hint = note.split(" more characters]\n")
        assert int(omitted) == len(content) - len("".join(pieces))
        assert hint.startswith("[to read on, call read_file with start_line=")
        start = int(hint.split("=")[1].rstrip("]"))
    assert "".join(pieces) == content
    assert len(pieces) > 3


def test_line_ranges(root):
    (root / "five.txt").write_text("1\n2\n3\n4\n5\n")
    files = FileTools(root)

    assert files.read_file("five.txt", start_line=2, max_lines=2) == "2\n3\n"
    assert files.read_file("five.txt", start_line=5) == "5\n"
    assert files.read_file("five.txt", start_line=6) == (
        "Error: 'five.txt' has 5 lines; start_line 6 is past the end"
    )
    assert files.read_file("five.txt", start_line=0).startswith("Error: start_line must be 1")
    assert files.read_file("five.txt", max_lines=0).startswith("Error: max_lines must be 1")


def test_one_line_longer_than_the_cap(root):
    (root / "wide.txt").write_text("w" * 1000 + "\nnext\n")
    files = FileTools(root, max_result_chars=200)

    first = files.read_file("wide.txt")
    assert len(first) <= 200 and first.startswith("www")
    assert first.endswith("[to read on, call read_file with start_line=2]")
    assert files.read_file("wide.txt", start_line=2) == "next\n"


def test_search_caps_matches_and_long_lines(root):
    (root / "many.txt").write_text("".join(f"match {i}\n" for i in range(10)))
    (root / "wide.txt").write_text("match " + "y" * 1000 + "\n")
    files = FileTools(root, max_matches=3)

    assert files.search_files("match", "many.txt") == (
        "many.txt:1: match 0\nmany.txt:2: match 1\nmany.txt:3: match 2\n"
        "[stopped after 3 matches; narrow the pattern or the path]"
    )
    assert files.search_files("match", "wide.txt") == f"wide.txt:1: match {'y' * 294} [line cut]"


# --- behaviour -----------------------------------------------------------------------------------


def test_write_creates_folders_and_overwrites(files, root):
    assert files.write_file("new/deeper/f.txt", "one") == "Created 'new/deeper/f.txt' (3 bytes)."
    assert files.write_file("/" + str(root / "new/deeper/f.txt").lstrip("/"), "two") == (
        "Overwrote 'new/deeper/f.txt' (3 bytes)."
    )
    assert (root / "new" / "deeper" / "f.txt").read_text() == "two"
    assert files.write_file("docs", "x") == "Error: 'docs' is a directory; give a file path"
    assert files.write_file(".", "x") == "Error: '.' is a directory; give a file path"
    assert files.write_file("docs/readme.md/child.txt", "x") == (
        "Error: 'docs/readme.md/child.txt': File exists"
    )


def test_read_errors(files, root):
    (root / "blob.bin").write_bytes(b"PK\x03\x04\x00\x01binary")
    (root / "latin1.txt").write_bytes("café".encode("latin-1"))

    assert files.read_file("missing.txt") == (
        "Error: 'missing.txt' does not exist; use list_dir or search_files"
    )
    assert (
        files.read_file("docs") == "Error: 'docs' is a directory; use list_dir to see what is in it"
    )
    assert (
        files.read_file("blob.bin")
        == "Error: 'blob.bin' is a binary file; only text files can be read"
    )
    assert files.read_file("latin1.txt").startswith("Error: 'latin1.txt' is not UTF-8 text")
    assert files.edit_file("blob.bin", "PK", "ZIP").startswith("Error: 'blob.bin' is a binary file")
    assert files.read_file("docs/readme.md") == "hello\nworld\n"
    (root / "empty.txt").write_text("")
    assert files.read_file("empty.txt") == ""


def test_edit_file(files, root):
    path = root / "code.py"
    path.write_bytes(b"x = 1\r\ny = 1\r\nz = 2\r\n")

    assert files.edit_file("code.py", "z = 2", "z = 3") == "Replaced 1 occurrence in 'code.py'."
    assert path.read_bytes() == b"x = 1\r\ny = 1\r\nz = 3\r\n"  # line endings kept
    assert files.edit_file("code.py", "= 1", "= 0") == (
        "Error: old_string occurs 2 times in 'code.py'; include more surrounding text to make it "
        "unique, or pass replace_all=true to replace every occurrence"
    )
    assert files.edit_file("code.py", "= 1", "= 0", replace_all=True) == (
        "Replaced 2 occurrences in 'code.py'."
    )
    assert path.read_bytes() == b"x = 0\r\ny = 0\r\nz = 3\r\n"
    assert files.edit_file("code.py", "w = 9", "w = 0").startswith(
        "Error: old_string was not found in 'code.py'; read the file and copy the text exactly"
    )
    assert files.edit_file("code.py", "", "x").startswith("Error: old_string is empty")
    assert files.edit_file("nope.py", "a", "b").startswith("Error: 'nope.py' does not exist")


def test_list_dir(files, root):
    (root / "docs" / "sub").mkdir()
    (root / "empty").mkdir()

    assert files.list_dir("docs") == "readme.md (12 bytes)\nsub/"
    assert files.list_dir("alias") == files.list_dir("docs")
    assert files.list_dir("empty") == "(empty directory)"
    assert (
        files.list_dir("docs/readme.md")
        == "Error: 'docs/readme.md' is a file; use read_file to read it"
    )
    assert files.list_dir("nowhere") == "Error: 'nowhere' does not exist"


def test_search_files(files, root):
    (root / "docs" / "notes.txt").write_text("Hello again\nbye\n")
    (root / "docs" / "image.png").write_bytes(b"\x89PNG\x00hello")

    assert files.search_files("hello") == "docs/readme.md:1: hello"
    assert files.search_files("hello", ignore_case=True) == (
        "docs/notes.txt:1: Hello again\ndocs/readme.md:1: hello"
    )
    assert files.search_files(r"^(bye|world)$", "docs", regex=True) == (
        "docs/notes.txt:2: bye\ndocs/readme.md:2: world"
    )
    assert files.search_files("(", regex=False) == "No matches for '(' in '.'."
    assert files.search_files("(", regex=True).startswith(
        "Error: pattern is not a valid regular expression: "
    )
    assert files.search_files("world", "docs/readme.md") == "docs/readme.md:2: world"
    assert files.search_files("") == "Error: pattern is empty; give the text to search for"
    assert files.search_files("x", "nowhere") == "Error: 'nowhere' does not exist"


def test_constructor_checks(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        FileTools(tmp_path / "missing")
    (tmp_path / "f").write_text("")
    with pytest.raises(ValueError, match="is not a directory"):
        FileTools(tmp_path / "f")
    with pytest.raises(ValueError, match=r"max_result_chars=\.\.\.\) must be at least 200"):
        FileTools(tmp_path, max_result_chars=50)
    with pytest.raises(ValueError, match=r"max_file_bytes=\.\.\.\) must be at least 1"):
        FileTools(tmp_path, max_file_bytes=0)
    with pytest.raises(TypeError, match=r"max_matches=\.\.\.\) must be an integer"):
        FileTools(tmp_path, max_matches=2.5)
    assert repr(FileTools(str(tmp_path))) == f"FileTools({str(tmp_path.resolve())!r})"


# --- as tools and as a skill ---------------------------------------------------------------------


def test_tools_schemas_and_skill(files):
    names = ["read_file", "write_file", "edit_file", "list_dir", "search_files"]
    assert [t.__name__ for t in files.tools] == names
    assert [getattr(files, n) for n in names] == files.tools

    schemas = {t.__name__: model_tool_schema(t)["function"] for t in files.tools}
    assert schemas["read_file"]["description"].startswith("Read a text file of the workspace")
    assert "\n    " not in schemas["edit_file"]["description"].split("Args:")[0]
    assert schemas["edit_file"]["parameters"] == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "the file, relative to the workspace root."},
            "old_string": {"type": "string", "description": "the exact text to replace."},
            "new_string": {"type": "string", "description": "the text to put in its place."},
            "replace_all": {
                "type": "boolean",
                "description": "replace every occurrence instead of requiring exactly one.",
            },
        },
        "required": ["path", "old_string", "new_string"],
    }
    assert schemas["list_dir"]["parameters"]["required"] == []

    assert isinstance(files.skill, Skill) and files.skill.name == "files"
    assert list(files.skill.tools) == files.tools
    assert "Paths are relative to the workspace root" in files.skill.instructions
    assert "1000000 bytes" in files.skill.instructions


def test_tool_options_can_be_added_to_a_file_tool(root):
    files = FileTools(root)
    tool(needs_approval=True)(files.write_file)

    assert tool_spec(files.write_file).needs_approval
    assert tool_spec(files.skill.tools[1]).needs_approval
    assert not tool_spec(FileTools(root).write_file).needs_approval  # other instances untouched


def test_two_workspaces_on_one_agent_clash(tmp_path):
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one, two = FileTools(tmp_path / "one"), FileTools(tmp_path / "two")

    with pytest.raises(ValueError, match="Two different skills are named 'files'"):
        skill_tools([one.skill, two.skill])


def test_file_tools_as_agent_functions_end_to_end(files, root):
    client = ScriptedClient(
        [
            calls(
                ToolCall("write_file", {"path": "notes/plan.md", "content": "# Plan\n- draft\n"})
            ),
            calls(
                ToolCall(
                    "edit_file",
                    {"path": "notes/plan.md", "old_string": "draft", "new_string": "ship"},
                ),
                ToolCall("read_file", {"path": "notes/plan.md"}),
            ),
            calls(
                ToolCall("read_file", {"path": "../outside/secret.txt"}),
                ToolCall("read_file", {"path": "notes/plan.md", "start_line": "two"}),
                ToolCall("search_files", {"pattern": "ship"}),
                ToolCall("list_dir", {"path": "notes"}),
            ),
            text("The plan says: ship."),
        ]
    )
    agent = Agent(name="writer", functions=files.tools)

    response = Swarm(client).run(agent, [{"role": "user", "content": "Write a plan."}])

    tool_answers = [
        (m["tool_name"], m["content"]) for m in response.messages if m["role"] == "tool"
    ]
    assert tool_answers == [
        ("write_file", "Created 'notes/plan.md' (15 bytes)."),
        ("edit_file", "Replaced 1 occurrence in 'notes/plan.md'."),
        ("read_file", "# Plan\n- ship\n"),
        (
            "read_file",
            "Error: '../outside/secret.txt' is outside the workspace; use a path relative to the "
            "workspace root",
        ),
        (
            "read_file",
            "Error: invalid arguments for tool read_file: start_line: Input should be a valid "
            "integer, unable to parse string as an integer. Call it again with valid arguments.",
        ),
        ("search_files", "notes/plan.md:2: - ship"),
        ("list_dir", "plan.md (14 bytes)"),
    ]
    assert response.messages[-1]["content"] == "The plan says: ship."
    assert (root / "notes" / "plan.md").read_text() == "# Plan\n- ship\n"
    offered = [t["function"]["name"] for t in client.requests[0]["tools"]]
    assert offered == ["read_file", "write_file", "edit_file", "list_dir", "search_files"]
    sent = json.dumps(client.requests[-1]["messages"])
    assert "top secret" not in sent


def test_file_skill_wired_into_an_agent(files):
    skills = [files.skill]
    agent_functions: list[Any] = []
    agent = Agent(functions=[*agent_functions, *skill_tools(skills, agent_functions)])
    client = ScriptedClient([calls(ToolCall("list_dir", {})), text("ok")])

    response = Swarm(client).run(agent, [{"role": "user", "content": "ls"}])

    assert response.messages[1]["content"].startswith("a/\nalias@\n")


def test_no_file_tool_raises_for_os_errors(files, root, monkeypatch):
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "open", broken)
    assert files.write_file("docs/x.txt", "x") == "Error: 'docs/x.txt': Permission denied"
    assert not (root / "docs" / "x.txt").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_special_files_are_neither_read_nor_written(files, root):
    os.mkfifo(root / "pipe")

    assert files.read_file("pipe") == "Error: 'pipe' is not a regular file"
    assert files.write_file("pipe", "x") == "Error: 'pipe' is not a regular file"
    assert files.edit_file("pipe", "a", "b") == "Error: 'pipe' is not a regular file"
    assert files.search_files("hello") == "docs/readme.md:1: hello"  # skipped, does not block
