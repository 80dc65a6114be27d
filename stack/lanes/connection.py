"""Valkey clients: TLS, pooled, explicit timeouts and an explicit retry policy.

redis-py 8 retries every command 10 times by default, re-sending non-idempotent
writes after a timeout (an INCR can run twice). We choose per purpose instead:
- ``queue``: RQ enqueue/dequeue. Job ids are unique per outbox attempt, so a
  re-sent enqueue cannot create a second job for the same attempt: a few retries.
- ``probe``: metrics and health reads; no retries, short timeouts, never blocks a request.
"""

from __future__ import annotations

from redis import Redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from stack.config import Settings

__all__ = ["valkey_client", "CONNECT_TIMEOUT", "SOCKET_TIMEOUT"]

CONNECT_TIMEOUT = 2.0
SOCKET_TIMEOUT = 5.0

_RETRIES = {"queue": 3, "probe": 0}


def valkey_client(settings: Settings, purpose: str = "queue") -> Redis:
    if purpose not in _RETRIES:
        raise ValueError(f"purpose must be one of {sorted(_RETRIES)}, not {purpose!r}")
    kwargs: dict[str, object] = {
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "socket_timeout": SOCKET_TIMEOUT if purpose == "queue" else 1.0,
        "socket_keepalive": True,
        "health_check_interval": 10,
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.02), _RETRIES[purpose]),
        "max_connections": 50,
    }
    if settings.valkey_url.startswith("rediss://"):
        if settings.valkey_ca:
            kwargs["ssl_ca_certs"] = settings.valkey_ca
        kwargs["ssl_cert_reqs"] = "required"
    return Redis.from_url(settings.valkey_url, **kwargs)
