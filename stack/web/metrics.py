"""Prometheus text (0.0.4) for one web node: what the exam digest should have watched.

Requests and 5xx of this node, and, beyond CPU and failed-job counts, the signals
that showed the incident: queue depth and oldest-job age per lane (from Valkey,
through the no-retry ``probe`` client) and pending outcomes / outbox lag (from the
ledger), and this node's Valkey connects and connection errors by kind
(``proctor_valkey_connects_total``, ``proctor_valkey_errors_total{node,kind}``). A down Valkey or ledger is reported as ``*_up 0``, never as a failed scrape.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field

from redis import Redis
from rq import Queue
from rq.job import Job
from rq.utils import str_to_date
from sqlalchemy import Engine

from stack.connection_stats import ERROR_KINDS, process_stats
from stack.lanes.queues import LANES
from stack.ledger import outbox
from stack.web.dispatch import ValkeyClients

__all__ = ["LaneSample", "LedgerSample", "RequestCounters", "lane_samples", "ledger_sample", "render_metrics"]

log = logging.getLogger(__name__)


class RequestCounters:
    """Thread-safe request and 5xx totals of this process (one uvicorn process = one node)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.errors_5xx = 0

    def record(self, status: int) -> None:
        with self._lock:
            self.requests += 1
            self.errors_5xx += status >= 500

    def snapshot(self) -> tuple[int, int]:
        with self._lock:
            return self.requests, self.errors_5xx


@dataclass(frozen=True)
class LaneSample:
    depth: int
    oldest_age: float  # seconds the head job has waited; 0 when empty, NaN if its hash is gone


def lane_samples(client: Redis, now: float | None = None) -> dict[str, LaneSample]:
    """Depth and head-of-queue age per lane in two round trips; raises RedisError when down."""
    now = time.time() if now is None else now
    keys = {lane: Queue(lane, connection=client).key for lane in LANES}
    pipe = client.pipeline(transaction=False)
    for key in keys.values():
        pipe.llen(key)
        pipe.lindex(key, 0)
    replies = pipe.execute()
    depths = dict(zip(LANES, replies[0::2]))
    heads = {lane: head for lane, head in zip(LANES, replies[1::2]) if head is not None}
    pipe = client.pipeline(transaction=False)
    for head in heads.values():
        pipe.hget(Job.key_for(head.decode() if isinstance(head, bytes) else head), "enqueued_at")
    stamps = dict(zip(heads, pipe.execute()))
    return {lane: LaneSample(int(depths[lane]), _age(stamps, lane, now)) for lane in LANES}


def _age(stamps: dict[str, object], lane: str, now: float) -> float:
    if lane not in stamps:
        return 0.0
    raw = stamps[lane]
    if not raw:
        return math.nan  # the queue names a job whose hash is gone: age unknown, not zero
    return max(0.0, now - str_to_date(raw).timestamp())  # type: ignore[arg-type]


@dataclass
class LedgerSample:
    up: bool
    pending_outcomes: int = 0
    outbox_lag: float = 0.0  # age of the oldest non-final outbox row


def ledger_sample(engine: Engine, now: float | None = None) -> LedgerSample:
    now = time.time() if now is None else now
    try:
        with engine.connect() as conn:
            count, oldest = outbox.unfinished_summary(conn)
    except Exception as exc:  # noqa: BLE001 - a scrape reports the ledger down, it does not fail
        log.warning("metrics: ledger unreadable: %s", exc)
        return LedgerSample(up=False)
    return LedgerSample(True, count, 0.0 if oldest is None else max(0.0, now - oldest))


@dataclass
class _Text:
    lines: list[str] = field(default_factory=list)

    def metric(self, name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        self.lines += [f"{name}{labels} {_number(value)}" for labels, value in samples]


def _number(value: float) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return repr(value) if isinstance(value, float) else str(value)


def _valkey_lanes(clients: ValkeyClients) -> dict[str, LaneSample] | None:
    try:
        with clients.use("probe") as client:
            return lane_samples(client)
    except Exception as exc:  # noqa: BLE001 - Valkey down must read as proctor_valkey_up 0
        log.warning("metrics: valkey unreadable: %s: %s", type(exc).__name__, exc)
        return None


def _alert_lines(engine: Engine) -> list[str]:
    """Issue #11's alerts and paused lanes (stack/ailane/lanestate.py); skipped, not failed, if unreadable."""
    from stack.ailane.lanestate import alert_metric_lines

    try:
        with engine.connect() as conn:
            return alert_metric_lines(conn)
    except Exception as exc:  # noqa: BLE001 - a scrape never fails on one section
        log.warning("metrics: alerts unreadable: %s", exc)
        return []


def render_metrics(node: str, counters: RequestCounters, clients: ValkeyClients, engine: Engine, draining: bool) -> str:
    requests, errors = counters.snapshot()
    lanes = _valkey_lanes(clients)
    ledger = ledger_sample(engine)
    node_label = f'{{node="{node}"}}'
    text = _Text()
    text.metric("proctor_http_requests_total", "counter", "HTTP requests served by this node.", [(node_label, requests)])
    text.metric("proctor_http_5xx_total", "counter", "HTTP 5xx responses of this node.", [(node_label, errors)])
    text.metric("proctor_draining", "gauge", "1 while this node drains (readyz 503).", [(node_label, int(draining))])
    text.metric("proctor_valkey_up", "gauge", "1 if the lanes could be read from Valkey.", [(node_label, int(lanes is not None))])
    if lanes is not None:
        text.metric("proctor_lane_depth", "gauge", "Jobs waiting in the lane's queue.",
                    [(f'{{lane="{lane}"}}', s.depth) for lane, s in lanes.items()])
        text.metric("proctor_lane_oldest_job_age_seconds", "gauge", "Age of the job at the head of the lane.",
                    [(f'{{lane="{lane}"}}', s.oldest_age) for lane, s in lanes.items()])
    conn = process_stats().snapshot()
    text.metric("proctor_valkey_connects_total", "counter", "Valkey connections this node opened (TCP + TLS + SETNAME).",
                [(node_label, conn["connects"])])
    text.metric("proctor_valkey_errors_total", "counter", "Valkey connection errors of this node, by kind.",
                [(f'{{node="{node}",kind="{kind}"}}', conn["errors"].get(kind, 0)) for kind in ERROR_KINDS])
    text.metric("proctor_ledger_up", "gauge", "1 if the ledger could be read.", [(node_label, int(ledger.up))])
    if ledger.up:
        text.metric("proctor_pending_outcomes", "gauge", "Outbox rows not yet done or failed.",
                    [("", ledger.pending_outcomes)])
        text.metric("proctor_outbox_lag_seconds", "gauge", "Age of the oldest non-final outbox row.",
                    [("", ledger.outbox_lag)])
        text.lines += _alert_lines(engine)
    return "\n".join(text.lines) + "\n"
