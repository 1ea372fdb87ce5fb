"""Liveness of a process on this machine where `/proc` hides other users' processes
(`hidepid=2`, systemd's `ProtectProc=invisible`): a live process of another user is alive (its
heartbeat decides), never taken for exited; a process that is gone still reads as exited.

A real `/proc` mounted with `hidepid=2` in a mount namespace of the checking process, which then
drops to the user `nobody` and checks a live root process and a finished one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from durable_swarm.durable._ownership import _pid_start

CHECK = textwrap.dedent(
    """
    import json, os, sys
    from durable_swarm.durable._ownership import MACHINE, ProcessRow

    alive, alive_start, gone = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)  # nobody: root's processes are hidden from it now

    def row(pid, start):
        return ProcessRow("other", "inc", 1, None, 0, machine=MACHINE, pid=pid, pid_start=start)

    print(json.dumps({
        "hidden": not os.path.exists(f"/proc/{alive}/stat"),
        "alive_exited": row(alive, alive_start).exited(),
        "gone_exited": row(gone, "1").exited(),
    }))
    """
)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="needs root and unshare(1) to mount /proc with hidepid=2 in a mount namespace",
)
def test_a_live_process_whose_proc_entry_is_hidden_is_not_taken_for_exited(
    tmp_path: Path,
) -> None:
    alive = subprocess.Popen(["sleep", "300"])
    gone = subprocess.Popen(["true"])
    gone.wait()
    try:
        start = _pid_start(alive.pid)
        assert start  # readable by root, outside the namespace
        script = tmp_path / "check.py"
        script.write_text(CHECK)
        command = (
            "mount -t proc -o hidepid=2 proc /proc && exec "
            f"{sys.executable} {script} {alive.pid} {start} {gone.pid}"
        )
        done = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", command],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout)
    finally:
        alive.kill()
        alive.wait()
    assert seen["hidden"] is True  # the fault is real: nobody cannot read root's entry
    assert seen["alive_exited"] is False  # kill(pid, 0) answered EPERM: alive
    assert seen["gone_exited"] is True  # kill(pid, 0) answered ESRCH: gone
