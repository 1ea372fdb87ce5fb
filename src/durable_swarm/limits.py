"""Model limits shared by a fleet: requests and tokens per minute, and calls at once, per model.

`ModelLimits` describes the limits of one model (or one endpoint); `DurableSwarm(limits=...)`
(`Limits`: a dict or its text), `durable-swarm worker --limit ...` and the environment variable
`DURABLE_SWARM_MODEL_LIMITS` (`LIMITS_ENV`) give them by key:

* a model name (`"gpt-4o"`): the calls that ask for that model;
* a base URL (`"https://api.openai.com/v1"`): every call of a client with that `base_url` whose
  model has no limits of its own;
* `"*"`: every other call.

The durable runtime enforces them across every process on the run database (see
`durable_swarm.durable._limits`); this module only describes and reads them, and reads what a
provider's 429 says about when to try again (`retry_after`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

from .errors import DurableSwarmError

__all__ = [
    "LIMITS_ENV",
    "Limits",
    "ModelLimits",
    "check_limits",
    "estimate_tokens",
    "limits_for",
    "parse_duration",
    "parse_limits",
    "retry_after",
]

LIMITS_ENV = "DURABLE_SWARM_MODEL_LIMITS"
ANY_MODEL = "*"
_FIELDS = {"rpm": "requests_per_minute", "tpm": "tokens_per_minute", "concurrent": "concurrent"}


@dataclass(frozen=True)
class ModelLimits:
    """The limits of one model (or endpoint) for the whole fleet of processes on a database.

    Args:
        requests_per_minute: requests that may begin in any window (None: no limit).
        tokens_per_minute: tokens (prompt, estimated from its length before the call, plus
            the answer's `max_tokens`; the usage the server reports once it answers) in any
            window (None: no limit). A single call larger than this still goes, alone.
        concurrent: calls in flight at once (None: no limit).
        window_seconds: the sliding window the per-minute figures are counted over, 60 by
            default. A shorter one allows `requests_per_minute * window_seconds / 60` requests
            per window, which also spreads a burst out (tests use a few seconds).

    Every process counts against the same figures (a table in the run database), so ten
    workers share one model's limits instead of each trying its own.
    """

    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    concurrent: int | None = None
    window_seconds: float = 60.0

    def __post_init__(self) -> None:
        window = self.window_seconds
        if isinstance(window, bool) or not isinstance(window, (int, float)):
            raise DurableSwarmError(f"ModelLimits window_seconds must be a number, not {window!r}.")
        if not 0 < window <= 3600:
            raise DurableSwarmError(
                f"ModelLimits window_seconds must be above 0 and at most 3600, not {window!r}."
            )
        for name in ("requests_per_minute", "tokens_per_minute"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise DurableSwarmError(f"ModelLimits {name} must be a number, not {value!r}.")
            if not math.isfinite(value) or value * window / 60 < 1:
                raise DurableSwarmError(
                    f"ModelLimits {name}={value!r} allows less than one per window of "
                    f"{window:g} s; raise it or lengthen window_seconds."
                )
        concurrent = self.concurrent
        if concurrent is not None and (
            isinstance(concurrent, bool) or not isinstance(concurrent, int) or concurrent < 1
        ):
            raise DurableSwarmError(
                f"ModelLimits concurrent must be a whole number >= 1, not {concurrent!r}."
            )

    @property
    def requests_per_window(self) -> int | None:
        """How many requests may begin in one window (None: no limit)."""
        rpm = self.requests_per_minute
        return None if rpm is None else max(1, math.floor(rpm * self.window_seconds / 60 + 1e-9))

    @property
    def tokens_per_window(self) -> int | None:
        """How many tokens one window allows (None: no limit)."""
        tpm = self.tokens_per_minute
        return None if tpm is None else max(1, math.floor(tpm * self.window_seconds / 60 + 1e-9))

    def to_json(self) -> dict[str, Any]:
        """As stored beside the shared figures (for the CLI, the console and /metrics)."""
        return {
            "requests_per_minute": self.requests_per_minute,
            "tokens_per_minute": self.tokens_per_minute,
            "concurrent": self.concurrent,
            "window_seconds": self.window_seconds,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelLimits:
        """The inverse of `to_json`."""
        return cls(
            requests_per_minute=data.get("requests_per_minute"),
            tokens_per_minute=data.get("tokens_per_minute"),
            concurrent=data.get("concurrent"),
            window_seconds=data.get("window_seconds", 60.0),
        )


Limits = Mapping[str, ModelLimits] | str
"""What `DurableSwarm(limits=...)` takes: `{key: ModelLimits}` or the text of
`DURABLE_SWARM_MODEL_LIMITS`."""


def parse_limits(text: str, *, source: str = LIMITS_ENV) -> dict[str, ModelLimits]:
    """Limits from text: entries separated by `;` or new lines, each
    `KEY:rpm=N,tpm=N,concurrent=N[,window=SECONDS]`, e.g.
    `"gpt-4o:rpm=500,tpm=30000,concurrent=8; *:concurrent=20"`. The key is everything before
    the last `:` that is followed by a setting (so a base URL works as a key)."""
    found: dict[str, ModelLimits] = {}
    for raw in re.split(r"[;\n]", text):
        entry = raw.strip()
        if not entry:
            continue
        match = re.match(r"^(?P<key>.+?):(?P<settings>(?:rpm|tpm|concurrent|window)\s*=.*)$", entry)
        if match is None:
            raise DurableSwarmError(
                f"{source}: cannot read {entry!r}; write KEY:rpm=N,tpm=N,concurrent=N "
                "(e.g. gpt-4o:rpm=500,tpm=30000,concurrent=8), entries separated by ';'."
            )
        values: dict[str, Any] = {}
        for setting in match["settings"].split(","):
            name, _, value = (part.strip() for part in setting.partition("="))
            field = "window_seconds" if name == "window" else _FIELDS.get(name)
            try:
                number = float(value)
            except ValueError:
                number = float("nan")
            if field is None or not math.isfinite(number):
                raise DurableSwarmError(
                    f"{source}: {setting.strip()!r} in {entry!r} is not rpm=N, tpm=N, "
                    "concurrent=N or window=SECONDS with a number."
                )
            values[field] = int(number) if field == "concurrent" and number.is_integer() else number
        found[match["key"].strip()] = ModelLimits(**values)
    return found


def check_limits(limits: Limits | None) -> dict[str, ModelLimits] | None:
    """`limits` as a dict of `ModelLimits` by key (text is read with `parse_limits`), or a
    `DurableSwarmError` saying what is wrong. None stays None (no limits of the swarm's own)."""
    if limits is None:
        return None
    if isinstance(limits, str):
        return parse_limits(limits, source="limits")
    if not isinstance(limits, Mapping):
        raise DurableSwarmError(
            f"limits must be a dict of model name (or base URL, or '*') -> ModelLimits, or "
            f"text like 'gpt-4o:rpm=500,concurrent=8', not {type(limits).__name__}."
        )
    checked: dict[str, ModelLimits] = {}
    for key, value in limits.items():
        if not isinstance(key, str) or not key.strip():
            raise DurableSwarmError(f"limits keys must be model names or base URLs, not {key!r}.")
        if not isinstance(value, ModelLimits):
            raise DurableSwarmError(
                f"limits[{key!r}] must be a ModelLimits(requests_per_minute=..., "
                f"tokens_per_minute=..., concurrent=...), not {value!r}."
            )
        checked[key.strip()] = value
    return checked


def limits_for(
    limits: Mapping[str, ModelLimits] | None, model: str | None, base_url: str | None
) -> tuple[str, ModelLimits] | None:
    """The key and limits a call of `model` through a client on `base_url` counts against:
    the model's own, else its endpoint's, else `"*"`'s; None when none applies."""
    if not limits:
        return None
    keys: list[str] = [k for k in (model, base_url) if k]
    if base_url:
        keys.append(base_url.rstrip("/"))
    keys.append(ANY_MODEL)
    for key in keys:
        found = limits.get(key)
        if found is not None:
            return key, found
    return None


def estimate_tokens(request: Mapping[str, Any]) -> int:
    """What a chat request will count against a tokens-per-minute limit before it is sent: its
    messages and tools at about four characters a token, plus the answer's `max_tokens` (or
    `max_completion_tokens`) when it sets one."""
    text = json.dumps([request.get("messages") or [], request.get("tools") or []], default=str)
    answer = request.get("max_completion_tokens") or request.get("max_tokens") or 0
    answer = answer if isinstance(answer, int) and not isinstance(answer, bool) else 0
    return len(text) // 4 + 1 + answer


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(text: str) -> float | None:
    """Seconds in a provider's reset header: `"6m0s"`, `"1s"`, `"20ms"`, `"1h2m3.5s"`, or a
    plain number of seconds; None if it is neither."""
    text = text.strip()
    try:
        seconds = float(text)
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    return sum(float(n) * scale[u] for n, u in parts)


def retry_after(headers: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> float | None:
    """How long a 429's headers ask to wait, in seconds: `retry-after-ms`, else `retry-after`
    (seconds or an HTTP date), else the later of `x-ratelimit-reset-requests` and
    `x-ratelimit-reset-tokens` (e.g. `"6m0s"`, `"20ms"`); None if they say nothing."""
    if headers is None:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    found = {str(k).lower(): str(v) for k, v in items}
    if "retry-after-ms" in found:
        try:
            ms = float(found["retry-after-ms"])
            if math.isfinite(ms) and ms >= 0:
                return ms / 1000
        except ValueError:
            pass
    if "retry-after" in found:
        value = found["retry-after"].strip()
        seconds = parse_duration(value)
        if seconds is not None:
            return seconds
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            when = None
        if when is not None:
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())
    resets = [
        seconds
        for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")
        if name in found and (seconds := parse_duration(found[name])) is not None
    ]
    return max(resets) if resets else None
