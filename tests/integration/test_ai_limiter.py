"""The shared AI limiter on a real valkey-server: sliding window on Valkey's clock, held
until release, a concurrency cap, and a shared pause (issue #11)."""

from __future__ import annotations

import time
from typing import Callable, Iterator

import pytest
from redis import Redis

from valkeysupport import running_valkey
from stack.lanes.ai.limiter import CALLS_KEY, SharedLimiter


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Redis]:
    with running_valkey(tmp_path_factory.mktemp("valkey")) as client:
        yield client


@pytest.fixture(autouse=True)
def flushed(redis: Redis) -> None:
    redis.flushall()


def limiter(redis: Redis, limit: int = 3, window: float = 30.0, cap: int = 10) -> SharedLimiter:
    return SharedLimiter(redis, limit=limit, window_seconds=window, cap=cap, lease_seconds=60.0)


def test_limit_calls_are_granted_then_the_next_waits_for_the_window(redis: Redis) -> None:
    shared = limiter(redis)
    grants = [shared.acquire(f"c{i}") for i in range(4)]
    assert [g.granted for g in grants] == [True, True, True, False]
    assert grants[3].reason == "window"


def test_a_slot_counts_from_its_release_not_its_acquire(redis: Redis) -> None:
    shared = limiter(redis, limit=1, window=0.3)
    assert shared.acquire("slow-call").granted
    time.sleep(0.4)  # longer than a window, but the call is still in flight
    assert shared.acquire("next").reason == "window"
    before_release = time.monotonic()
    shared.release("slow-call")
    # The same budget seen with a long window: the released slot now counts from its release,
    # so the wait is the window less the time since the release (measured, not assumed small).
    waiting = limiter(redis, limit=1, window=30.0).acquire("next")
    since_release = time.monotonic() - before_release
    assert (waiting.granted, waiting.reason) == (False, "window")
    assert 30.0 - since_release - 0.05 <= waiting.wait_seconds <= 30.0  # 0.05: Valkey's clock against ours


def test_two_limiters_share_one_budget(redis: Redis) -> None:
    first, second = limiter(redis), limiter(Redis(connection_pool=redis.connection_pool))
    assert [first.acquire("a").granted, second.acquire("b").granted, first.acquire("c").granted] == [True] * 3
    assert not second.acquire("d").granted
    assert redis.zcard(CALLS_KEY) == 3


def test_concurrency_cap_counts_calls_in_flight(redis: Redis) -> None:
    shared = limiter(redis, limit=10, cap=2)
    assert shared.acquire("a").granted and shared.acquire("b").granted
    assert shared.acquire("c").reason == "concurrency"
    shared.release("a")
    assert shared.acquire("c").granted


def test_pause_stops_every_worker_and_only_extends(redis: Redis) -> None:
    shared = limiter(redis)
    assert shared.pause(5.0, "429 from provider") > 4.0
    assert shared.pause(1.0, "a shorter Retry-After") > 4.0  # never shortened
    grant = limiter(redis).acquire("a")
    assert (grant.granted, grant.reason) == (False, "paused") and grant.wait_seconds > 4.0


def test_bad_limits_are_refused_by_name(redis: Redis) -> None:
    with pytest.raises(ValueError, match="limit and cap"):
        SharedLimiter(redis, limit=0, window_seconds=1, cap=1, lease_seconds=1)
    with pytest.raises(ValueError, match="window_seconds"):
        SharedLimiter(redis, limit=1, window_seconds=0, cap=1, lease_seconds=1)


# -- dating a released slot from the provider's arrival (X-Received-At) ---------------------------

_LOOSE_RELEASE = """
local at = redis.call('TIME')[1] * 1000
if ARGV[2] ~= '' then at = tonumber(ARGV[2]) end
redis.call('ZADD', KEYS[1], 'XX', at, ARGV[1])
return tostring(at)
"""


class LooseLimiter(SharedLimiter):
    """Negative control: takes the arrival time as given, with no clamp to the acquire or to now."""

    def __init__(self, redis: Redis) -> None:
        super().__init__(redis, limit=1, window_seconds=30.0, cap=10, lease_seconds=60.0)
        self._release = redis.register_script(_LOOSE_RELEASE)


def one_call_limiter(redis: Redis) -> SharedLimiter:
    return limiter(redis, limit=1)


CLAMPS = pytest.mark.parametrize("make", [one_call_limiter, LooseLimiter], ids=["shared", "negative-control-unclamped"])


def dated(redis: Redis, token: str) -> float:
    """When the stored slot counts from (epoch seconds), read from Valkey, not from release's answer."""
    return float(redis.zscore(CALLS_KEY, token) or 0.0) / 1000


def held_then_released(shared: SharedLimiter, redis: Redis, arrival_offset: float | None) -> tuple[float, float, float]:
    """Acquire, wait 0.3 s, release with ``acquire + arrival_offset`` as the arrival (None: no answer);
    returns (acquired, released, dated) on Valkey's clock, which is this host's clock."""
    acquired = time.time()
    assert shared.acquire("call").granted
    time.sleep(0.3)
    arrival = None if arrival_offset is None else acquired + arrival_offset
    before_release = time.time()
    shared.release("call", arrival)
    return acquired, before_release, dated(redis, "call")


def test_a_slot_released_with_an_arrival_counts_from_the_arrival(redis: Redis) -> None:
    acquired, released, at = held_then_released(limiter(redis, limit=1), redis, arrival_offset=0.1)
    assert at == pytest.approx(acquired + 0.1, abs=1e-3)
    waiting = limiter(redis, limit=1).acquire("next")
    assert waiting.reason == "window" and waiting.wait_seconds <= 30.0 - 0.2 + 0.01  # freed 0.2 s sooner


def test_a_slot_released_without_an_arrival_counts_from_the_release(redis: Redis) -> None:
    """The fallback (a timeout, a lost body): the release time, never earlier than the arrival."""
    acquired, released, at = held_then_released(limiter(redis, limit=1), redis, arrival_offset=None)
    assert at >= released - 0.01 and at >= acquired + 0.3
    waiting = limiter(redis, limit=1).acquire("next")
    assert waiting.wait_seconds >= 30.0 - (time.time() - released) - 0.01


@CLAMPS
def test_an_arrival_later_than_now_is_clamped_to_valkeys_now(redis: Redis, make: Callable[[Redis], SharedLimiter]) -> None:
    _, _, at = held_then_released(make(redis), redis, arrival_offset=100.0)
    clamped = at <= time.time()
    assert clamped is (make is one_call_limiter)  # the unclamped control would hold the slot 100 s too long


@CLAMPS
def test_an_arrival_before_the_acquire_is_clamped_to_the_acquire(redis: Redis, make: Callable[[Redis], SharedLimiter]) -> None:
    acquired, _, at = held_then_released(make(redis), redis, arrival_offset=-100.0)
    clamped = at >= acquired - 0.01
    assert clamped is (make is one_call_limiter)  # unclamped, a bogus early arrival would free the slot at once
