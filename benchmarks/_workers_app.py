"""The app served by the workers of `benchmarks/workers.py` (`_workers_app:client`).

The benchmark agent (`_common.make_agent`: model -> `lookup` tool -> model) and an
`openai.AsyncOpenAI` client for the fake model server at `DSW_BENCH_MODEL_URL`.
"""

from __future__ import annotations

import os

from _common import make_agent, make_async_client

agent = make_agent()
client = make_async_client(os.environ["DSW_BENCH_MODEL_URL"])
