"""`ModelLimits` and what reads them: the text form (`--limit`, `DURABLE_SWARM_MODEL_LIMITS`),
which limits a call counts against, what a 429's headers ask, the admission arithmetic of the
shared window, the fake server's rate-limited mode, and the /metrics families of the limits."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from durable_swarm import ModelLimits
from durable_swarm.durable._limits import CONCURRENT_POLL, wait_seconds
from durable_swarm.errors import DurableSwarmError
from durable_swarm.limits import (
    check_limits,
    estimate_tokens,
    limits_for,
    parse_duration,
    parse_limits,
    retry_after,
)
from durable_swarm.testing import FakeOpenAIServer


def test_limits_read_from_text_as_the_environment_and_the_worker_give_them() -> None:
    found = parse_limits(
        "gpt-4o:rpm=500,tpm=30000,concurrent=8; http://127.0.0.1:9/v1:rpm=60,window=2\n*:concurrent=3"
    )
    assert found == {
        "gpt-4o": ModelLimits(requests_per_minute=500, tokens_per_minute=30000, concurrent=8),
        "http://127.0.0.1:9/v1": ModelLimits(requests_per_minute=60, window_seconds=2),
        "*": ModelLimits(concurrent=3),
    }
    assert parse_limits("") == {}
    assert check_limits("gpt-4o:concurrent=2") == {"gpt-4o": ModelLimits(concurrent=2)}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("gpt-4o", "cannot read 'gpt-4o'"),
        ("gpt-4o:rpm=fast", "rpm=fast"),
        ("gpt-4o:rpm=5,burst=2", "burst=2"),
        ("gpt-4o:concurrent=0", "concurrent must be a whole number >= 1"),
        ("gpt-4o:rpm=10,window=1", "less than one per window"),
    ],
)
def test_bad_limits_text_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(DurableSwarmError, match=says.replace("(", r"\(")):
        parse_limits(text)


def test_limits_are_checked_where_they_are_given() -> None:
    with pytest.raises(DurableSwarmError, match="must be a ModelLimits"):
        check_limits({"gpt-4o": {"rpm": 5}})  # type: ignore[dict-item]
    with pytest.raises(DurableSwarmError, match="window_seconds"):
        ModelLimits(requests_per_minute=60, window_seconds=0)
    assert ModelLimits(requests_per_minute=90, window_seconds=2).requests_per_window == 3
    assert ModelLimits(tokens_per_minute=600, window_seconds=6).tokens_per_window == 60
    limits = ModelLimits(requests_per_minute=5, tokens_per_minute=7, concurrent=2)
    assert ModelLimits.from_json(limits.to_json()) == limits


def test_a_call_counts_against_its_model_else_its_endpoint_else_any() -> None:
    limits = {
        "gpt-4o": ModelLimits(concurrent=1),
        "http://x/v1": ModelLimits(concurrent=2),
        "*": ModelLimits(concurrent=3),
    }
    assert limits_for(limits, "gpt-4o", "http://x/v1/") == ("gpt-4o", limits["gpt-4o"])
    assert limits_for(limits, "other", "http://x/v1/") == ("http://x/v1", limits["http://x/v1"])
    assert limits_for(limits, "other", None) == ("*", limits["*"])
    assert limits_for({"gpt-4o": ModelLimits(concurrent=1)}, "other", None) is None
    assert limits_for({}, "gpt-4o", None) is None


def test_what_a_429_asks_to_wait() -> None:
    assert retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after({"Retry-After": "3"}) == 3.0
    later = datetime.now(timezone.utc) + timedelta(seconds=30)
    waited = retry_after({"retry-after": format_datetime(later, usegmt=True)})
    assert waited is not None and 27 < waited <= 30
    resets = {"x-ratelimit-reset-requests": "6m0s", "x-ratelimit-reset-tokens": "20ms"}
    assert retry_after(resets) == 360.0
    assert retry_after({"x-ratelimit-reset-tokens": "1s"}) == 1.0
    assert retry_after({"content-type": "application/json"}) is None
    assert retry_after(None) is None
    assert parse_duration("1h2m3.5s") == 3723.5
    assert parse_duration("20ms") == 0.02
    assert parse_duration("soon") is None


def test_a_request_is_estimated_before_it_is_sent() -> None:
    small = estimate_tokens({"messages": [{"role": "user", "content": "hi"}]})
    big = estimate_tokens({"messages": [{"role": "user", "content": "x" * 4000}]})
    assert 0 < small < 20 and 1000 < big < 1020
    asked = estimate_tokens({"messages": [], "max_tokens": 500})
    assert asked > 500


def test_the_window_counts_a_call_until_a_window_after_it_ended() -> None:
    rpm = ModelLimits(requests_per_minute=120, window_seconds=1)  # 2 per second
    now = 100.0
    assert wait_seconds(rpm, now, 0.0, [(99.5, 1)], 0, 1) == 0
    # Two counted: the older one leaves the window a second after it ended.
    assert wait_seconds(rpm, now, 0.0, [(99.5, 1), (99.8, 1)], 0, 1) == pytest.approx(0.5)
    # Still in flight: its end is not known yet, so the call looks again shortly.
    assert wait_seconds(rpm, now, 0.0, [(99.5, 1), (None, 1)], 0, 1) == pytest.approx(0.5)
    assert wait_seconds(rpm, now, 0.0, [(None, 1), (None, 1)], 0, 1) == CONCURRENT_POLL
    # A pause set by a 429 wins when it is longer.
    assert wait_seconds(rpm, now, 103.0, [], 0, 1) == pytest.approx(3.0)


def test_tokens_and_calls_at_once() -> None:
    tpm = ModelLimits(tokens_per_minute=600, window_seconds=6)  # 60 tokens per window
    now = 100.0
    assert wait_seconds(tpm, now, 0.0, [(99.0, 30)], 0, 30) == 0
    assert wait_seconds(tpm, now, 0.0, [(99.0, 30), (99.5, 20)], 0, 30) == pytest.approx(5.0)
    # A call larger than the whole window goes, alone, once the window is empty.
    assert wait_seconds(tpm, now, 0.0, [], 0, 500) == 0
    assert wait_seconds(tpm, now, 0.0, [(99.5, 10)], 0, 500) == pytest.approx(5.5)
    at_once = ModelLimits(concurrent=2)
    assert wait_seconds(at_once, now, 0.0, [], 1, 1) == 0
    assert wait_seconds(at_once, now, 0.0, [], 2, 1) == CONCURRENT_POLL


def test_the_fake_server_refuses_past_its_rate_limit_and_says_when_to_come_back() -> None:
    with FakeOpenAIServer(rate_limit=(2, 1.0)) as server:
        client = server.client(max_retries=0)
        ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        client.chat.completions.create(**ask)
        client.chat.completions.create(**ask)
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(**ask)
        headers = refused.value.response.headers
        waited = retry_after(headers)
        assert waited is not None and 0 < waited <= 1.0
        assert parse_duration(headers["x-ratelimit-reset-requests"]) == pytest.approx(
            waited, abs=0.002
        )
        assert server.stats["rate_limited"] == 1 and server.stats["answered"] == 2
        assert server.most_in_window(1.0) == 2
        assert server.most_in_window(1.0, refused=True) == 3
        assert len(server.arrivals) == 3
        time.sleep(waited + 0.01)
        client.chat.completions.create(**ask)  # the window has room again
        server.set_rate_limit(None)
        for _ in range(3):
            client.chat.completions.create(**ask)
        assert server.stats["rate_limited"] == 1
        with pytest.raises(ValueError):
            server.set_rate_limit(0, 1.0)


def test_metrics_show_the_shared_limits() -> None:
    from durable_swarm.web._metrics import metrics_text

    class NoRuns:
        def status_counts(self) -> dict[str, int]:
            return {}

        def step_totals(self) -> list[tuple[str, int, int, float]]:
            return []

        def token_totals(self) -> dict[str, int]:
            return {}

    row = {
        "key": "gpt-4o",
        "limits": {"requests_per_minute": 500, "tokens_per_minute": None, "concurrent": 8},
        "waiting": 3,
        "in_flight": 2,
        "requests_last_minute": 41,
        "tokens_last_minute": 9000,
        "paused_seconds": 1.5,
    }
    text = metrics_text(NoRuns(), limits=lambda: [row]).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    model = (("model", "gpt-4o"),)
    assert samples[("durable_swarm_model_calls_waiting", model)] == 3
    assert samples[("durable_swarm_model_calls_in_flight", model)] == 2
    assert samples[("durable_swarm_model_requests_last_minute", model)] == 41
    assert samples[("durable_swarm_model_tokens_last_minute", model)] == 9000
    assert samples[("durable_swarm_model_paused_seconds", model)] == 1.5
    limit = ("durable_swarm_model_limit", (("kind", "requests"), ("model", "gpt-4o")))
    assert samples[limit] == 500
    assert ("durable_swarm_model_limit", (("kind", "tokens"), ("model", "gpt-4o"))) not in samples
