"""File tools against a hostile workspace: hard links out, links swapped in while the tools run,
and patterns that make a backtracking regex engine run for ages."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from durable_swarm.toolkit import FileTools

SECRET = "top secret outside the workspace\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text(SECRET)
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def test_a_hard_link_to_a_file_outside_is_neither_read_nor_written(root, outside):
    os.link(outside / "secret.txt", root / "linked.txt")
    files = FileTools(root)
    refusal = (
        "Error: 'linked.txt' has 2 hard links; file tools refuse files with more than one link, "
        "which may share their content with a file outside the workspace"
    )

    assert files.read_file("linked.txt") == refusal
    assert files.write_file("linked.txt", "pwned") == refusal
    assert files.edit_file("linked.txt", "top", "pwned") == refusal
    assert files.search_files("secret") == "No matches for 'secret' in '.'."
    assert files.search_files("secret", "linked.txt") == "No matches for 'secret' in 'linked.txt'."
    assert (outside / "secret.txt").read_text() == SECRET
    assert os.stat(outside / "secret.txt").st_nlink == 2  # the link itself is left alone
    assert files.list_dir() == f"linked.txt ({len(SECRET)} bytes)"


def test_a_write_replaces_the_file_and_keeps_its_mode(root):
    target = root / "script.sh"
    target.write_text("echo one\n")
    target.chmod(0o750)
    files = FileTools(root)

    assert files.edit_file("script.sh", "one", "two") == "Replaced 1 occurrence in 'script.sh'."
    assert target.read_text() == "echo two\n"
    assert target.stat().st_mode & 0o777 == 0o750
    assert sorted(p.name for p in root.iterdir()) == ["script.sh"]  # no temporary file left


SWAPPER = r"""
import os, shutil, sys
root, outside = sys.argv[1], sys.argv[2]
p = lambda name: os.path.join(root, name)


def force(action):  # write_file may make a new `sw` folder in a gap: drop it and retry
    while True:
        try:
            return action()
        except OSError:
            if os.path.isdir(p("sw")) and not os.path.islink(p("sw")):
                shutil.rmtree(p("sw"), ignore_errors=True)


swaps = 0
while not os.path.exists(p("../stop")):
    force(lambda: os.rename(p("sw"), p("held")))
    force(lambda: os.symlink(outside, p("sw")))
    os.symlink(os.path.join(outside, "secret.txt"), p("f.link"))
    os.replace(p("f.link"), p("f.txt"))
    os.unlink(p("sw"))
    force(lambda: os.rename(p("held"), p("sw")))
    with open(p("f.new"), "w") as f:
        f.write("inside\n")
    os.replace(p("f.new"), p("f.txt"))
    swaps += 1
print(swaps)
"""


def test_links_swapped_in_while_the_tools_run_never_lead_out(root, outside):
    """Another process swaps, as fast as it can, `sw` between a real folder and a link to the
    outside folder, and `f.txt` between a real file and a link to the secret, while the tools
    run for several seconds: no answer ever shows the secret and nothing outside is written."""
    (root / "sw").mkdir()
    (root / "sw" / "secret.txt").write_text("inside\n")
    (root / "f.txt").write_text("inside\n")
    files = FileTools(root)
    answers: list[str] = []
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(root), str(outside)], stdout=subprocess.PIPE, text=True
    )
    try:
        end = time.monotonic() + 4.0
        while time.monotonic() < end:
            answers += [
                files.read_file("sw/secret.txt"),
                files.read_file("f.txt"),
                files.edit_file("sw/secret.txt", "inside", "inside"),
                files.write_file("sw/new.txt", "pwned"),
                files.search_files("secret", "sw"),
                files.search_files("top"),
                files.list_dir("sw"),
            ]
    finally:
        (root.parent / "stop").touch()
        out, _ = swapper.communicate(timeout=60)
    swaps = int(out)

    escapes = [a for a in answers if "top secret" in a]
    assert escapes == []
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == SECRET
    # The race really ran: both sides of the swap were seen many times.
    assert swaps > 100
    assert answers.count("inside\n") > 10
    assert sum(a.startswith("Error:") for a in answers) > 10
    print(f"{len(answers)} tool calls against {swaps} swaps, {len(escapes)} escapes")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(a|aa)+$", r"(a*)*b", r"(x+x+)+y"])
def test_catastrophic_patterns_run_in_linear_time(root, pattern):
    """Each of these takes a backtracking engine (Python's `re`) longer than the age of the
    universe on these lines; RE2 answers at once."""
    (root / "a.txt").write_text(("a" * 5000 + "!\n") * 20 + ("x" * 5000 + "\n") * 20)
    files = FileTools(root)

    started = time.monotonic()
    answer = files.search_files(pattern, regex=True)
    print(f"{pattern}: {time.monotonic() - started:.3f} s")

    assert answer == f"No matches for {pattern!r} in '.'."


def test_patterns_an_rE2_cannot_run_and_long_patterns_are_refused(root):
    files = FileTools(root)

    assert files.search_files(r"(a)\1", regex=True) == (
        "Error: pattern is not a valid regular expression: invalid escape sequence: \\1 "
        "(search_files uses RE2 syntax: no backreferences or lookarounds)"
    )
    assert files.search_files("a" * 1001).startswith(
        "Error: pattern is 1001 characters long, over the 1000-character limit"
    )


def test_a_search_stops_at_its_time_limit(root):
    for i in range(3):
        (root / f"{i}.txt").write_text("x\n")
    files = FileTools(root, max_search_seconds=0)

    assert files.search_files("x") == "[stopped after 0 s; search a smaller folder]"
