"""What runs use and cost: token `Usage`, prices in USD, and the `Budget` that limits a run.

Every model call records the token usage its server reported, with the model name requested and
the call's price. Prices come from the user's own table first (`prices={"my-model": {"input":
0.2, "output": 0.6}}`, USD per million tokens, optionally `"cached_input"`), else from the
`genai-prices` package (a maintained table of public prices, used offline). A call whose model
has no known price, or whose server reported no usage, has no cost: totals over it are `None`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import BudgetExceededError, DurableSwarmError

__all__ = [
    "Budget",
    "Prices",
    "Tally",
    "Usage",
    "call_cost",
    "check_budget",
    "check_prices",
    "has_price",
]

Prices = Mapping[str, Mapping[str, float]]
"""User prices: model name -> `{"input": ..., "output": ..., "cached_input": ...}` in USD per
million tokens (`cached_input` defaults to `input`)."""

_PRICE_KEYS = ("input", "output", "cached_input")
_LIMITS = ("max_model_calls", "max_total_tokens", "max_cost_usd")


@dataclass
class Usage:
    """Token usage summed over model calls, and what it cost.

    `input_tokens` include `cached_tokens` (the part of the input the server read from its cache,
    None when it never said); `cost_usd` is None when any call's price is unknown.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int | None = None
    model_calls: int = 0
    cost_usd: float | None = 0.0

    @classmethod
    def of_call(cls, reported: Mapping[str, Any] | None, cost_usd: float | None) -> Usage:
        """One model call's usage from the usage dict its server reported (OpenAI's names,
        `prompt_tokens`/`completion_tokens`; None if it reported nothing)."""
        reported = reported or {}
        details = reported.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
        input_tokens = int(reported.get("prompt_tokens") or 0)
        output_tokens = int(reported.get("completion_tokens") or 0)
        return cls(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            total_tokens=int(reported.get("total_tokens") or input_tokens + output_tokens),
            cached_tokens=int(cached) if cached is not None else None,
            model_calls=1,
            cost_usd=cost_usd,
        )

    def __add__(self, other: Usage) -> Usage:
        cached = (
            None
            if self.cached_tokens is None and other.cached_tokens is None
            else (self.cached_tokens or 0) + (other.cached_tokens or 0)
        )
        cost = (
            None
            if self.cost_usd is None or other.cost_usd is None
            else self.cost_usd + other.cost_usd
        )
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cached_tokens=cached,
            model_calls=self.model_calls + other.model_calls,
            cost_usd=cost,
        )

    def to_json(self) -> dict[str, Any]:
        """As stored in a run's log."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "cached_tokens": self.cached_tokens,
            "model_calls": self.model_calls,
            "cost_usd": self.cost_usd,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Usage:
        """The inverse of `to_json` (unknown keys are ignored; nothing gives zero usage)."""
        data = data or {}
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass
class Tally:
    """A run's usage: the total and the share of each agent (sub-agents' runs included)."""

    total: Usage = field(default_factory=Usage)
    by_agent: dict[str, Usage] = field(default_factory=dict)

    def add(self, agent: str, usage: Usage) -> None:
        """Count `usage` of one model call (or more) by `agent`."""
        self.total = self.total + usage
        self.by_agent[agent] = self.by_agent.get(agent, Usage()) + usage

    def merge(self, other: Tally) -> None:
        """Count another run's usage (a sub-agent's) into this one."""
        for agent, usage in other.by_agent.items():
            self.add(agent, usage)

    def to_json(self) -> dict[str, Any]:
        """As stored in a run's result."""
        return {
            "total": self.total.to_json(),
            "by_agent": {name: u.to_json() for name, u in self.by_agent.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Tally:
        """The inverse of `to_json`."""
        data = data or {}
        return cls(
            Usage.from_json(data.get("total")),
            {str(k): Usage.from_json(v) for k, v in (data.get("by_agent") or {}).items()},
        )


def check_prices(prices: Prices | None) -> dict[str, dict[str, float]]:
    """User prices as plain JSON, checked: each model maps to non-negative numbers for
    `input` and `output` (and optionally `cached_input`), in USD per million tokens."""
    checked: dict[str, dict[str, float]] = {}
    for model, price in (prices or {}).items():
        if not isinstance(price, Mapping) or not {"input", "output"} <= set(price):
            raise DurableSwarmError(
                f"The price of model {model!r} must be a dict with 'input' and 'output' (USD per "
                f"million tokens, optionally 'cached_input'), not {price!r}."
            )
        unknown = set(price) - set(_PRICE_KEYS)
        values = {k: price[k] for k in _PRICE_KEYS if k in price}
        bad = [
            k
            for k, v in values.items()
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0
        ]
        if unknown or bad:
            raise DurableSwarmError(
                f"The price of model {model!r} has "
                + (f"unknown keys {sorted(unknown)}" if unknown else f"bad values for {bad}")
                + f": use {', '.join(_PRICE_KEYS)} with non-negative numbers (USD per million "
                "tokens)."
            )
        checked[str(model)] = {k: float(v) for k, v in values.items()}
    return checked


# Models `genai-prices` did not know, with when it was asked (`time.monotonic()`): asked again
# only after `_UNPRICED_SECONDS`, as its table can be updated while a process runs (a local or
# custom model is never in it, and a miss costs more than the call's own bookkeeping).
_unpriced: dict[str, float] = {}
_UNPRICED_SECONDS = 300.0
_UNPRICED_LIMIT = 1024


def _known_price(model: str, usage: Usage) -> float | None:
    """The public price of a call from `genai-prices`, None if the model is not in its table."""
    missed = _unpriced.get(model)
    if missed is not None and time.monotonic() - missed < _UNPRICED_SECONDS:
        return None
    try:
        from genai_prices import Usage as PriceUsage
        from genai_prices import calc_price
    except ImportError:  # pragma: no cover - a declared dependency, but keep cost optional
        return None
    try:
        price = calc_price(
            PriceUsage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cached_tokens or None,
            ),
            model_ref=model,
        )
    except LookupError:
        if len(_unpriced) >= _UNPRICED_LIMIT:
            _unpriced.clear()
        _unpriced[model] = time.monotonic()
        return None
    _unpriced.pop(model, None)
    return float(price.total_price)


def call_cost(
    model: str | None, reported: Mapping[str, Any] | None, prices: Prices | None = None
) -> float | None:
    """The price in USD of one model call of `model` that reported `reported` usage: from
    `prices` (USD per million tokens) when it names the model, else from `genai-prices`.
    None when the server reported no usage or the model's price is unknown."""
    if not reported or not model:
        return None
    usage = Usage.of_call(reported, None)
    own = (prices or {}).get(model)
    if own is None:
        return _known_price(model, usage)
    cached = usage.cached_tokens or 0
    cached_rate = own.get("cached_input", own["input"])
    return (
        (usage.input_tokens - cached) * own["input"]
        + cached * cached_rate
        + usage.output_tokens * own["output"]
    ) / 1_000_000


def has_price(model: str, prices: Prices | None = None) -> bool:
    """Whether a call of `model` can be priced (user prices or `genai-prices`)."""
    if model in (prices or {}):
        return True
    return _known_price(model, Usage(input_tokens=1, output_tokens=1, total_tokens=2)) is not None


@dataclass(frozen=True)
class Budget:
    """Limits on what one run may use, checked before each model call.

    A run stops, `failed` with `BudgetExceededError`, before a model call once its totals
    (sub-agents included) have reached a limit: `max_model_calls` model calls made,
    `max_total_tokens` tokens used, or `max_cost_usd` dollars spent. So a call-count limit is
    exact, and a token or cost limit is passed by at most the one call that crossed it. With
    `max_cost_usd`, a call of a model whose price is unknown is refused before it is made (give
    its price with `prices=`). A failed run can be resumed with a higher budget.
    """

    max_model_calls: int | None = None
    max_total_tokens: int | None = None
    max_cost_usd: float | None = None

    def __post_init__(self) -> None:
        for name in _LIMITS:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise DurableSwarmError(
                    f"Budget {name} must be a non-negative number or None, not {value!r}."
                )
            if name != "max_cost_usd" and not float(value).is_integer():
                raise DurableSwarmError(f"Budget {name} must be a whole number, not {value!r}.")
            if isinstance(value, float) and not math.isfinite(value):
                raise DurableSwarmError(f"Budget {name} must be finite, not {value!r}.")

    def to_json(self) -> dict[str, Any]:
        """As stored with a run."""
        return {name: getattr(self, name) for name in _LIMITS}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Budget | None:
        """The inverse of `to_json` (None stays None)."""
        if data is None:
            return None
        return cls(**{k: data.get(k) for k in _LIMITS})

    def exceeded(self, used: Usage) -> tuple[str, float | int] | None:
        """The first limit `used` has reached, with the figure reached; None if none is."""
        figures: dict[str, float | int | None] = {
            "max_model_calls": used.model_calls,
            "max_total_tokens": used.total_tokens,
            "max_cost_usd": used.cost_usd,
        }
        for name in _LIMITS:
            limit, figure = getattr(self, name), figures[name]
            if limit is not None and figure is not None and figure >= limit:
                return name, figure
        return None

    def remaining(self, used: Usage) -> Budget:
        """What is left of this budget after `used` (for a sub-agent drawing on it)."""

        def left(limit: float | None, figure: float | None) -> float | None:
            return None if limit is None else max(limit - (figure or 0), 0)

        calls = left(self.max_model_calls, used.model_calls)
        tokens = left(self.max_total_tokens, used.total_tokens)
        return Budget(
            max_model_calls=None if calls is None else int(calls),
            max_total_tokens=None if tokens is None else int(tokens),
            max_cost_usd=left(self.max_cost_usd, used.cost_usd),
        )

    def check(
        self, used: Usage, *, model: str, prices: Prices | None, run_id: str | None, agent: str
    ) -> None:
        """Raise `BudgetExceededError` if the next model call (of `model`, by `agent`) may not
        be made."""
        hit = self.exceeded(used)
        if hit is not None:
            name, figure = hit
            raise BudgetExceededError(name, getattr(self, name), figure, run_id=run_id, agent=agent)
        if self.max_cost_usd is not None and used.cost_usd is None:
            raise BudgetExceededError(
                "max_cost_usd", self.max_cost_usd, None, run_id=run_id, agent=agent
            )
        if self.max_cost_usd is not None and not has_price(model, prices):
            raise BudgetExceededError(
                "max_cost_usd", self.max_cost_usd, None, run_id=run_id, agent=agent, model=model
            )


def check_budget(budget: Any) -> Budget | None:
    """`budget` if it is a `Budget` or None; anything else is a clear error."""
    if budget is not None and not isinstance(budget, Budget):
        raise DurableSwarmError(
            f"`budget` must be a durable_swarm.Budget (or None), not {budget!r}; nothing was "
            "started or changed."
        )
    return budget
