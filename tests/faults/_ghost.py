"""The app with one more agent, `Ghost`, which the other processes of a test do not have."""

from __future__ import annotations

from _app import client, step

from durable_swarm import Agent

ghost = Agent(name="Ghost", instructions="You haunt.", functions=[step])

__all__ = ["client", "ghost"]
