"""`durable-swarm completion SHELL`: the completion script completes the real commands."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from ._helpers import TIMEOUT, child_env, cli_parallel


def complete(script: str, line: str) -> list[str]:
    """What bash offers for `line` with `script` sourced."""
    words = line.split(" ")
    probe = (
        f"{script}\n"
        f"COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}\n"
        f'COMP_LINE="{line}"; COMP_POINT=${{#COMP_LINE}}\n'
        "_shtab_durable_swarm\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "-c", probe],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completion_completes_commands_and_options():
    bash, zsh, bad = cli_parallel(
        (["completion", "bash"], False),
        (["completion", "zsh"], True),
        (["completion", "fish"], False),
    )
    assert bash.status == 0, bash.stderr
    assert {"chat", "completion", "demo", "runs", "worker"} <= set(
        complete(bash.stdout, "durable-swarm ")
    )
    assert complete(bash.stdout, "durable-swarm runs pr") == ["prune"]
    assert "--older-than" in complete(bash.stdout, "durable-swarm runs prune --")
    assert "--offset" in complete(bash.stdout, "durable-swarm runs list --o")
    assert zsh.status == 0 and "#compdef durable-swarm" in zsh.stdout
    assert bad.status == 2 and "invalid choice: 'fish'" in bad.stderr
