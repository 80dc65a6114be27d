"""The capacity lock: one short lock in Valkey that a scale and an exam-window write both hold.

``POST /admin/scale`` reads the open exam windows and then waits for the deployment's
executor, which may take minutes (draining nodes). Without a lock a ``PUT
/admin/exams/{code}/window`` that opens a window in between is never seen, and the
scale-in proceeds under an open exam. So a scale holds this lock from before its window
check until the executor's answer, and a window write holds it for its write: whichever
comes second is refused (409, naming the holder), never both accepted. Every web node
talks to the same Valkey (TLS, ``stack.valkey_client``), so the lock spans nodes.

- Taken with ``SET key value NX PX ttl``: the TTL (longer than the scale's executor
  timeouts) frees a lock whose node crashed while holding it.
- The value carries a random token; release and update are Lua scripts that compare the
  whole value first, so a holder whose lock already expired never frees a successor's.
- Valkey unreachable: the lock cannot be taken, and the caller refuses (fail closed).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

from redis import Redis
from redis.exceptions import RedisError

from stack.web.dispatch import ValkeyClients

__all__ = ["CAPACITY_LOCK_KEY", "CapacityLock", "Lease", "LockHeld", "LockUnavailable", "describe_holder"]

CAPACITY_LOCK_KEY = "proctor:capacity-lock"

_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
_REPLACE = ("if redis.call('get', KEYS[1]) == ARGV[1] then "
            "return redis.call('set', KEYS[1], ARGV[2], 'KEEPTTL') else return nil end")


class LockHeld(Exception):
    """Someone else holds the lock: ``holder`` is what they stored (no token), ``expires_in`` its TTL left."""

    def __init__(self, holder: dict[str, Any] | None, expires_in: float | None) -> None:
        self.holder, self.expires_in = holder, expires_in
        super().__init__(f"capacity lock held by {describe_holder(holder)}")


class LockUnavailable(Exception):
    """Valkey could not be asked: the lock can neither be taken nor be known free."""


def _utc(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def describe_holder(holder: dict[str, Any] | None) -> str:
    """``scale web 3->1 by oncall on web_2 since 2026-11-30 09:12:03Z`` (or a window write)."""
    if not holder:
        return "an unknown holder (the lock expired or was released meanwhile)"
    if holder.get("what") == "scale":
        what = f"scale {holder.get('pool')} {holder.get('from', '?')}->{holder.get('to')}"
    else:
        what = f"window write of {holder.get('exam_code')}"
    return f"{what} by {holder.get('actor')} on {holder.get('node')} since {_utc(float(holder.get('since', 0)))}"


class Lease:
    """One holding of the lock; ``release`` and ``update`` act only while it is still ours."""

    def __init__(self, lock: "CapacityLock", value: str, holder: dict[str, Any]) -> None:
        self._owner, self._value, self.holder = lock, value, holder

    def update(self, **fields: Any) -> bool:
        """Add what became known under the lock (a scale's ``from``); False if no longer ours."""
        holder = {**self.holder, **fields}
        value = json.dumps({**holder, "token": json.loads(self._value)["token"]}, sort_keys=True)
        with self._owner.client() as client:
            replaced = client.eval(_REPLACE, 1, self._owner.key, self._value, value)
        if replaced is None:
            return False
        self._value, self.holder = value, holder
        return True

    def release(self) -> bool:
        """Free the lock if it is still ours; False if it had expired (the TTL freed it)."""
        with self._owner.client() as client:
            return bool(client.eval(_RELEASE, 1, self._owner.key, self._value))


class CapacityLock:
    def __init__(self, clients: ValkeyClients, ttl: float, node: str, key: str = CAPACITY_LOCK_KEY,
                 clock: Callable[[], float] = time.time) -> None:
        if ttl <= 0:
            raise ValueError(f"capacity lock ttl must be > 0 seconds, not {ttl!r}")
        self.clients, self.ttl, self.node, self.key, self.clock = clients, ttl, node, key, clock

    @contextlib.contextmanager
    def client(self) -> Iterator[Redis]:
        try:
            with self.clients.use("lock") as client:
                yield client
        except RedisError as exc:
            raise LockUnavailable(f"Valkey: {type(exc).__name__}: {exc}") from exc

    def acquire(self, **holder: Any) -> Lease:
        """Take the lock for ``holder`` (what, actor, pool/to or exam_code); LockHeld if taken."""
        holder = {**holder, "node": self.node, "since": self.clock()}
        value = json.dumps({**holder, "token": secrets.token_hex(16)}, sort_keys=True)
        with self.client() as client:
            if client.set(self.key, value, nx=True, px=max(1, int(self.ttl * 1000))):
                return Lease(self, value, holder)
            current, pttl = client.get(self.key), client.pttl(self.key)
        raise LockHeld(_public(current), pttl / 1000 if pttl and pttl > 0 else None)

    def holder(self) -> dict[str, Any] | None:
        """Who holds the lock now (None: free); raises LockUnavailable."""
        with self.client() as client:
            return _public(client.get(self.key))


def _public(raw: bytes | str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        stored = json.loads(raw)
    except ValueError:
        return {"what": "unknown", "raw": str(raw)[:200]}
    stored.pop("token", None)
    return stored  # type: ignore[no-any-return]
