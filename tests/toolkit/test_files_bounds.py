"""File tools stay bounded whatever the workspace holds or the model asks: edits whose result
would be too large are refused before anything is built, searches hold a few directory
descriptors however wide or deep the tree (and say what they skipped), listings of huge folders
keep only what an answer can show, and every answer fits `max_result_chars`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import re2

from durable_swarm.toolkit import FileTools


def run_child(code: str, *args: str) -> dict:
    """Run `code` in a fresh Python process; it prints one JSON object as its last line."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


# --- edit_file and write_file: the size first ---------------------------------------------------

EDIT_IN_A_SMALL_ADDRESS_SPACE = """
import json, resource, sys
from durable_swarm.toolkit import FileTools
files = FileTools(sys.argv[1])
# 2 GiB of address space: building the 10 GB result (or anything near it) fails at once
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
answer = files.edit_file("big.txt", "a", "b" * 10_000, replace_all=True)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"answer": answer, "peak_kib": peak}))
"""


@pytest.mark.timeout(240)
def test_an_edit_whose_result_would_be_10_gb_is_refused_before_it_is_built(tmp_path: Path):
    """1 MB of "a", each replaced by 10,000 characters: 10 GB that used to be built (MemoryError)
    before the size limit was checked."""
    (tmp_path / "big.txt").write_text("a" * 1_000_000)
    result = run_child(EDIT_IN_A_SMALL_ADDRESS_SPACE, str(tmp_path))
    print(f"peak RSS of the process: {result['peak_kib'] / 1024:.0f} MiB")
    assert result["answer"] == (
        "Error: the new content of 'big.txt' would be 10000000000 bytes, over the 1000000-byte "
        "limit (FileTools(max_file_bytes=1000000) sets it); nothing was changed: replace fewer "
        "occurrences, or with shorter text"
    )
    assert (tmp_path / "big.txt").read_text() == "a" * 1_000_000


def test_edit_sizes_are_counted_in_utf8_bytes(tmp_path: Path):
    (tmp_path / "a.txt").write_text("aaaaaa")
    assert (
        FileTools(tmp_path, max_file_bytes=11)
        .edit_file("a.txt", "a", "é", replace_all=True)
        .startswith("Error: the new content of 'a.txt' would be 12 bytes, over the 11-byte limit")
    )
    assert (tmp_path / "a.txt").read_text() == "aaaaaa"
    files = FileTools(tmp_path, max_file_bytes=12)
    assert files.edit_file("a.txt", "a", "é", replace_all=True) == (
        "Replaced 6 occurrences in 'a.txt'."
    )
    assert (tmp_path / "a.txt").read_text() == "éééééé"
    # shrinking is always possible, and a single replacement counts once
    assert files.edit_file("a.txt", "éééééé", "x") == "Replaced 1 occurrence in 'a.txt'."
    assert (tmp_path / "a.txt").read_text() == "x"


def test_a_100_kb_edit_that_would_grow_to_50_mb_is_refused(tmp_path: Path):
    (tmp_path / "f.txt").write_text("a" * 100_000)
    answer = FileTools(tmp_path).edit_file("f.txt", "a", "b" * 500, replace_all=True)
    assert answer.startswith("Error: the new content of 'f.txt' would be 50000000 bytes")


def test_a_huge_file_is_refused_from_its_size_without_reading_it(tmp_path: Path):
    with open(tmp_path / "sparse.log", "wb") as f:
        f.truncate(10 << 30)  # 10 GiB, sparse: nothing on disk
    files = FileTools(tmp_path)
    refusal = (
        "Error: 'sparse.log' is larger than the 1000000-byte limit (10737418240 bytes; "
        "FileTools(max_file_bytes=1000000) sets it); use search_files to find what you need in it"
    )
    assert files.read_file("sparse.log") == refusal
    assert files.edit_file("sparse.log", "a", "b") == refusal
    assert files.search_files("a") == "No matches for 'a' in '.'."  # oversized: skipped


def test_a_surrogate_in_new_text_is_an_answer_not_an_exception(tmp_path: Path):
    (tmp_path / "a.txt").write_text("abc")
    files = FileTools(tmp_path)
    assert files.write_file("b.txt", "x\ud800").startswith(
        "Error: the text for 'b.txt' contains characters UTF-8 cannot encode"
    )
    assert files.edit_file("a.txt", "b", "\udfff").startswith("Error: the text for 'a.txt'")
    assert (tmp_path / "a.txt").read_text() == "abc"
    assert not (tmp_path / "b.txt").exists()


# --- search_files: a few descriptors, whatever the tree -----------------------------------------


def make_tree(root: Path, wide: int = 320, deep: int = 60) -> list[str]:
    """`wide` folders side by side and a chain `deep` folders deep with branches, a matching
    line in each; the matches search_files should report, in its order."""
    expected = []
    for i in range(wide):
        (root / f"w{i:03}").mkdir()
        (root / f"w{i:03}" / "f.txt").write_text(f"needle {i}\n")
    chain = root / "z"
    for depth in range(deep):
        chain.mkdir()
        (chain / "f.txt").write_text(f"needle deep {depth}\n")
        if depth % 7 == 0:  # a side branch two levels deep, visited after the chain below
            (chain / "zside" / "inner").mkdir(parents=True)
            (chain / "zside" / "inner" / "g.txt").write_text("needle side\n")
        chain = chain / "z"
    for path in sorted(root.rglob("*.txt")):
        expected.append(path.relative_to(root).as_posix())
    return expected


SEARCH_WITH_FEW_DESCRIPTORS = """
import json, os, resource, sys
from durable_swarm.toolkit import FileTools
root, limit, free = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
files = FileTools(root, max_matches=10_000, max_result_chars=1_000_000)
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
# the rest of the worker holds all descriptors but `free` of them
held = []
while True:
    try:
        held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        break
for fd in held[len(held) - free:]:
    os.close(fd)
lowest = os.open(os.devnull, os.O_RDONLY)
os.close(lowest)
answer = files.search_files("needle")
after = os.open(os.devnull, os.O_RDONLY)
print(json.dumps({"answer": answer, "lowest": lowest, "after": after}))
"""


def walk_order(paths: list[str]) -> list[str]:
    """Depth first, each folder's files before its subfolders, names sorted."""
    return sorted(paths, key=lambda p: [(1, part) for part in p.split("/")[:-1]] + [(0, "")])


@pytest.mark.timeout(240)
def test_a_search_of_380_folders_under_a_64_descriptor_limit_finds_every_match(tmp_path: Path):
    """It used to hold a descriptor for every folder queued: 271 of 300 matches under 256
    descriptors, no word of the rest, and EMFILE for the other threads of the worker."""
    expected = make_tree(tmp_path)
    assert len(expected) == 389
    result = run_child(SEARCH_WITH_FEW_DESCRIPTORS, str(tmp_path), "64", "16")
    lines = result["answer"].splitlines()
    assert [line.split(":")[0] for line in lines] == walk_order(expected)
    assert all(":1: needle" in line for line in lines)
    assert result["after"] == result["lowest"]  # every descriptor it took was given back


@pytest.mark.timeout(240)
def test_folders_a_search_cannot_open_are_named_in_the_answer(tmp_path: Path):
    make_tree(tmp_path, wide=30, deep=3)
    result = run_child(SEARCH_WITH_FEW_DESCRIPTORS, str(tmp_path), "64", "3")
    answer = result["answer"]
    print(answer[-600:])
    note = answer.splitlines()[-1]
    assert note.startswith("[skipped ")
    assert "(Too many open files)" in note
    assert note.endswith("; the search may have missed matches in them]")
    assert " and " in note and " more;" in note  # only the first few are named


def test_search_answers_keep_their_notes_within_max_result_chars(tmp_path: Path):
    for i in range(50):
        (tmp_path / f"{i:02}.txt").write_text("needle " + "x" * 250 + "\n")
    files = FileTools(tmp_path, max_result_chars=400, max_matches=20)
    answer = files.search_files("needle")
    assert len(answer) <= 400
    body, note = answer.rsplit("\n", 1)
    assert note == "[stopped after 20 matches; narrow the pattern or the path]"
    assert "\n[truncated: " in body


def test_a_search_through_a_deep_tree_reopens_folders_without_following_links(tmp_path: Path):
    """Folders given up on the way down are opened again from a held ancestor; a link put in
    place of one of them meanwhile is not followed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("needle outside\n")
    root = tmp_path / "ws"
    root.mkdir()
    expected = make_tree(root, wide=3, deep=30)
    files = FileTools(root, max_matches=10_000, max_result_chars=1_000_000)
    lines = files.search_files("needle").splitlines()
    assert [line.split(":")[0] for line in lines] == walk_order(expected)

    # swap a folder of the chain for a link out while the walk is below it
    search = files._search_files
    chain = root.joinpath(*["z"] * 12)

    def swapping(*args: object) -> str:
        original = files._visit

        def visit(levels, prefix, walk):  # type: ignore[no-untyped-def]
            yield from original(levels, prefix, walk)
            if len(levels) == 20 and not (root / "moved").exists():
                chain.rename(root / "moved")
                chain.symlink_to(outside)

        files._visit = visit  # type: ignore[method-assign]
        try:
            return search(*args)  # type: ignore[arg-type]
        finally:
            del files._visit

    answer = swapping(".", "needle", False, False)
    assert "outside" not in answer
    assert "z/" * 12 in answer.splitlines()[-1]  # the folder that changed is named as skipped
    assert answer.splitlines()[-1].startswith("[skipped ")


# --- list_dir: huge folders ----------------------------------------------------------------------


def test_a_folder_of_12000_entries_lists_the_first_ones_and_counts_the_rest(tmp_path: Path):
    for i in range(12_000):
        (tmp_path / f"f{i:05}").touch()
    answer = FileTools(tmp_path, max_result_chars=300).list_dir()
    assert len(answer) <= 300
    assert answer.startswith("f00000 (0 bytes)\nf00001 (0 bytes)\n")
    assert answer.endswith(
        "\n[2000 more entries not shown (the folder has 12000); list a subfolder or use "
        "search_files]"
    )
    assert "\n[truncated: " in answer
    assert FileTools(tmp_path).list_dir().count("\n") < 12_000


# --- large files are split into lines a slice at a time -----------------------------------------

SEPARATORS = ["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028"]


def mixed_text(lines: int) -> str:
    """Lines of varied lengths ended by every separator `str.splitlines` knows, long enough to
    span several of the slices the tools split files in."""
    return "".join(
        f"line {i} " + "w" * (i * 37 % 90) + SEPARATORS[i * 7 % len(SEPARATORS)]
        for i in range(lines)
    )


def reference_read(text: str, limit: int, start_line: int, max_lines: int | None) -> str:
    """read_file's answer as it was computed from the whole list of lines."""
    lines = text.splitlines(keepends=True)
    end = None if max_lines is None else start_line - 1 + max_lines
    selected = lines[start_line - 1 : end]
    whole = "".join(selected)
    if len(whole) <= limit:
        return whole
    note = f"\n[truncated: {len(whole)} more characters]\n[to read on, call read_file with "
    budget = limit - len(note + f"start_line={start_line + len(selected)}]")
    fit = size = 0
    while fit < len(selected) and size + len(selected[fit]) <= budget:
        size += len(selected[fit])
        fit += 1
    shown = "".join(selected[:fit]) if fit else selected[0][:budget]
    return (
        f"{shown}\n[truncated: {len(whole) - len(shown)} more characters]"
        f"\n[to read on, call read_file with start_line={start_line + max(fit, 1)}]"
    )


def test_reading_a_large_file_of_mixed_line_ends_gives_the_same_lines(tmp_path: Path):
    text = mixed_text(12_000)
    assert len(text) > 3 * 65536
    (tmp_path / "mixed.txt").write_bytes(text.encode("utf-8"))
    for limit in (200, 20_000, 1_000_000):
        files = FileTools(tmp_path, max_result_chars=limit)
        for start, count in [(1, None), (1, 5), (5000, 3), (9000, None), (11_999, 10)]:
            assert files.read_file("mixed.txt", start, count) == reference_read(
                text, limit, start, count
            ), (limit, start, count)
    assert FileTools(tmp_path).read_file("mixed.txt", 12_001) == (
        "Error: 'mixed.txt' has 12000 lines; start_line 12001 is past the end"
    )


def test_searching_a_large_file_numbers_lines_as_splitlines_does(tmp_path: Path):
    text = mixed_text(12_000)
    (tmp_path / "mixed.txt").write_bytes(text.encode("utf-8"))
    lines = text.splitlines()
    files = FileTools(tmp_path, max_matches=10_000, max_result_chars=1_000_000)
    for pattern, regex in [("line 11", False), (r"^line 7\d* w{80}", True), (r"9 w*$", True)]:
        matcher = re2.compile(pattern if regex else re2.escape(pattern))
        expected = [
            f"mixed.txt:{n}: {line}" for n, line in enumerate(lines, 1) if matcher.search(line)
        ]
        assert expected
        assert files.search_files(pattern, regex=regex).splitlines() == expected, pattern


def test_a_search_looks_at_the_first_entries_of_a_crowded_folder_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A folder of millions of entries would take that many names in memory: a search keeps
    the first (100,000, here 50) by name and names the folders it searched in part."""
    monkeypatch.setattr("durable_swarm.toolkit._files._FOLDER_ENTRIES", 50)
    (tmp_path / "crowd").mkdir()
    for i in range(80):
        (tmp_path / "crowd" / f"f{i:02}.txt").write_text("needle\n")
    files = FileTools(tmp_path, max_matches=1000, max_result_chars=100_000)
    lines = files.search_files("needle").splitlines()
    assert lines[:-1] == [f"crowd/f{i:02}.txt:1: needle" for i in range(50)]
    assert lines[-1] == (
        "[searched only the first 50 entries (by name) of folders with more: crowd/ "
        "(80 entries); search a file there by its path]"
    )
    assert files.search_files("needle", "crowd/f70.txt") == "crowd/f70.txt:1: needle"
