"""One limiter shared by every AI worker: N calls per sliding case-minute and at most
``cap`` calls in flight, kept in Valkey and timed by Valkey's own clock (``TIME``).

A slot is held from ``acquire`` until ``release`` and then counts for one more window
from the release: the provider saw the call somewhere between the two, so the next
call that reuses the slot reaches the provider more than a window after it, however
slow the network or the worker was. A call whose worker died is never released; its
slot counts until its lease ends (longer than any HTTP timeout) plus a window.

Why not a library: ``limits`` 5.8 (a dependency already) stamps moving-window entries
with the client's ``time.time()`` and takes windows in whole seconds
(``RateLimitItem.get_expiry`` returns an int), so it is neither on the server's clock
nor able to express a scaled case-minute (0.06 s at TIME_SCALE 0.001); and it frees a
slot at acquire time, which lets the provider see N+1 calls in a window when a call
is slow to arrive. throttled-py is not in this machine's package lists. The script
below is the sliding log those libraries use, plus the hold-until-release rule.

A 429 with Retry-After pauses the limiter for every worker (``pause``): acquire then
answers with the pause's remaining time. Pauses only ever extend.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis import Redis

__all__ = ["CALLS_KEY", "PAUSE_KEY", "Grant", "SharedLimiter"]

CALLS_KEY = "proctor:ai:calls"
PAUSE_KEY = "proctor:ai:pause"

_ACQUIRE = """
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
local limit, window, cap, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local paused = redis.call('PTTL', KEYS[2])
if paused > 0 then return {0, tostring(paused), 'paused'} end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf') >= cap then
  return {0, tostring(window / limit), 'concurrency'}
end
local count = redis.call('ZCARD', KEYS[1])
if count >= limit then
  local oldest = redis.call('ZRANGE', KEYS[1], count - limit, count - limit, 'WITHSCORES')
  return {0, tostring(math.max(1, tonumber(oldest[2]) + window - now)), 'window'}
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[5])
redis.call('PEXPIRE', KEYS[1], math.ceil(window + lease))
return {1, tostring(now), 'granted'}
"""

_RELEASE = """
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then redis.call('ZADD', KEYS[1], 'XX', now, ARGV[1]) end
return tostring(now)
"""

_PAUSE = """
local ms = tonumber(ARGV[1])
if redis.call('PTTL', KEYS[1]) < ms then redis.call('SET', KEYS[1], ARGV[2], 'PX', math.ceil(ms)) end
return redis.call('PTTL', KEYS[1])
"""


@dataclass(frozen=True)
class Grant:
    """The answer to one acquire: granted, or how long to wait (real seconds) and why."""

    granted: bool
    wait_seconds: float
    reason: str  # granted | window | concurrency | paused


class SharedLimiter:
    """``limit`` calls per ``window_seconds`` (real seconds: one case-minute scaled) and
    at most ``cap`` in flight. ``lease_seconds`` must exceed the provider call's HTTP timeout."""

    def __init__(self, redis: Redis, limit: int, window_seconds: float, cap: int, lease_seconds: float,
                 keys: tuple[str, str] = (CALLS_KEY, PAUSE_KEY)) -> None:
        if limit < 1 or cap < 1:
            raise ValueError(f"limit and cap must be at least 1, not {limit} and {cap}")
        if window_seconds <= 0 or lease_seconds <= 0:
            raise ValueError("window_seconds and lease_seconds must be greater than 0")
        self.redis = redis
        self.calls_key, self.pause_key = keys  # other keys only for the per-worker negative control
        self.limit, self.cap = limit, cap
        self.window_ms, self.lease_ms = window_seconds * 1000, lease_seconds * 1000
        self._acquire = redis.register_script(_ACQUIRE)
        self._release = redis.register_script(_RELEASE)
        self._pause = redis.register_script(_PAUSE)

    def acquire(self, token: str) -> Grant:
        """Take a slot for the call ``token`` (unique per call), or say how long to wait."""
        granted, value, reason = self._acquire(
            keys=[self.calls_key, self.pause_key], args=[self.limit, self.window_ms, self.cap, self.lease_ms, token]
        )
        reason = reason.decode() if isinstance(reason, bytes) else reason
        return Grant(bool(granted), 0.0 if granted else float(value) / 1000, reason)

    def release(self, token: str) -> None:
        """The call is over (answered, refused or failed): its slot counts one more window from now."""
        self._release(keys=[self.calls_key], args=[token])

    def pause(self, seconds: float, reason: str) -> float:
        """Stop every worker's calls for ``seconds`` (a provider's Retry-After); returns the pause left."""
        return int(self._pause(keys=[self.pause_key], args=[seconds * 1000, reason])) / 1000
