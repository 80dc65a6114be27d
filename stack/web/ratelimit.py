"""Request limits keyed by identity, never by a shared address.

Built on ``limits`` (maintained, Valkey storage through redis-py, the sliding-window
counter: two keys per limit, one Lua round trip). Chosen over slowapi and
fastapi-limiter because those key by request address out of the box and bind the
limit to decorators, while here the key is the authenticated account: ``limits`` is
only the counting engine, and the keying stays ours. Counters live in Valkey so every
node sees the same count.

Keys:
- an authenticated route: ``<exam>/<student>`` + the route template (``ACCOUNT_ROUTE``);
  500 students behind one address are 500 keys, one abusive account is limited alone;
- login: the client's network address (``LOGIN_NETWORK``, generous: a whole exam hall
  logs in through one NAT); failed logins per account *and source* (``LOGIN_FAILURE_TIERS``,
  escalating: a guesser waits a minute, then ten, then an hour), and failed logins per source
  across accounts (``LOGIN_SOURCE_FAILURES``, the cap on one source guessing many accounts).
  Failures are never counted per account alone: that let ten guesses a minute from anywhere
  lock a student out of the exam. A source with no recent failures for an account logs in
  with the right code however much another source has guessed.

When Valkey is unreachable the limiter falls back to per-node memory counters: answer
acceptance writes only the ledger (a documented promise) and must not start failing
because the limiter's store is down. A node keeps limiting alone, so the effective limit
is at most nodes x limit for the outage (HAProxy spreads a client's requests over the
nodes); each fallback is counted (``fallbacks``, ``proctor_limiter_fallbacks_total`` on
/metrics). The access codes' 128 bits, not the limiter, are what stop guessing, so looser
login limits for a while are safe.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from fastapi import HTTPException
from limits import RateLimitItem, parse
from limits.storage import MemoryStorage, RedisStorage
from limits.strategies import SlidingWindowCounterRateLimiter
from redis.exceptions import RedisError

from stack.connection_stats import process_stats
from stack.web.dispatch import ValkeyClients

__all__ = ["ACCOUNT_ROUTE", "LOGIN_FAILURE_TIERS", "LOGIN_NETWORK", "LOGIN_SOURCE_FAILURES", "Limiter", "NoLimits",
           "RequestLimiter", "Verdict", "too_many"]

log = logging.getLogger(__name__)

ACCOUNT_ROUTE = parse("600/minute")
"""Per account and route: a merit-card poll every 0.25 s is 240/minute; 600 leaves room."""
LOGIN_NETWORK = parse("3000/minute")
"""Default logins per client address (PROCTOR_LOGIN_NETWORK_LIMIT): a 20/s login ramp from
one address (an exam hall) is 1200."""
LOGIN_FAILURE_TIERS = (parse("5/minute"), parse("10/10 minutes"), parse("20/hour"))
"""Failed logins per (exam, student, source), every tier counted: a student mistyping a few
times is fine; a guesser is refused for the rest of a window that grows tenfold per tier."""
LOGIN_SOURCE_FAILURES = parse("300/minute")
"""Failed logins per source across accounts: sized for a NAT of 1,000 students of whom a
third mistype once in the same minute, and far below a guesser spraying many accounts."""

_BYPASS_SECONDS = 2.0
"""After a Valkey error, count in memory this long before trying Valkey again, so an
unreachable store costs one connect attempt per node per period, not one per request."""


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    retry_after: int  # whole seconds, >= 1 when not allowed


def too_many(verdict: Verdict) -> HTTPException:
    return HTTPException(status_code=429, detail="too many requests for this account",
                         headers={"Retry-After": str(verdict.retry_after)})


class Limiter(Protocol):
    """What the routes ask of a node's limiter, chosen once per node by ``stack.web.app``."""

    login_network: RateLimitItem
    fallbacks: int

    def hit(self, item: RateLimitItem, *key: str) -> Verdict: ...

    def peek(self, item: RateLimitItem, *key: str) -> Verdict: ...


class NoLimits:
    """Allows every request and counts nothing: the ``PROCTOR_RATE_LIMITS=off`` negative control,
    and the limiter of a bare ``WebState`` built by a test."""

    login_network = LOGIN_NETWORK
    fallbacks = 0

    def hit(self, item: RateLimitItem, *key: str) -> Verdict:
        return Verdict(True, 0)

    def peek(self, item: RateLimitItem, *key: str) -> Verdict:
        return Verdict(True, 0)


class RequestLimiter:
    """Counts in Valkey, or in memory while Valkey is unreachable (see the module doc)."""

    def __init__(self, clients: ValkeyClients | None, login_network: RateLimitItem = LOGIN_NETWORK) -> None:
        self.login_network = login_network
        self._clients = clients
        self._shared: SlidingWindowCounterRateLimiter | None = None
        self._local = SlidingWindowCounterRateLimiter(MemoryStorage())
        self._bypass_until = 0.0
        self._lock = threading.Lock()
        self.fallbacks = 0  # times the shared store failed and memory counted instead

    def hit(self, item: RateLimitItem, *key: str) -> Verdict:
        limiter = self._shared_limiter()
        if limiter is not None:
            try:
                return self._verdict(limiter, item, key)
            except (RedisError, OSError) as exc:
                self._fall_back(exc)
        return self._verdict(self._local, item, key)

    def peek(self, item: RateLimitItem, *key: str) -> Verdict:
        """Whether a hit would be allowed, without counting one."""
        limiter = self._shared_limiter()
        try:
            allowed = (limiter or self._local).test(item, *key)
        except (RedisError, OSError) as exc:
            self._fall_back(exc)
            allowed = self._local.test(item, *key)
        return Verdict(allowed, 0 if allowed else self._retry_after(limiter or self._local, item, key))

    def _verdict(self, limiter: SlidingWindowCounterRateLimiter, item: RateLimitItem, key: tuple[str, ...]) -> Verdict:
        if limiter.hit(item, *key):
            return Verdict(True, 0)
        return Verdict(False, self._retry_after(limiter, item, key))

    @staticmethod
    def _retry_after(limiter: SlidingWindowCounterRateLimiter, item: RateLimitItem, key: tuple[str, ...]) -> int:
        try:
            reset = limiter.get_window_stats(item, *key).reset_time
        except (RedisError, OSError):
            reset = time.time() + item.get_expiry()
        return max(1, math.ceil(reset - time.time()))

    def _shared_limiter(self) -> SlidingWindowCounterRateLimiter | None:
        if self._clients is None or time.monotonic() < self._bypass_until:
            return None
        with self._lock:
            if self._shared is None:
                with self._clients.use("limiter") as client:  # the only user allowed these counters
                    storage = RedisStorage("redis://", connection_pool=client.connection_pool, key_prefix="proctor-limits")
                self._shared = SlidingWindowCounterRateLimiter(storage)
            return self._shared

    def _fall_back(self, exc: BaseException) -> None:
        self.fallbacks += 1
        process_stats().record_event("limiter_fallbacks")  # the run's report counts them per node
        if time.monotonic() >= self._bypass_until:
            log.warning("request limiter: Valkey unreachable (%s); counting in memory on this node", type(exc).__name__)
        self._bypass_until = time.monotonic() + _BYPASS_SECONDS
