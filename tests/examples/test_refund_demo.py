"""The reliable refund demo: stopped (SIGINT) or killed (SIGKILL) mid-refund, it resumes.

Each run is a real child process on a SQLite file; the demo's steps append to a ledger file, so
the tests see exactly which steps ran, and how often.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "refund" / "main.py"
STEPS = ["look_up_order", "reverse_payment", "confirm_with_bank", "notify_customer"]
ALL_STEPS = [*STEPS, "apply_discount"]


def _env(tmp_path: Path, step_seconds: float) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env.update(
        REFUND_DEMO_LEDGER=str(tmp_path / "ledger.jsonl"),
        REFUND_DEMO_STEP_SECONDS=str(step_seconds),
        DURABLE_SWARM_LOG_LEVEL="ERROR",
        PYTHONUNBUFFERED="1",
    )
    return env


def _ledger(tmp_path: Path) -> list[dict[str, str]]:
    path = tmp_path / "ledger.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _command(tmp_path: Path) -> list[str]:
    database = str(tmp_path / "refund.sqlite")
    return [sys.executable, str(DEMO), "--name", "Ada", "--database-url", database]


def _start_and_interrupt(tmp_path: Path, sig: int, during: str, *extra: str) -> str:
    """Start the demo, wait until it is inside `during`, send `sig`; return its output."""
    process = subprocess.Popen(
        [*_command(tmp_path), *extra],
        env=_env(tmp_path, step_seconds=3.0),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
    assert process.stdout is not None
    output: list[str] = []
    try:
        deadline = time.monotonic() + 60
        for line in process.stdout:
            output.append(line)
            if line.strip().startswith(f"… {during}:"):
                process.send_signal(sig)
                break
            assert time.monotonic() < deadline, "".join(output)
        rest, _ = process.communicate(timeout=60)
        output.append(rest)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return "".join(output)


def _run_to_the_end(tmp_path: Path, *extra: str, timeout: float = 120) -> str:
    """Run the demo with short steps until it exits (status 0 asserted); return its output."""
    finished = subprocess.run(
        [*_command(tmp_path), *extra],
        env=_env(tmp_path, step_seconds=0.05),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    return finished.stdout


@pytest.mark.crash
@pytest.mark.parametrize(
    ("sig", "during"),
    [(signal.SIGINT, "confirm_with_bank"), (signal.SIGKILL, "reverse_payment")],
    ids=["sigint", "sigkill"],
)
def test_refund_demo_resumes_at_the_right_step_without_repeating(
    tmp_path: Path, sig: int, during: str
) -> None:
    first = _start_and_interrupt(tmp_path, sig, during)
    assert "what is your name?" in first
    done_before = [entry["step"] for entry in _ledger(tmp_path)]
    assert done_before == ALL_STEPS[: ALL_STEPS.index(during)]
    if sig == signal.SIGINT:
        assert "Run the same command again to resume" in first

    second = _run_to_the_end(tmp_path)

    assert "Resuming run refund-demo" in second
    assert "what is your name?" not in second  # not asked again
    assert f"… {done_before[-1]}:" not in second  # finished steps are not run again
    assert "succeeded; discount: 10%" in second
    ledger = _ledger(tmp_path)
    assert [entry["step"] for entry in ledger] == ALL_STEPS  # every step exactly once
    keys = [entry["key"] for entry in ledger if entry["key"]]
    assert len(set(keys)) == len(keys) and all(k.startswith("refund-demo:") for k in keys)


def test_refund_demo_show_crash_mode(tmp_path: Path) -> None:
    shown = _run_to_the_end(tmp_path, "--show-crash", timeout=180)
    assert "the process dies in the middle of reverse_payment" in shown
    assert "Resuming run refund-demo" in shown
    assert [entry["step"] for entry in _ledger(tmp_path)] == ALL_STEPS


def test_refund_demo_finished_run_is_not_run_again(tmp_path: Path) -> None:
    _run_to_the_end(tmp_path)
    again = _run_to_the_end(tmp_path)
    assert "already finished" in again
    assert [entry["step"] for entry in _ledger(tmp_path)] == ALL_STEPS


def test_fresh_then_the_same_command_resumes_and_refunds_each_order_once(tmp_path: Path) -> None:
    first = _start_and_interrupt(tmp_path, signal.SIGINT, "confirm_with_bank", "--fresh")
    run_id = re.search(r"Starting run (refund-[0-9a-f]{8})", first)[1]  # type: ignore[index]
    assert f"Run the same command again to resume run {run_id}" in first
    # the scripted model calls reverse_payment twice in one reply, as small models do
    order = re.search(r"reverse_payment: (A-\d+) was already reversed: no second refund", first)
    assert order, first

    second = _run_to_the_end(tmp_path, "--fresh")
    assert f"Resuming run {run_id}" in second
    assert "succeeded; discount: 10%" in second
    assert [e["step"] for e in _ledger(tmp_path)] == ALL_STEPS  # the order refunded once

    third = _run_to_the_end(tmp_path, "--fresh")  # the last --fresh run finished: a new one
    assert "Starting run refund-" in third and run_id not in third.split("Its timeline")[0]
    assert f"reversing 89.90 EUR for {order[1]}" not in third  # a new run, its own order
    assert [e["step"] for e in _ledger(tmp_path)] == ALL_STEPS * 2  # each order refunded once


ASKS_AGAIN = """
import sys
sys.path.insert(0, {examples!r})
from refund import main as demo
from durable_swarm import DurableSwarm
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text

def model(messages, tools):  # a small model: asks the same question three times
    answers = [m for m in messages if m.get("role") == "tool"]
    if len(answers) < 3:
        return calls(ToolCall("ask_user", {{"question": "What is your name?"}}))
    return text("Thanks " + answers[-1]["content"] + ", I will look into it.")

swarm = DurableSwarm(ScriptedClient(model), database_url={db!r})
sys.exit(demo.run_refund(swarm, "asks-again", None))
"""


def test_a_question_asked_again_is_answered_again_and_nothing_prints_none(tmp_path: Path):
    script = tmp_path / "asks_again.py"
    script.write_text(
        ASKS_AGAIN.format(examples=str(DEMO.parents[1]), db=str(tmp_path / "refund.sqlite"))
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        env=_env(tmp_path, step_seconds=0.05),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("What is your name?") == 3
    assert done.stdout.count("the model asked again: it gets the same answer") == 2
    assert "Thanks Ada, I will look into it." in done.stdout
    assert "succeeded; no discount was applied" in done.stdout
    assert "None" not in done.stdout
