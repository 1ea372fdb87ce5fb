"""The budget options of the commands that start or resume runs (see `durable_swarm.Budget`)."""

from __future__ import annotations

import argparse

from ..usage import Budget

__all__ = ["add_budget_options", "budget_of"]


def _whole(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number, 0 or more, not {text!r}")
    return int(text)


def add_budget_options(parser: argparse.ArgumentParser, what: str) -> None:
    """`--max-model-calls`, `--max-total-tokens`, `--max-cost-usd` (read with `budget_of`)."""
    group = parser.add_argument_group("budget", what)
    group.add_argument("--max-model-calls", type=_whole, metavar="N", help="model calls")
    group.add_argument("--max-total-tokens", type=_whole, metavar="N", help="tokens, in + out")
    group.add_argument("--max-cost-usd", type=_usd, metavar="USD", help="cost in US dollars")


def _usd(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected an amount in USD like 0.50, not {text!r}")
    return value


def budget_of(args: argparse.Namespace) -> Budget | None:
    """The budget the budget options give, None if none was given."""
    limits = {
        name: getattr(args, name, None)
        for name in ("max_model_calls", "max_total_tokens", "max_cost_usd")
    }
    return Budget(**limits) if any(v is not None for v in limits.values()) else None
