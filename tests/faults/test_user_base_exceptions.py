"""User code can't take the process down: any `BaseException` from an instructions callable, a
context condition, a handoff callable, a tool or the model client fails only its run, with the
error recorded, and the process's next run succeeds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable

import pytest

from .conftest import HERE, TIMEOUT

KINDS = ["KeyboardInterrupt", "SystemExit", "GeneratorExit", "custom"]
WHERE = ["tool", "model", "instructions", "condition", "handoff"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("where", WHERE)
def test_a_base_exception_from_user_code_fails_only_its_run(
    make_database_url: Callable[[str], str], where: str, kind: str
) -> None:
    config = {
        "where": where,
        "kind": kind,
        "database_url": make_database_url(f"{where}-{kind}".lower()[:20]),
        "run_id": f"base-{uuid.uuid4().hex[:8]}",
    }
    done = subprocess.run(
        [sys.executable, str(HERE / "_base.py"), json.dumps(config)],
        cwd=HERE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT * 2,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "failed", result
    shown = "Custom" if kind == "custom" else kind
    assert shown in (result["error"] or ""), result
    assert result["alive"] is True
    assert result["next"] == "after", result
