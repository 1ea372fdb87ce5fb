"""A module that must never be imported by reading a run's log: importing it writes a marker
file (the path in DURABLE_SWARM_SENTINEL), and calling `choose` writes another."""

from __future__ import annotations

import os
from pathlib import Path

_MARKER = os.environ.get("DURABLE_SWARM_SENTINEL")
if _MARKER:
    Path(_MARKER).write_text("imported")


def choose() -> str:
    """What an after-work function would do: pick the next agent (here: it marks the call)."""
    if _MARKER:
        Path(_MARKER).with_suffix(".called").write_text("called")
    return "TERMINATE"
