"""The agents of `_app_dbos.py` for a `durable-swarm worker` (`test_app_dbos`): imported, never
launching DBOS. The model server's address is in `APP_MODEL_BASE_URL`."""

from __future__ import annotations

import os

import openai

from durable_swarm import Agent


def gate() -> str:
    """The app's tool (here always open)."""
    return "gate open"


agent = Agent(name="Support", instructions="Help the customer.", functions=[gate])
client = openai.OpenAI(base_url=os.environ["APP_MODEL_BASE_URL"], api_key="fake-key")
