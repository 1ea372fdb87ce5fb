"""`ShellTool`: a command run in a workspace directory, with a timeout, an output cap, a scrubbed
environment and approval by default; its whole process tree is ended before it answers. It is not
a security sandbox (see `ShellTool`)."""

from __future__ import annotations

import contextlib
import errno
import functools
import math
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from ..tools import TOOL_SPEC_ATTR, ToolSpec
from ._tool import check_tool_name

__all__ = ["ShellTool"]

_CHUNK = 65536
# The process between the tool and each command, which ends the command's whole process tree.
_REAPER = str(Path(__file__).with_name("_reaper.py"))
# After the command exits, how long its output is still read while processes it left running in
# the background hold the output pipe open; they are then killed.
_OUTPUT_GRACE = 0.5
# How long ending the process tree and reading the last of its output may take.
_KILL_GRACE = 1.0


@functools.lru_cache(maxsize=1)
def _working_bwrap() -> str:
    """The path of a bubblewrap that can sandbox a command here, else `Error: <why not>`
    (installed is not enough: containers often forbid the namespaces it needs)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "Error: it is not installed"
    try:
        probe = subprocess.run(
            [bwrap, "--ro-bind", "/", "/", "--unshare-all", "--", "true"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"Error: it cannot run ({e})"
    if probe.returncode != 0:
        return f"Error: it cannot sandbox here ({probe.stderr.decode(errors='replace').strip()})"
    return bwrap


class ShellTool:
    """A tool (for `Agent(functions=[...])`) that runs one command in the workspace `root`.

    The model passes an argument vector (`["pytest", "-q"]`); nothing goes through a shell
    unless `shell=True`, where it passes one string run by `/bin/sh -c`. The tool answers with
    the exit code and the output (stdout and stderr together), cut to `max_output_chars`
    characters with a note saying how much more there was (the rest is read and counted, never
    kept: memory stays bounded whatever the command prints). An answer is at most
    `max_output_chars` characters of output plus a first line and notes of under 400 characters.
    The command's environment is only `PATH`, `HOME` (the workspace), `LANG` and `TERM`, plus
    `env`; stdin is empty.

    Nothing a command starts outlives the call. Each command runs below a small runner process
    that is a Linux child subreaper, forked for it by a server process that the first call
    starts (a Python interpreter of about 10 MB, one per process using the tool, ended when that
    process ends): every process the command starts, even one that left its process group or
    session (`setsid`, a double fork), stays below the runner and is killed with SIGKILL:
    at `timeout` (the answer then says the command timed out; it comes at most about 1 s after
    the timeout), when the command exits (processes it left running in the background may still
    write output for 0.5 s; the answer says how many were killed), and when the process calling
    the tool dies. Only a process handed to a service outside the tree (e.g. `systemd-run`, `at`)
    escapes.

    `needs_approval=True` (the default) pauses the run before each call until a person approves
    it (`DurableSwarm.approve`/`reject`, or `Swarm(approve_fn=...)`). Each call is a tool call
    like any other: one step in a durable run, never run again once it finished.

    This is not a security sandbox: the command runs as this process's user and can read and
    write whatever that user can. `allow` only checks the program's name, and an allowed program
    may run others. For isolation, `sandbox=True` runs commands under bubblewrap (`bwrap`, which
    must be installed): the file system read-only except the workspace and a private /tmp, no
    network, no other processes visible. `sandbox=None` (the default) uses bubblewrap when it is
    installed and runs commands directly otherwise.

    Args:
        root: the workspace directory commands run in (must exist).
        allow: the program names the model may run (e.g. `["ls", "pytest"]`); None allows any.
        timeout: seconds a command may run before it is killed, with every process it started.
        needs_approval: whether a person approves each command before it runs.
        max_output_chars: the most output characters the answer shows; the rest is counted and
            dropped.
        env: environment variables added for the commands.
        shell: take a shell string instead of an argument vector (no `allow` then).
        sandbox: run under bubblewrap: True (required), False (never), None (when installed).
        name: the tool's name offered to the model.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        allow: Collection[str] | None = None,
        timeout: float = 60.0,
        needs_approval: bool = True,
        *,
        max_output_chars: int = 20_000,
        env: Mapping[str, str] | None = None,
        shell: bool = False,
        sandbox: bool | None = None,
        name: str = "run_command",
    ) -> None:
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise ValueError(f"ShellTool: the workspace {str(root)!r} is not a directory")
        if isinstance(allow, str):
            raise TypeError(f"ShellTool(allow=...) is a list of program names, got {allow!r}")
        if shell and allow is not None:
            raise ValueError(
                "ShellTool(shell=True, allow=...) cannot check which programs a shell string runs;"
                " use an argument vector (shell=False) to restrict programs"
            )
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"ShellTool(timeout=...) must be a positive number, got {timeout!r}")
        if not (isinstance(max_output_chars, int) and max_output_chars > 0):
            raise ValueError(
                f"ShellTool(max_output_chars=...) must be a positive int, got {max_output_chars!r}"
            )
        bwrap = _working_bwrap() if sandbox is not False else None
        if sandbox and isinstance(bwrap, str) and bwrap.startswith("Error"):
            raise ValueError(
                f"ShellTool(sandbox=True) needs bubblewrap (`bwrap`): {bwrap[7:]}; install it "
                "(e.g. apt-get install bubblewrap) or pass sandbox=None"
            )
        if bwrap is not None and bwrap.startswith("Error"):
            bwrap = None
        if any("\0" in f"{k}{v}" or "=" in k or not k for k, v in (env or {}).items()):
            raise ValueError(
                "ShellTool(env=...) names must be non-empty without '=', and no name or value "
                "may contain a NUL character"
            )
        self.allow = None if allow is None else frozenset(allow)
        self.timeout = float(timeout)
        self.max_output_chars = max_output_chars
        self.env = dict(env or {})
        self.shell = shell
        self.bwrap = bwrap
        self.__name__ = name
        check_tool_name(name, self)
        setattr(
            self,
            TOOL_SPEC_ATTR,
            ToolSpec(
                name=name,
                description=self._description(),
                needs_approval=needs_approval,
                parameters=self._parameters(),
            ),
        )

    def __repr__(self) -> str:
        return f"ShellTool({str(self.root)!r}, name={self.__name__!r})"

    def _description(self) -> str:
        what = (
            "a shell command line (run by /bin/sh -c)"
            if self.shell
            else "a program and its arguments as a list (no shell: no pipes, globs, "
            "redirections or variables)"
        )
        allowed = (
            f" Only these programs may run: {', '.join(sorted(self.allow))}."
            if self.allow is not None
            else ""
        )
        return (
            f"Run {what} in the workspace directory {self.root} and return its exit code and "
            f"output (stdout and stderr together, at most {self.max_output_chars} characters). "
            f"A command is stopped after {self.timeout:g} seconds, and nothing it starts "
            "outlives it: processes left running in the background are killed when it exits."
            f"{allowed}"
        )

    def _parameters(self) -> dict[str, Any]:
        command: dict[str, Any] = (
            {"type": "string", "description": "The command line, e.g. `ls -la | head`."}
            if self.shell
            else {
                "type": "array",
                "items": {"type": "string"},
                "description": 'The program and its arguments, e.g. ["ls", "-la"].',
            }
        )
        return {"type": "object", "properties": {"command": command}, "required": ["command"]}

    def _argv(self, command: Any) -> list[str] | str:
        """The argument vector to run, or an error message for the model."""
        if self.shell:
            if not isinstance(command, str) or not command.strip():
                return "Error: command must be a non-empty string (a shell command line)."
            if "\0" in command:
                return "Error: the command contains a NUL character, which no command may contain."
            return ["/bin/sh", "-c", command]
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(word, str) for word in command)
        ):
            return (
                'Error: command must be a non-empty list of strings, e.g. ["ls", "-la"] '
                "(a program and its arguments; there is no shell)."
            )
        if any("\0" in word for word in command):
            return "Error: the command contains a NUL character, which no argument may contain."
        program = os.path.basename(command[0])
        if self.allow is not None and program not in self.allow:
            return (
                f"Error: program {command[0]!r} is not allowed here; allowed programs: "
                f"{', '.join(sorted(self.allow))}."
            )
        return list(command)

    def _environment(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": str(self.root),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            **self.env,
        }

    def _sandboxed(self, argv: list[str]) -> list[str]:
        if self.bwrap is None:
            return argv
        root = str(self.root)
        return [
            self.bwrap,
            "--ro-bind", "/", "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--tmpfs", "/tmp",
            "--bind", root, root,
            "--unshare-all",
            "--die-with-parent",
            "--chdir", root,
            "--",
            *argv,
        ]  # fmt: skip

    def __call__(self, command: Any) -> str:
        argv = self._argv(command)
        if isinstance(argv, str):
            return argv
        for _ in range(2):
            answer = _Run(self, self._sandboxed(argv)).answer(argv[0])
            if answer is not None:
                return answer
            _Server.forget()  # it died with the command unstarted: once more, with a new one
        return f"Error: {argv[0]!r} could not be run: the shell tool's runner stopped."


class _Server:
    """The reaper server (`_reaper.py`) of this process: started on first use, again if it died
    or if this process is a fork of the one that started it."""

    lock = threading.Lock()
    pid = 0
    owner = 0
    channel: socket.socket | None = None
    stale = False

    @classmethod
    def _start(cls) -> None:
        if cls.channel is not None:
            cls.channel.close()  # a server of this process ends when its socket closes
            cls.channel = None
        if cls.pid and cls.owner == os.getpid():  # this process's server, not yet reaped
            with contextlib.suppress(OSError):
                os.kill(cls.pid, signal.SIGKILL)
                os.waitpid(cls.pid, 0)
        cls.stale = False
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            cls.pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-S", _REAPER],
                {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8"},
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, theirs.fileno(), 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_DUP2, 1, 2),
                ],
                setsid=True,  # signals meant for this process never reach it
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        cls.channel = ours
        cls.owner = os.getpid()

    @classmethod
    def _alive(cls) -> bool:
        if cls.channel is None or cls.owner != os.getpid() or cls.stale:
            return False
        try:
            if os.waitpid(cls.pid, os.WNOHANG)[0] == 0:
                return True
        except ChildProcessError:
            pass
        cls.pid = 0  # reaped: its number may go to another process
        return False

    @classmethod
    def forget(cls) -> None:
        """Start another server next time (this one lost a command)."""
        with cls.lock:
            cls.stale = True

    @classmethod
    def send(cls, fds: list[int]) -> None:
        """Hand the server the descriptors of one command (it forks a reaper for it)."""
        with cls.lock:
            for attempt in range(2):
                if not cls._alive():
                    cls._start()
                assert cls.channel is not None
                try:
                    socket.send_fds(cls.channel, [b"run"], fds)
                    return
                except OSError:
                    if attempt:
                        raise
                    cls.stale = True  # start another


def _after_fork_in_child() -> None:
    _Server.lock = threading.Lock()  # another thread may have held it at the fork
    _Server.stale = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def _request(argv: list[str], cwd: Path, env: Mapping[str, str], limit: float) -> bytes:
    """What the reaper reads first on its control socket: a byte length, then NUL-separated
    fields."""
    fields = [repr(limit), str(cwd), str(len(argv)), *argv, *(f"{k}={v}" for k, v in env.items())]
    payload = b"\0".join(os.fsencode(field) for field in fields)
    return b"%d\n%s" % (len(payload), payload)


class _Run:
    """One command run through the reaper (`_reaper.py`): its output read against deadlines, its
    whole process tree ended before the answer is given."""

    def __init__(self, tool: ShellTool, argv: list[str]) -> None:
        self.tool = tool
        self.argv = argv
        self.kept = bytearray()
        self.total = 0
        self.code: int | None = None
        self.error: int | None = None  # errno of a command that could not be started
        self.killed = 0
        self.started = False
        self.in_workspace = True
        self.status = b""

    def _ended(self) -> bool:
        return self.code is not None or self.error is not None

    def _take(self, chunk: bytes) -> None:
        """Count every byte, keep only as many as can be shown: memory stays bounded."""
        self.total += len(chunk)
        room = 4 * self.tool.max_output_chars - len(self.kept)  # bytes: up to 4 per character
        if room > 0:
            self.kept.extend(chunk[:room])

    def _parse_status(self, data: bytes) -> None:
        *lines, self.status = (self.status + data).split(b"\n")
        for line in lines:
            word, _, value = line.decode().partition(" ")
            if word == "exit":
                self.code = int(value)
            elif word == "error":
                self.error = int(value)
            elif word == "nocwd":
                self.error = int(value)
                self.in_workspace = False
            elif word == "killed":
                self.killed = int(value)
            elif word == "started":
                self.started = True

    def _pump(
        self, poller: select.poll, fds: dict[int, str], until: float, stop: Callable[[], bool]
    ) -> None:
        """Read output and status until `stop()`, both pipes closed, or the time `until`."""
        while fds and not stop():
            left = until - time.monotonic()
            if left <= 0:
                return
            for fd, _ in poller.poll(max(1, math.ceil(left * 1000))):
                data = os.read(fd, _CHUNK)
                if fds[fd] == "status":
                    self._parse_status(data)
                else:
                    self._take(data)
                if not data:
                    poller.unregister(fd)
                    del fds[fd]

    def answer(self, program: str) -> str | None:
        """Run the command and answer; None if it never started (the runner server died with
        the command's descriptors unread)."""
        tool = self.tool
        control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out_r, out_w = os.pipe()
        status_r, status_w = os.pipe()
        try:
            _Server.send([theirs.fileno(), out_w, status_w])
        except OSError as e:
            control.close()
            for fd in (out_r, status_r):
                os.close(fd)
            return f"Error: cannot run {program!r}: the shell tool's runner could not start ({e})."
        finally:
            theirs.close()
            os.close(out_w)
            os.close(status_w)
        deadline = time.monotonic() + tool.timeout
        fds = {out_r: "output", status_r: "status"}
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        timed_out = lost = False
        try:
            # the reaper gives up by itself well after the timeout, should this process be stuck
            request = _request(self.argv, tool.root, tool._environment(), tool.timeout + 10)
            try:
                control.sendall(request)
            except OSError:  # the reaper never got its request: the command did not start
                lost = True
            if not lost:
                self._pump(poller, fds, deadline, lambda: self.started)
                lost = not self.started and "status" not in fds.values()
            if not lost:
                self._pump(poller, fds, deadline, self._ended)
                timed_out = not self._ended() and "status" in fds.values()
            if not lost and not timed_out:  # background processes holding the output: a grace
                grace = min(deadline, time.monotonic() + _OUTPUT_GRACE)
                self._pump(poller, fds, grace, lambda: out_r not in fds)
        finally:
            # Closing the control socket ends the tree; then read what is left, and the report
            # (the status pipe closes when the reaper has ended the tree and exited).
            control.close()
            self._pump(poller, fds, time.monotonic() + _KILL_GRACE, lambda: False)
            for fd in (out_r, status_r):
                os.close(fd)
        return None if lost else self._answer(program, timed_out)

    def _answer(self, program: str, timed_out: bool) -> str:
        tool = self.tool
        if self.error is not None:
            if not self.in_workspace:
                return (
                    f"Error: cannot run {program!r}: the workspace {str(tool.root)!r} cannot be "
                    f"entered ({os.strerror(self.error)})."
                )
            if self.error == errno.ENOENT:
                return f"Error: program {program!r} was not found on PATH."
            return f"Error: cannot run {program!r}: {os.strerror(self.error)}."
        output = self.kept.decode("utf-8", errors="replace")
        shown = output[: tool.max_output_chars]
        cut = len(output) - len(shown) + (self.total - len(self.kept))
        if cut > 0:
            shown += (
                f"\n[... output cut: {cut} more characters or bytes not shown; the "
                f"{tool.__name__} tool shows at most ShellTool(max_output_chars="
                f"{tool.max_output_chars}) characters]"
            )
        if timed_out:
            head = (
                f"Error: the command timed out after {tool.timeout:g} seconds and was killed, "
                f"with every process it started (the {tool.__name__} tool's limit, "
                f"ShellTool(timeout={tool.timeout:g}); split the work into shorter commands)."
            )
        elif self.code is None:
            head = f"Error: {program!r} could not be run: the shell tool's runner stopped."
        else:
            head = f"exit code {self.code}"
            if self.killed:
                plural = "process" if self.killed == 1 else "processes"
                shown += (
                    f"\n[{self.killed} background {plural} still running when the command "
                    "exited were killed: nothing a command starts outlives it]"
                )
        return f"{head}\n{shown}" if shown else head
