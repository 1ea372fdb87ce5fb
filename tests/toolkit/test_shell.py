"""ShellTool: argument vectors run in the workspace, the allow list, timeouts that kill the whole
process tree (children in their own session too), output caps, the scrubbed environment, approval
by default, and its schema."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from durable_swarm import Agent, ShellTool, Swarm
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text
from durable_swarm.toolkit._shell import _Server, _working_bwrap
from durable_swarm.tools import model_tool_schema, tool_spec


def test_a_command_runs_in_the_workspace_and_reports_its_exit_code(tmp_path: Path):
    (tmp_path / "a.txt").write_text("hello\n")
    shell = ShellTool(tmp_path, sandbox=False)
    assert shell(["cat", "a.txt"]) == "exit code 0\nhello\n"
    assert shell(["pwd"]) == f"exit code 0\n{tmp_path.resolve()}\n"
    assert shell(["sh", "-c", "echo oops >&2; exit 3"]) == "exit code 3\noops\n"
    assert shell(["true"]) == "exit code 0"


def test_an_argument_vector_is_not_a_shell_string(tmp_path: Path):
    shell = ShellTool(tmp_path, sandbox=False)
    assert shell(["echo", "$HOME", "*", "a;b"]) == "exit code 0\n$HOME * a;b\n"
    assert shell("echo hi").startswith("Error: command must be a non-empty list of strings")
    assert shell([]).startswith("Error: command must be a non-empty list")
    assert shell(["echo", 3]).startswith("Error: command must be a non-empty list")
    assert shell(["no-such-program-here"]) == (
        "Error: program 'no-such-program-here' was not found on PATH."
    )


def test_a_shell_string_only_when_asked(tmp_path: Path):
    shell = ShellTool(tmp_path, shell=True, sandbox=False)
    assert shell("echo one two | wc -w") == "exit code 0\n2\n"
    schema = model_tool_schema(shell)["function"]["parameters"]
    assert schema["properties"]["command"]["type"] == "string"
    with pytest.raises(ValueError, match="cannot check which programs"):
        ShellTool(tmp_path, shell=True, allow=["ls"])


def test_only_allowed_programs_run(tmp_path: Path):
    shell = ShellTool(tmp_path, allow=["echo", "ls"], sandbox=False)
    assert shell(["echo", "ok"]) == "exit code 0\nok\n"
    assert shell(["rm", "-rf", "."]) == (
        "Error: program 'rm' is not allowed here; allowed programs: echo, ls."
    )
    assert shell(["/bin/rm", "x"]).startswith("Error: program '/bin/rm' is not allowed")
    assert "Only these programs may run: echo, ls." in tool_spec(shell).description


def test_a_command_that_runs_too_long_is_killed_with_its_children(tmp_path: Path):
    shell = ShellTool(tmp_path, timeout=1, sandbox=False)
    started = time.monotonic()
    # a child in the background keeps running unless the whole group is killed
    answer = shell(["sh", "-c", "echo started; (sleep 30; touch late.txt) & sleep 30"])
    assert time.monotonic() - started < 25
    assert answer == (
        "Error: the command timed out after 1 seconds and was killed, with every process it "
        "started (the run_command tool's limit, ShellTool(timeout=1); split the work into shorter "
        "commands).\nstarted\n"
    )
    time.sleep(0.2)
    assert not (tmp_path / "late.txt").exists()


def test_output_is_cut_to_max_output_chars(tmp_path: Path):
    shell = ShellTool(tmp_path, max_output_chars=10, sandbox=False)
    answer = shell(["sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a"])
    assert answer.startswith("exit code 0\naaaaaaaaaa\n[... output cut: 99990 more")


def test_the_environment_is_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SECRET_TOKEN", "do-not-leak")
    shell = ShellTool(tmp_path, env={"MODE": "test"}, sandbox=False)
    names = set(shell(["env"]).splitlines()[1:])
    keys = {line.split("=", 1)[0] for line in names}
    assert keys == {"PATH", "HOME", "LANG", "TERM", "MODE"}
    assert f"HOME={tmp_path.resolve()}" in names and "MODE=test" in names


def test_it_needs_approval_by_default_and_a_rejected_command_never_runs(tmp_path: Path):
    asked: list[dict[str, Any]] = []

    def reject(call: dict[str, Any]) -> bool:
        asked.append(call)
        return False

    client = ScriptedClient(
        [calls(ToolCall("run_command", {"command": ["touch", "made.txt"]}, id="t")), text("ok")]
    )
    agent = Agent(name="Ops", functions=[ShellTool(tmp_path)])
    Swarm(client, approve_fn=reject).run(agent, [{"role": "user", "content": "touch"}])
    assert [c["id"] for c in asked] == ["t"]
    assert not (tmp_path / "made.txt").exists()

    approved = ScriptedClient(
        [calls(ToolCall("run_command", {"command": ["touch", "made.txt"]}, id="t")), text("ok")]
    )
    Swarm(approved, approve_fn=lambda call: True).run(agent, [{"role": "user", "content": "go"}])
    assert (tmp_path / "made.txt").exists()
    assert not tool_spec(ShellTool(tmp_path, needs_approval=False)).needs_approval


def test_the_schema_offered_to_the_model(tmp_path: Path):
    function = model_tool_schema(ShellTool(tmp_path, timeout=5, name="sh"))["function"]
    assert function["name"] == "sh"
    assert function["parameters"] == {
        "type": "object",
        "properties": {
            "command": {
                "type": "array",
                "items": {"type": "string"},
                "description": 'The program and its arguments, e.g. ["ls", "-la"].',
            }
        },
        "required": ["command"],
    }
    assert "stopped after 5 seconds" in function["description"]


def test_bad_configurations_are_refused(tmp_path: Path):
    with pytest.raises(ValueError, match="not a directory"):
        ShellTool(tmp_path / "missing")
    with pytest.raises(TypeError, match="list of program names"):
        ShellTool(tmp_path, allow="ls")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        ShellTool(tmp_path, timeout=0)
    with pytest.raises(ValueError, match="not valid"):
        ShellTool(tmp_path, name="run it")


@pytest.mark.skipif(
    _working_bwrap().startswith("Error"), reason="bubblewrap cannot sandbox on this machine"
)
def test_under_bubblewrap_only_the_workspace_is_writable(tmp_path: Path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    shell = ShellTool(workspace, sandbox=True)
    assert shell(["touch", "inside.txt"]) == "exit code 0"
    assert (workspace / "inside.txt").exists()
    # /tmp is private to the command, the rest of the file system read-only
    assert shell(["touch", str(tmp_path / "outside.txt")]) == "exit code 0"
    assert not (tmp_path / "outside.txt").exists()
    answer = shell(["touch", str(Path.home() / "durable-swarm-sandbox-test")])
    assert answer.startswith("exit code 1") and "Read-only file system" in answer
    assert not (Path.home() / "durable-swarm-sandbox-test").exists()


def test_sandbox_true_without_bubblewrap_is_refused(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on this PATH
    _working_bwrap.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"needs bubblewrap .* not installed"):
            ShellTool(tmp_path, sandbox=True)
        assert ShellTool(tmp_path).bwrap is None  # sandbox=None: runs commands directly
    finally:
        _working_bwrap.cache_clear()


# --- nothing a command starts outlives the call ---------------------------------------------------


def alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie waiting for its parent has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


def wait_for_file(path: Path, seconds: float = 30.0) -> str:
    end = time.monotonic() + seconds
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < end, f"{path} was never written"
        time.sleep(0.02)
    return path.read_text().strip()


# a child that leaves the command's process group and session, writes its pid, sleeps forever
ESCAPE = "setsid sh -c 'echo $$ > escaped.pid; exec sleep infinity' &"
WAIT = "while [ ! -s escaped.pid ]; do sleep 0.01; done;"


@pytest.mark.timeout(120)
def test_a_child_in_its_own_session_is_killed_at_the_timeout(tmp_path: Path):
    """Killing the process group misses a `setsid` child, and waiting for the output pipe it
    holds never ends: the call must still answer, and the child must be gone."""
    shell = ShellTool(tmp_path, timeout=2, shell=True, sandbox=False)
    started = time.monotonic()
    answer = shell(f"{ESCAPE} {WAIT} echo waiting; sleep 100")
    print(f"answered after {time.monotonic() - started:.2f} s (timeout 2 s)")
    assert answer.startswith("Error: the command timed out after 2 seconds and was killed")
    assert answer.endswith("\nwaiting\n")
    escaped = int((tmp_path / "escaped.pid").read_text())
    assert not alive(escaped)


@pytest.mark.timeout(120)
def test_background_children_are_killed_when_the_command_exits(tmp_path: Path):
    shell = ShellTool(tmp_path, timeout=60, shell=True, sandbox=False)
    answer = shell(f"{ESCAPE} {WAIT} echo started")
    assert answer == (
        "exit code 0\nstarted\n\n[1 background process still running when the command exited "
        "were killed: nothing a command starts outlives it]"
    )
    assert not alive(int((tmp_path / "escaped.pid").read_text()))


@pytest.mark.timeout(120)
def test_a_double_forked_daemon_is_killed_too(tmp_path: Path):
    """The daemon's parent exits at once, so it is re-parented: to the tool's runner, which is a
    child subreaper, not to init."""
    shell = ShellTool(tmp_path, timeout=60, sandbox=False)
    answer = shell(["sh", "-c", f"(({ESCAPE}) &); {WAIT} echo detached"])
    assert answer.startswith("exit code 0\ndetached\n\n[1 background process")
    assert not alive(int((tmp_path / "escaped.pid").read_text()))


CALLER = """
import sys
from durable_swarm import ShellTool
print(ShellTool(sys.argv[1], timeout=600, shell=True, sandbox=False)(sys.argv[2]))
"""


@pytest.mark.timeout(120)
def test_the_tree_dies_with_the_process_calling_the_tool(tmp_path: Path):
    """A worker killed in the middle of a call (SIGKILL: no cleanup runs) leaves nothing behind."""
    caller = subprocess.Popen([sys.executable, "-c", CALLER, str(tmp_path), f"{ESCAPE} sleep 600"])
    try:
        escaped = int(wait_for_file(tmp_path / "escaped.pid"))
        assert alive(escaped)
        os.kill(caller.pid, signal.SIGKILL)
    finally:
        caller.kill()
        caller.wait()
    end = time.monotonic() + 30
    while alive(escaped) and time.monotonic() < end:
        time.sleep(0.05)
    assert not alive(escaped)


@pytest.mark.timeout(120)
def test_endless_output_is_cut_and_counted_not_kept(tmp_path: Path):
    """`yes` writes as fast as the pipe takes it until the timeout: the answer shows the first
    max_output_chars characters and counts the rest (the peak memory is measured by
    benchmarks/shell_bounds.py)."""
    shell = ShellTool(tmp_path, timeout=2, max_output_chars=1000, sandbox=False)
    answer = shell(["yes"])
    assert len(answer) <= 1000 + 400  # the documented bound: output, first line and notes
    head, rest = answer.split("\n", 1)
    assert head.startswith("Error: the command timed out after 2 seconds")
    assert rest.startswith("y\ny\n")
    shown, note = rest.split("\n[... output cut: ")
    assert len(shown) == 1000
    more = int(note.split()[0])
    print(f"{more} bytes cut")
    assert more > 100_000
    assert note.endswith(
        "more characters or bytes not shown; the run_command tool shows at most "
        "ShellTool(max_output_chars=1000) characters]"
    )


def test_nul_characters_are_refused(tmp_path: Path):
    assert ShellTool(tmp_path, sandbox=False)(["echo", "a\0b"]) == (
        "Error: the command contains a NUL character, which no argument may contain."
    )
    assert ShellTool(tmp_path, shell=True, sandbox=False)("echo a\0b").startswith(
        "Error: the command contains a NUL character"
    )
    with pytest.raises(ValueError, match="no name or value may contain a NUL"):
        ShellTool(tmp_path, env={"A": "x\0y"})


@pytest.mark.timeout(120)
def test_a_killed_runner_server_is_started_again(tmp_path: Path):
    shell = ShellTool(tmp_path, sandbox=False)
    assert shell(["echo", "one"]) == "exit code 0\none\n"
    first = _Server.pid
    os.kill(first, signal.SIGKILL)
    assert shell(["echo", "two"]) == "exit code 0\ntwo\n"
    assert _Server.pid != first and alive(_Server.pid)
    assert not alive(first)


@pytest.mark.timeout(120)
def test_a_command_outlives_no_kill_of_the_runner_server(tmp_path: Path):
    """The server only forks runners: killed while a command runs, the command's runner still
    ends its tree at the timeout."""
    shell = ShellTool(tmp_path, timeout=3, shell=True, sandbox=False)
    shell("true")
    answers: list[str] = []
    thread = threading.Thread(target=lambda: answers.append(shell(f"{ESCAPE} sleep 100")))
    thread.start()
    escaped = int(wait_for_file(tmp_path / "escaped.pid"))
    os.kill(_Server.pid, signal.SIGKILL)
    thread.join()
    assert answers[0].startswith("Error: the command timed out after 3 seconds")
    assert not alive(escaped)


def test_commands_inherit_no_descriptor_of_the_calling_process(tmp_path: Path):
    read, write = os.pipe()
    os.set_inheritable(write, True)  # as a careless library might leave one
    try:
        _Server.forget()  # a server started now, with the descriptor open
        answer = ShellTool(tmp_path, sandbox=False)(["sh", "-c", "ls /proc/$$/fd"])
    finally:
        os.close(read)
        os.close(write)
    assert answer.startswith("exit code 0\n")
    assert str(write) not in answer.split()[3:]
    assert answer.split()[3:6] == ["0", "1", "2"]


def test_a_workspace_removed_since_is_named_in_the_error(tmp_path: Path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    shell = ShellTool(workspace, sandbox=False)
    workspace.rmdir()
    assert shell(["ls"]) == (
        f"Error: cannot run 'ls': the workspace {str(workspace)!r} cannot be entered "
        "(No such file or directory)."
    )
