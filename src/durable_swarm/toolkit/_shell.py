"""`ShellTool`: a command run in a workspace directory, with a timeout, an output cap, a scrubbed
environment and approval by default. It is not a security sandbox (see `ShellTool`)."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from ..tools import TOOL_SPEC_ATTR, ToolSpec
from ._tool import check_tool_name

__all__ = ["ShellTool"]

_CHUNK = 65536


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
    the exit code and the output (stdout and stderr together), cut to `max_output_chars`. A
    command still running after `timeout` seconds is killed with its whole process group, and
    the answer says so. The command's environment is only `PATH`, `HOME` (the workspace),
    `LANG` and `TERM`, plus `env`; stdin is empty.

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
        timeout: seconds a command may run before it is killed.
        needs_approval: whether a person approves each command before it runs.
        max_output_chars: the most output the model reads; the rest is cut (and counted).
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
            f"A command is stopped after {self.timeout:g} seconds.{allowed}"
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
        try:
            process = subprocess.Popen(
                self._sandboxed(argv),
                cwd=self.root,
                env=self._environment(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, killed as a whole on timeout
            )
        except FileNotFoundError:
            return f"Error: program {argv[0]!r} was not found on PATH."
        except OSError as e:
            return f"Error: cannot run {argv[0]!r}: {e}."
        kept = bytearray()
        total = [0]

        def read() -> None:
            assert process.stdout is not None
            while chunk := process.stdout.read(_CHUNK):
                total[0] += len(chunk)
                room = 4 * self.max_output_chars - len(kept)  # bytes: up to 4 per character
                if room > 0:
                    kept.extend(chunk[:room])

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        timed_out = False
        try:
            process.wait(self.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        # the whole group: what the command left running in the background goes too
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        reader.join(5.0)
        if process.stdout is not None:
            process.stdout.close()
        output = kept.decode("utf-8", errors="replace")
        shown = output[: self.max_output_chars]
        cut = len(output) - len(shown) + (total[0] - len(kept))
        if cut > 0:
            shown += f"\n[... output cut: {cut} more characters or bytes not shown]"
        if timed_out:
            head = f"Error: the command timed out after {self.timeout:g} seconds and was killed."
        else:
            head = f"exit code {process.returncode}"
        return f"{head}\n{shown}" if shown else head
