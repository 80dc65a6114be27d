"""One limiter shared by every AI worker: N calls per sliding case-minute and at most
``cap`` calls in flight, kept in Valkey and timed by Valkey's own clock (``TIME``).

A slot is held from ``acquire`` until ``release`` and then counts for one more window
from the moment the provider received the call, which is the moment the provider's own
window (and the ``provider_limit`` checker) counts from. The fake provider says it on
every answer (``X-Received-At``, stack/providers/__init__.py); ``release`` takes it,
clamped between the acquire and Valkey's now (a call cannot reach the provider before
its slot was granted, nor after its answer came back). The next call that reuses the
slot is granted at least a window after that arrival and reaches the provider later
still, so the provider never sees more than ``limit`` arrivals in a window. Without an
arrival time (a timeout, a reset, a lost body: no answer was read) the slot counts from
the release, which is never earlier than the arrival: the conservative bound. A call
whose worker died is never released; its slot counts until its lease ends (longer than
any HTTP timeout) plus a window.

Dating from the arrival assumes the provider's clock is Valkey's: true in both
deployments here (the embedded stack and compose run the provider and Valkey on one
host, one kernel clock). A provider on another host has its own clock, and a skew of
``s`` seconds would let the limiter free a slot ``s`` early. A real metered API sends no
``X-Received-At``, so against a remote provider the lane falls back to the release time
by itself (the floor of a drain is then (window + call time) / window); a user whose
remote provider does send an arrival time must not feed it to ``release`` unless the two
clocks are synchronised to well under a call's duration.

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
local held = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not held then return tostring(now) end
local at = now
if ARGV[2] ~= '' then
  local acquired = tonumber(held) - tonumber(ARGV[3])
  at = math.max(acquired, math.min(now, tonumber(ARGV[2])))
end
redis.call('ZADD', KEYS[1], 'XX', at, ARGV[1])
return tostring(at)
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

    def release(self, token: str, received_at: float | None = None) -> float:
        """The call is over (answered, refused or failed): its slot counts one more window from
        ``received_at`` (epoch seconds, when the provider received it; clamped between the
        acquire and Valkey's now), or from now when the answer did not say. Returns that time."""
        arrival = "" if received_at is None else repr(received_at * 1000)
        return float(self._release(keys=[self.calls_key], args=[token, arrival, self.lease_ms])) / 1000

    def pause(self, seconds: float, reason: str) -> float:
        """Stop every worker's calls for ``seconds`` (a provider's Retry-After); returns the pause left."""
        return int(self._pause(keys=[self.pause_key], args=[seconds * 1000, reason])) / 1000
