"""User code can't take the process down: any `BaseException` from an instructions callable, a
context condition, a handoff callable, a tool or the model client fails only its run, with the
error recorded, and the process's next run succeeds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from .conftest import HERE, TIMEOUT

KINDS = ["KeyboardInterrupt", "SystemExit", "GeneratorExit", "custom"]
WHERE = ["tool", "model", "instructions", "condition", "handoff"]


@pytest.mark.parametrize("where", WHERE)
def test_a_base_exception_from_user_code_fails_only_its_run(
    make_database_url: Callable[[str], str], where: str
) -> None:
    config = {"where": where, "kinds": KINDS, "database_url": make_database_url(f"base-{where}")}
    done = subprocess.run(
        [sys.executable, str(HERE / "_base.py"), json.dumps(config)],
        cwd=HERE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT * 4,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["kind"] for r in results] == KINDS
    for result in results:
        kind = result["kind"]
        assert result["status"] == "failed", result
        assert ("Custom" if kind == "custom" else kind) in (result["error"] or ""), result
        assert result["alive"] is True, result
        assert result["next"] == "after", result
