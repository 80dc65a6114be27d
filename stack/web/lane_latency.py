"""``proctor_lane_latency_seconds`` kept incrementally: a scrape reads the rows done since the
previous scrape, not every outbox row.

Each web node keeps a cumulative histogram per kind (finish -> outcome, ``done_at -
created_at``) and a high-water mark, the latest ``done_at`` it has counted. A scrape adds the
done rows with ``done_at >= high_water - overlap`` (``>=``, ``ix_outbox_done_at``), skipping those it
already counted (their operation ids are kept for the overlap only). Done is terminal
(``outbox.mark_done`` never moves a row out of it), so a row, once counted, never changes bucket
and the histogram never decreases.

Why the overlap: ``done_at`` is read from the clock inside the job's transaction, which
commits a moment later. On SQLite, writers are serialized (BEGIN IMMEDIATE, taken before
the clock read), so rows become visible in ``done_at`` order and a 1 s overlap only guards
a small clock step. On PostgreSQL two jobs commit in either order, and a row that commits
after a scrape saw a later ``done_at`` is still found if it commits less than 60 s after its
clock read. A row committing later than that is missed by a node that already scraped past
it (a transaction held open for a minute after marking its row done); that node's restart
counts it again. Each scrape re-reads the rows done within the overlap (and skips them).

Across a restart, the node's first scrape counts every done row (one full read, streamed),
so the series continues from the ledger's totals instead of falling to zero. Every node
counts the same ledger rows, so nodes report the same histogram up to scrape timing:
aggregate across nodes with ``max``, never ``sum``.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

from sqlalchemy import Connection

from stack.ledger import outbox

__all__ = ["OVERLAP_SECONDS", "LaneLatency", "Histograms"]

OVERLAP_SECONDS = {"sqlite": 1.0, "postgresql": 60.0}
"""Seconds re-read below the high-water mark, per ledger dialect (60 s for any other)."""

Histograms = dict[str, tuple[list[int], int, float]]
"""Per kind: (cumulative count at or below each bound, count, sum of seconds), as outbox.latency_histogram."""


@dataclass
class _Kind:
    per_bucket: list[int]  # rows in (bound[i-1], bound[i]]; the last slot is above every bound
    count: int = 0
    total: float = 0.0

    def add(self, index: int, seconds: float) -> None:
        self.per_bucket[index] += 1
        self.count += 1
        self.total += seconds


@dataclass
class _Delta:
    """What one scrape found; merged only once the read finished, so a failed read changes nothing."""

    kinds: dict[str, _Kind] = field(default_factory=dict)
    seen: dict[str, float] = field(default_factory=dict)  # operation_id -> done_at
    high_water: float | None = None


class LaneLatency:
    """One node's lane-latency histograms, updated from the ledger at each scrape (thread-safe)."""

    def __init__(self, bounds: tuple[float, ...], overlap: float | None = None) -> None:
        """``overlap`` None: the ledger dialect's (OVERLAP_SECONDS), learnt at the first update."""
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError(f"bounds must be strictly increasing and not empty, not {bounds!r}")
        if overlap is not None and overlap < 0:
            raise ValueError(f"overlap must be >= 0 seconds, not {overlap!r}")
        self.bounds, self.overlap = bounds, overlap
        self._lock = threading.Lock()  # two scrapes at once would both count the same new rows
        self._kinds: dict[str, _Kind] = {}
        self._recent: dict[str, float] = {}  # counted rows with done_at within the overlap
        self._high_water: float | None = None
        self.rows_read = 0  # rows the scrapes fetched, for the benchmark and the tests

    def update(self, conn: Connection) -> Histograms:
        """Count the rows done since the last update; return every kind's cumulative histogram."""
        with self._lock:
            if self.overlap is None:
                self.overlap = OVERLAP_SECONDS.get(conn.dialect.name, 60.0)
            self._merge(self._read(conn, self.overlap))
            return self._snapshot()

    def _read(self, conn: Connection, overlap: float) -> _Delta:
        delta, prune_at = _Delta(), 4096
        since = None if self._high_water is None else self._high_water - overlap
        for operation_id, kind, created_at, done_at in outbox.done_since(conn, since):
            self.rows_read += 1
            if operation_id in self._recent or operation_id in delta.seen:
                continue
            seconds = done_at - created_at
            slot = delta.kinds.setdefault(kind, _Kind([0] * (len(self.bounds) + 1)))
            slot.add(bisect.bisect_left(self.bounds, seconds), seconds)  # le: a row at a bound is in it
            delta.seen[operation_id] = done_at
            delta.high_water = done_at if delta.high_water is None else max(delta.high_water, done_at)
            if len(delta.seen) > prune_at:  # a first full read keeps only what the overlap needs
                self._prune(delta.seen, delta.high_water, overlap)
                prune_at = max(4096, 2 * len(delta.seen))  # amortized: never a prune per row
        return delta

    def _merge(self, delta: _Delta) -> None:
        for kind, found in delta.kinds.items():
            slot = self._kinds.setdefault(kind, _Kind([0] * (len(self.bounds) + 1)))
            slot.per_bucket = [a + b for a, b in zip(slot.per_bucket, found.per_bucket)]
            slot.count += found.count
            slot.total += found.total
        self._recent.update(delta.seen)
        if delta.high_water is not None:
            self._high_water = delta.high_water if self._high_water is None else max(self._high_water, delta.high_water)
        if self._high_water is not None:
            self._prune(self._recent, self._high_water, self.overlap or 0.0)

    @staticmethod
    def _prune(seen: dict[str, float], high_water: float, overlap: float) -> None:
        """Forget ids below the next read's floor: those rows are never read again."""
        floor = high_water - overlap
        for operation_id in [op for op, done_at in seen.items() if done_at < floor]:
            del seen[operation_id]

    def _snapshot(self) -> Histograms:
        out: Histograms = {}
        for kind, slot in self._kinds.items():
            running, cumulative = 0, []
            for n in slot.per_bucket[:-1]:
                running += n
                cumulative.append(running)
            out[kind] = (cumulative, slot.count, slot.total)
        return out
