"""The swarms of this process, by name: whose model client and limits a run uses.

A run records the name of the `DurableSwarm` that started it (its spec's `swarm`). Wherever it
executes (started here, recovered at launch, taken over from a dead process, resumed, or taken
from a queue), it uses the settings of the swarm of that name in that process: its model client,
model, retries, default budget, prices and result limit. A process that has no swarm of that
name leaves the run waiting, never runs it with another swarm's settings (`RunHost.await_known`).

The registry holds swarms weakly: a swarm is known while the program holds it, until
`DurableSwarm.close()`. Two live swarms of one name: the one made (or named) last serves the
name, with a warning when their settings differ; when it is closed or dropped, the earlier one
serves it again. The name "default" is always served: by the latest live `DurableSwarm` named
"default", else by the process's defaults (`ProcessDefaults`: the model client a worker was
given, else `openai.OpenAI()`).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import SwarmNotFoundError
from ..limits import LIMITS_ENV, ModelLimits, parse_limits
from ..usage import Budget
from ._failures import DEFAULT_MODEL_RETRIES
from ._spec import DEFAULT_SWARM
from ._values import DEFAULT_MAX_RESULT_CHARS

__all__ = ["ProcessDefaults", "SwarmRegistry", "SwarmSettings", "registry"]

logger = logging.getLogger("durable_swarm")


@dataclass(frozen=True)
class SwarmSettings:
    """What a run takes from its swarm, as they were when the run began executing here.

    `client` None means an `openai.OpenAI()` (the swarm "default": the process's default
    client, see `SwarmRegistry.client_of`).
    """

    name: str
    client: Any = None
    model: str | None = None
    model_retries: int = DEFAULT_MODEL_RETRIES
    budget: Budget | None = None
    prices: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS
    limits: Mapping[str, ModelLimits] | None = None  # None: the process's (`ProcessDefaults`)
    compactor: Any = None  # summarizes for compaction (None: a model call)

    def differs_from(self, other: SwarmSettings) -> bool:
        """Whether runs would behave differently under `other` (a client counts as the same
        when it is, or is of the same kind for the same endpoint: one rebuilt for the same
        server, as a notebook cell run again does, changes nothing)."""
        return not _same_client(self.client, other.client) or (
            self.model,
            self.model_retries,
            self.budget,
            dict(self.prices),
            self.max_result_chars,
            self.limits,
        ) != (
            other.model,
            other.model_retries,
            other.budget,
            dict(other.prices),
            other.max_result_chars,
            other.limits,
        )


def _same_client(one: Any, other: Any) -> bool:
    if one is other:
        return True
    if type(one) is not type(other):
        return False
    return str(getattr(one, "base_url", "")) == str(getattr(other, "base_url", ""))


class ProcessDefaults:
    """The process-wide fallbacks: the model client a worker serves runs of the default swarm
    with when no `DurableSwarm` named "default" lives (`client`), and the budget of runs
    started without one when their swarm has none (`budget`: a worker's `--budget`), and the
    model limits of swarms that set none (`limits`: a worker's `--limit`; None: read from
    `DURABLE_SWARM_MODEL_LIMITS` at the first need)."""

    def __init__(self) -> None:
        self.client: Any = None
        self.budget: Budget | None = None
        self.limits: Mapping[str, ModelLimits] | None = None
        self._made: Any = None
        self._lock = threading.Lock()

    def model_client(self) -> Any:
        """`client`, else `openai_client()`."""
        return self.client if self.client is not None else self.openai_client()

    def model_limits(self) -> Mapping[str, ModelLimits]:
        """`limits`, else those `DURABLE_SWARM_MODEL_LIMITS` gives (read once), else none."""
        with self._lock:
            if self.limits is None:
                self.limits = parse_limits(os.environ.get(LIMITS_ENV, ""))
            return self.limits

    def openai_client(self) -> Any:
        """One `openai.OpenAI()` made at the first need (it reads `OPENAI_API_KEY` and
        `OPENAI_BASE_URL`)."""
        with self._lock:
            if self._made is None:
                from openai import OpenAI

                self._made = OpenAI()
            return self._made


class SwarmRegistry:
    """Live swarms by name (see the module docstring). A swarm is any object with a `name` and
    a `run_settings()` method; it is held weakly (dropped swarms are pruned as names are
    added)."""

    def __init__(self, defaults: ProcessDefaults) -> None:
        self.defaults = defaults
        self._lock = threading.Lock()
        self._by_name: dict[str, list[weakref.ref[Any]]] = {}

    def add(self, swarm: Any) -> None:
        """Serve `swarm.name` with `swarm` (the latest added serves a name)."""
        name = swarm.name
        with self._lock:
            refs = self._by_name.setdefault(name, [])
            earlier = self._latest(refs)
            refs[:] = [r for r in refs if r() is not None and r() is not swarm]
            refs.append(weakref.ref(swarm))
        replaced = earlier is not None and earlier is not swarm
        if replaced and earlier.run_settings().differs_from(swarm.run_settings()):
            logger.warning(
                "A second DurableSwarm named %r now serves the runs of that name in this "
                "process (recovered, taken over, resumed or dequeued here), in place of the "
                "first, which has other settings; runs each one starts here keep their own. "
                "To keep both, give each its own name: DurableSwarm(..., name=...).",
                name,
            )

    def remove(self, swarm: Any, name: str | None = None) -> None:
        """Stop serving `name` (default `swarm.name`) with `swarm`."""
        name = swarm.name if name is None else name
        with self._lock:
            refs = self._by_name.get(name, [])
            refs[:] = [r for r in refs if r() is not None and r() is not swarm]
            if not refs:
                self._by_name.pop(name, None)

    def settings(self, name: str, *, run_id: str | None = None) -> SwarmSettings:
        """The settings of the swarm serving `name`; `SwarmNotFoundError` when none does (the
        name "default" is always served, see the module docstring)."""
        with self._lock:
            swarm = self._latest(self._by_name.get(name, []))
        if swarm is not None:
            settings: SwarmSettings = swarm.run_settings()
            return settings
        if name == DEFAULT_SWARM:
            return SwarmSettings(DEFAULT_SWARM)
        raise SwarmNotFoundError(name, run_id=run_id, known=self.names())

    def names(self) -> list[str]:
        """The names served by a live swarm, sorted."""
        with self._lock:
            return sorted(n for n, refs in self._by_name.items() if self._latest(refs) is not None)

    def budget_of(self, settings: SwarmSettings) -> Budget | None:
        """The default budget of runs of `settings`' swarm: its own, else the process's."""
        return settings.budget or self.defaults.budget

    def limits_of(self, settings: SwarmSettings) -> Mapping[str, ModelLimits]:
        """The model limits of runs of `settings`' swarm: its own, else the process's."""
        if settings.limits is not None:
            return settings.limits
        return self.defaults.model_limits()

    def client_of(self, settings: SwarmSettings) -> Any:
        """The model client of runs of `settings`' swarm: its own; else, for the swarm
        "default", the process's (a worker's model client), and for any other swarm an
        `openai.OpenAI()` (never a client given for another swarm)."""
        if settings.client is not None:
            return settings.client
        if settings.name == DEFAULT_SWARM:
            return self.defaults.model_client()
        return self.defaults.openai_client()

    @staticmethod
    def _latest(refs: list[weakref.ref[Any]]) -> Any:
        for ref in reversed(refs):
            swarm = ref()
            if swarm is not None:
                return swarm
        return None


DEFAULTS = ProcessDefaults()
registry = SwarmRegistry(DEFAULTS)
