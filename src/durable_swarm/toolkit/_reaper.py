"""The processes `ShellTool` puts between itself and a command, so that the command's whole
process tree can be ended, whatever the command's children do.

A server, started once per process using the tool (`python -I -S _reaper.py`, with a Unix socket
as stdin; it imports only quick-to-import standard modules), forks a reaper for each command: so a
command costs a fork, not an interpreter's start. The tool sends the server a message carrying
three descriptors: a control socket, the output pipe and a status pipe. The reaper reads its
request on the control socket: a line with the byte length of what follows, then NUL-separated
fields: `limit`, the working directory, the number of arguments, the arguments, then the
environment's `NAME=value` entries. It makes itself a child subreaper (Linux
`prctl(PR_SET_CHILD_SUBREAPER)`: every orphaned descendant, even one that called `setsid`, is
re-parented to it instead of to init), and runs the arguments with the output pipe as stdout and
stderr and `/dev/null` as stdin. On the status pipe it writes `started` first, then `exit
<code>` when the command exits (`error <errno>` if it cannot be run, `nocwd <errno>` if the
working directory cannot be entered).

It ends the tree (SIGKILL to every process below it in `/proc`, again until none is left, reaping
all of them) when the control socket closes (the tool closed it, or the tool's process died), on
SIGTERM, or `limit` seconds after it started (in case the tool is stuck); it then writes
`killed <n>` (how many processes it had to kill) and exits. The server ends when its socket
closes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import socket
import time

_PR_SET_CHILD_SUBREAPER = 36
# How long ending the tree may take (processes stuck in the kernel cannot be killed at once).
_KILL_SECONDS = 5.0


def _become_subreaper() -> bool:
    """Make orphaned descendants this process's children (Linux 3.4 and later)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _descendants(root: int) -> list[int] | None:
    """The live (not zombie) processes below `root`, from `/proc`; None without `/proc`."""
    children: dict[int, list[int]] = {}
    live: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # it has just exited
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) < 2:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        if fields[0] != b"Z":
            live.add(pid)
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child in live:
                found.append(child)
            todo.append(child)
    return found


_none_left = False


def _reap() -> list[tuple[int, int]]:
    """Every exited child collected: (pid, wait status). Sets `_none_left` when no child is
    left at all (as a subreaper, none below either: orphans would have become children)."""
    global _none_left
    reaped: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            _none_left = True
            return reaped
        if pid == 0:
            return reaped
        reaped.append((pid, status))


def _end_tree(command: int, subreaper: bool) -> int:
    """SIGKILL every process below this one until none is left; how many were killed."""
    me = os.getpid()
    killed: set[int] = set()
    end = time.monotonic() + _KILL_SECONDS
    while time.monotonic() < end:
        _reap()
        if subreaper and _none_left:
            break
        pids = _descendants(me)
        if pids is None:  # no /proc: the command's process group is the best there is
            with contextlib.suppress(OSError):
                os.killpg(command, signal.SIGKILL)
            break
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        time.sleep(0.005)
    _reap()
    return len(killed)


def _tell(fd: int, line: str) -> None:
    """Write a status line; the tool may be gone (killed): the tree is ended all the same."""
    with contextlib.suppress(OSError):
        os.write(fd, f"{line}\n".encode())


def _read_request(fd: int) -> bytes:
    head = b""
    while not head.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            raise SystemExit("the shell tool's request ended early")
        head += byte
    size = int(head)
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise SystemExit("the shell tool's request ended early")
        data += chunk
    return data


def _run(control: int, out: int, status_fd: int) -> None:
    """One command: read its request on `control`, run it with `out` as stdout and stderr,
    report on `status_fd`, end its tree when `control` closes (or at the request's limit)."""
    global _none_left
    _none_left = False  # the server's state, not this process's
    for fd in (control, out, status_fd):
        os.set_inheritable(fd, False)
    os.setsid()  # no signal meant for the server's session reaches the command
    fields = _read_request(control).split(b"\0")
    give_up = time.monotonic() + float(fields[0])
    cwd = fields[1]
    argc = int(fields[2])
    argv = fields[3 : 3 + argc]
    env = dict(entry.split(b"=", 1) for entry in fields[3 + argc :])
    subreaper = _become_subreaper()
    _tell(status_fd, "started")  # it has its request: the command will not be lost

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    stop: list[bool] = []
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))

    try:
        os.chdir(cwd)
    except OSError as e:
        _tell(status_fd, f"nocwd {e.errno}")
        return
    try:
        command = os.posix_spawnp(
            argv[0],
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, out, 1),
                (os.POSIX_SPAWN_DUP2, out, 2),
            ],
            setpgroup=0,  # its own process group: the fallback without /proc kills that
            setsigdef=[
                getattr(signal, name)
                for name in ("SIGPIPE", "SIGXFSZ", "SIGCHLD", "SIGTERM", "SIGINT")
                if hasattr(signal, name)
            ],
        )
    except OSError as e:
        _tell(status_fd, f"error {e.errno}")
        return

    # Only the command (and what it starts) holds the output pipe from here on.
    os.close(out)
    reported = False
    while not stop:
        for pid, status in _reap():
            if pid == command and not reported:
                reported = True
                _tell(status_fd, f"exit {os.waitstatus_to_exitcode(status)}")
        left = give_up - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([control, wake_r], [], [], left)
        if wake_r in ready:
            os.read(wake_r, 4096)
        if control in ready and not os.read(control, 4096):
            break
    killed = _end_tree(command, subreaper)
    for pid, status in _reap():
        if pid == command and not reported:
            reported = True
            _tell(status_fd, f"exit {os.waitstatus_to_exitcode(status)}")
    _tell(status_fd, f"killed {killed}")


def serve() -> None:
    """The server: for each message on the socket at stdin, carrying three descriptors (a
    control socket, the output pipe, the status pipe), fork a process that runs one command
    (`_run`). It ends when the socket closes: the process that started it has gone."""
    # descriptors the tool's process let its children inherit are not the commands' to have
    try:
        inherited = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        inherited = list(range(3, 1024))
    for fd in inherited:
        if fd > 2:
            with contextlib.suppress(OSError):
                os.close(fd)
    server = socket.socket(fileno=0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, lambda *_: _reap())
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(server, 16, 3)
        except OSError:
            break
        if not message:
            break
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            continue
        if os.fork() == 0:
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                server.close()
                _run(*fds)
            finally:
                os._exit(0)  # nothing to clean up: skip the interpreter's slow shutdown
        for fd in fds:
            os.close(fd)
        _reap()
    os._exit(0)


if __name__ == "__main__":
    serve()
