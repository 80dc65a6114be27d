"""HTTP header names a server and its callers share, defined once. Standard library only:
a worker imports this without FastAPI."""

__all__ = ["ADMIN_TOKEN_HEADER", "RECEIVED_AT_HEADER"]

RECEIVED_AT_HEADER = "X-Received-At"
"""The fake provider's extension: when it received the call (epoch seconds, the ``started_at``
its own limit and the effect ledger count from), on every answer after the arrival, refusals
included. A caller's limiter dates its slot from it (stack/lanes/ai/limiter.py ``release``)."""

ADMIN_TOKEN_HEADER = "X-Admin-Token"
"""The run's admin token, checked by stack.admin_auth and sent by stack.admin_client."""
