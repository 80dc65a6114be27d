"""Best-effort hand-off of a finished attempt's outbox rows to the lanes.

The outbox row, not the queue, is the promise: finish has already committed it as
``pending``. Here we try to enqueue it right away so the merit card does not wait
for the relay's next poll. Any Valkey error is logged and swallowed; the relay
enqueues whatever is still pending. This runs on a small thread pool after the
reply, so a slow or paused Valkey never holds a request (or the request threads).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterator, Protocol

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy import Engine

from stack.config import Settings
from stack.valkey_client import valkey_client
from stack.ledger import outbox
from stack.lanes.enqueue import enqueue_operation

__all__ = ["Dispatcher", "ValkeyClients", "ValkeyDispatcher", "dispatch_pending", "enqueue_row"]

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 64
"""Finishes waiting for dispatch; beyond this we skip (the relay catches up) instead of piling up."""


class Dispatcher(Protocol):
    def submit(self, attempt_id: str) -> None: ...

    def close(self) -> None: ...


class ValkeyClients:
    """One lazily created client per purpose, shared by the node's threads. (The
    ``valkey_fresh_connections`` negative control lives in ``valkey_client`` alone.)"""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._clients: dict[str, Redis] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def use(self, purpose: str) -> Iterator[Redis]:
        with self._lock:
            client = self._clients.get(purpose)
            if client is None:
                client = self._clients[purpose] = valkey_client(self._settings, purpose)
        yield client

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()


def enqueue_row(client: Redis, settings: Settings, row: dict) -> tuple[str, int]:
    """Enqueue one pending outbox row as its next RQ job; returns (job id, enqueue number).

    ``stack.lanes.enqueue.enqueue_operation`` is the one place job options live (no ``ttl``,
    ``unique=True``, job timeout, failure TTL), so a job sent from here and one sent
    by the relay are the same job: whichever arrives second is a no-op.
    """
    number = int(row["attempts"]) + 1
    return enqueue_operation(client, settings, row["kind"], row["operation_id"], number), number


def dispatch_pending(engine: Engine, client: Redis, settings: Settings, attempt_id: str) -> int:
    """Enqueue the attempt's pending rows and mark them; returns how many moved. Never raises."""
    moved = 0
    try:
        with engine.connect() as conn:
            rows = outbox.pending_for_attempt(conn, attempt_id)
        for row in rows:
            job, number = enqueue_row(client, settings, row)
            with engine.begin() as conn:
                moved += outbox.mark_enqueued(conn, row["operation_id"], number, job)
    except RedisError as exc:
        log.warning("dispatch of %s left for the relay: valkey error %s: %s", attempt_id, type(exc).__name__, exc)
    except Exception:  # best effort by contract; the row stays pending
        log.exception("dispatch of %s left for the relay", attempt_id)
    return moved


class ValkeyDispatcher:
    """Runs ``dispatch_pending`` on two background threads; ``submit`` never blocks or raises."""

    def __init__(self, settings: Settings, engine: Engine, clients: ValkeyClients) -> None:
        self._settings = settings
        self._engine = engine
        self._clients = clients
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"dispatch-{settings.node_name}")
        self._slots = threading.BoundedSemaphore(MAX_IN_FLIGHT)
        self._futures: set[Future[int]] = set()
        self._lock = threading.Lock()

    def _run(self, attempt_id: str) -> int:
        try:
            with self._clients.use("queue") as client:
                return dispatch_pending(self._engine, client, self._settings, attempt_id)
        except Exception:  # e.g. a bad URL while building the client
            log.exception("dispatch of %s left for the relay", attempt_id)
            return 0
        finally:
            self._slots.release()

    def submit(self, attempt_id: str) -> None:
        if not self._slots.acquire(blocking=False):
            log.warning("dispatch of %s skipped: %d already waiting; the relay will enqueue it", attempt_id, MAX_IN_FLIGHT)
            return
        try:
            future = self._pool.submit(self._run, attempt_id)
        except RuntimeError:  # pool shut down: we are stopping, the relay takes over
            self._slots.release()
            return
        with self._lock:
            self._futures.add(future)
        future.add_done_callback(self._forget)

    def _forget(self, future: Future[int]) -> None:
        with self._lock:
            self._futures.discard(future)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait for submitted dispatches (tests, shutdown); True if all finished in time."""
        with self._lock:
            pending = list(self._futures)
        for future in pending:
            try:
                future.result(timeout=timeout)
            except Exception:  # noqa: BLE001 - _run never raises; a timeout means "not idle"
                return False
        return True

    def close(self) -> None:
        # Queued-but-unstarted dispatches are dropped: their rows stay pending for the relay.
        self._pool.shutdown(wait=True, cancel_futures=True)
