"""The app the fault tests' processes run: agent `Stepper` with the tool `step(tag)`.

The model is the test's FakeOpenAIServer (`DSW_FAKE_URL`). `step` appends `start <tag> <pid>` to
`<DSW_WORK_DIR>/step.log`, waits while the file `<DSW_WORK_DIR>/hold-<tag>` exists (so a test can
keep a run inside its tool; meanwhile `tick <tag> <pid>` every 0.1 s), then appends
`end <tag> <pid>`; each line ends with the time it was written (`time.time()`). The chaos test's
runs also ask the person (`ask_user`) and hand off to `Closer` (`transfer_to_closer`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import openai

from durable_swarm import Agent, ask_user

WORK_DIR = Path(os.environ["DSW_WORK_DIR"])


def _log(line: str) -> None:
    with open(WORK_DIR / "step.log", "a") as f:
        f.write(f"{line} {time.time():.6f}\n")


def step(tag: str) -> str:
    """Do one step of work."""
    _log(f"start {tag} {os.getpid()}")
    deadline = time.monotonic() + 300
    ticked = time.monotonic()
    while (WORK_DIR / f"hold-{tag}").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
        if time.monotonic() - ticked >= 0.1:  # alive inside the tool (see `overlaps`)
            _log(f"tick {tag} {os.getpid()}")
            ticked = time.monotonic()
    _log(f"end {tag} {os.getpid()}")
    return f"stepped {tag}"


def transfer_to_closer() -> Agent:
    """Hand the conversation to the closer."""
    return closer


stepper = Agent(
    name="Stepper", instructions="You step.", functions=[step, ask_user, transfer_to_closer]
)
closer = Agent(name="Closer", instructions="You close.")

client = openai.OpenAI(base_url=os.environ["DSW_FAKE_URL"], api_key="fake", max_retries=0)
