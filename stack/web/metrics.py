"""Prometheus text (0.0.4) for one web node, through ``prometheus_client``: what the exam
digest should have watched.

Requests and 5xx of this node, and, beyond CPU and failed-job counts, the signals
that showed the incident: queue depth and oldest-job age per lane (from Valkey,
through the no-retry ``probe`` client) and pending outcomes / outbox lag (from the
ledger), and this node's Valkey connects and connection errors by kind
(``proctor_valkey_connects_total``, ``proctor_valkey_errors_total{node,kind}``). A down Valkey or ledger is reported as ``*_up 0``, never as a failed scrape.

Request latency per route is a histogram, ``proctor_http_request_duration_seconds{node,route,
method}``, with the route's template (``/v1/attempts/{attempt_id}/finish``), never the raw path,
so a scan of made-up paths cannot grow the series. Each node owns its registry (a test builds
many apps in one process, and the default global one would refuse a second registration).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Iterator, Sequence

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from redis import Redis
from rq import Queue
from rq.job import Job
from rq.registry import FailedJobRegistry
from rq.utils import str_to_date
from sqlalchemy import Engine

from stack.connection_stats import ERROR_KINDS, process_stats
from stack.lanes.queues import LANE_OF_KIND, LANES
from stack.ledger import outbox
from stack.valkey_acl import REFUSED_JOBS_KEY
from stack.web.dispatch import ValkeyClients
from stack.web.lane_latency import Histograms, LaneLatency

__all__ = ["LANE_LATENCY_BOUNDS", "LaneSample", "LedgerSample", "RequestCounters", "lane_samples", "ledger_sample", "render_metrics"]

log = logging.getLogger(__name__)


class RequestCounters:
    """Thread-safe request and 5xx totals of this process (one uvicorn process = one node),
    and the latency histogram per route template."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.errors_5xx = 0
        self.registry = CollectorRegistry(auto_describe=True)
        self.latency = Histogram("proctor_http_request_duration_seconds", "Request latency by route template.",
                                 ["node", "route", "method"], registry=self.registry)
        self.lane_latency = LaneLatency(LANE_LATENCY_BOUNDS)  # from the ledger, read incrementally per scrape

    def record(self, status: int, node: str = "", route: str = "unmatched", method: str = "", seconds: float | None = None) -> None:
        with self._lock:
            self.requests += 1
            self.errors_5xx += status >= 500
        if seconds is not None:
            self.latency.labels(node, route, method).observe(seconds)

    def snapshot(self) -> tuple[int, int]:
        with self._lock:
            return self.requests, self.errors_5xx


@dataclass(frozen=True)
class LaneSample:
    depth: int
    oldest_age: float  # seconds the head job has waited; 0 when empty, NaN if its hash is gone
    failed: int = 0  # jobs in RQ's failed registry of the lane (kept FAILURE_TTL)


def lane_samples(client: Redis, now: float | None = None) -> dict[str, LaneSample]:
    """Depth and head-of-queue age per lane in two round trips; raises RedisError when down."""
    now = time.time() if now is None else now
    keys = {lane: Queue(lane, connection=client).key for lane in LANES}
    pipe = client.pipeline(transaction=False)
    for lane, key in keys.items():
        pipe.llen(key)
        pipe.lindex(key, 0)
        pipe.zcard(FailedJobRegistry(lane, connection=client).key)
    replies = pipe.execute()
    depths = dict(zip(LANES, replies[0::3]))
    heads = {lane: head for lane, head in zip(LANES, replies[1::3]) if head is not None}
    failed = dict(zip(LANES, replies[2::3]))
    pipe = client.pipeline(transaction=False)
    for head in heads.values():
        pipe.hget(Job.key_for(head.decode() if isinstance(head, bytes) else head), "enqueued_at")
    stamps = dict(zip(heads, pipe.execute()))
    return {lane: LaneSample(int(depths[lane]), _age(stamps, lane, now), int(failed[lane])) for lane in LANES}


def _age(stamps: dict[str, object], lane: str, now: float) -> float:
    if lane not in stamps:
        return 0.0
    raw = stamps[lane]
    if not raw:
        return math.nan  # the queue names a job whose hash is gone: age unknown, not zero
    return max(0.0, now - str_to_date(raw).timestamp())  # type: ignore[arg-type]


LANE_LATENCY_BOUNDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
"""Real seconds from a finish to its outcome: a merit card in well under a second, an AI narrative
behind a backlog in minutes (the seed's merit card waited 10-115 minutes in a shared lane)."""


@dataclass
class LedgerSample:
    up: bool
    pending_outcomes: int = 0
    outbox_lag: float = 0.0  # age of the oldest non-final outbox row
    latency: Histograms | None = None  # per kind, cumulative since the ledger began (stack/web/lane_latency.py)


def ledger_sample(engine: Engine, lane_latency: LaneLatency, now: float | None = None) -> LedgerSample:
    now = time.time() if now is None else now
    try:
        with engine.connect() as conn:
            count, oldest = outbox.unfinished_summary(conn)
            latency = lane_latency.update(conn)
    except Exception as exc:  # noqa: BLE001 - a scrape reports the ledger down, it does not fail
        log.warning("metrics: ledger unreadable: %s", exc)
        return LedgerSample(up=False)
    return LedgerSample(True, count, 0.0 if oldest is None else max(0.0, now - oldest), latency)


class _Families:
    """The scrape's metric families, built at scrape time (a collector with one collect())."""

    def __init__(self) -> None:
        self.families: list[Metric] = []

    def metric(self, name: str, kind: str, help_text: str, labels: Sequence[str],
               samples: Sequence[tuple[Sequence[str], float]]) -> None:
        family_type = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
        family = family_type(name.removesuffix("_total") if kind == "counter" else name, help_text, labels=list(labels))
        for values, value in samples:
            family.add_metric(list(values), value)
        self.families.append(family)

    def lane_latency(self, latency: Histograms) -> None:
        family = HistogramMetricFamily(
            "proctor_lane_latency_seconds", "Finish to outcome written, per lane and kind (from the ledger; "
            "every node reports the same rows: aggregate nodes with max).", labels=["lane", "kind"])
        for kind, (cumulative, count, total) in sorted(latency.items()):
            buckets = [(f"{bound:g}", n) for bound, n in zip(LANE_LATENCY_BOUNDS, cumulative)] + [("+Inf", count)]
            family.add_metric([LANE_OF_KIND.get(kind, kind), kind], buckets, total)
        self.families.append(family)

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def _valkey_lanes(clients: ValkeyClients) -> tuple[dict[str, LaneSample], int] | None:
    """The lanes' samples and the jobs workers refused (stack/lanes/allowlist.py); None when unreadable."""
    try:
        with clients.use("probe") as client:
            return lane_samples(client), int(client.get(REFUSED_JOBS_KEY) or 0)
    except Exception as exc:  # noqa: BLE001 - Valkey down must read as proctor_valkey_up 0
        log.warning("metrics: valkey unreadable: %s: %s", type(exc).__name__, exc)
        return None


def _alert_families(out: _Families, engine: Engine) -> None:
    """Issue #11's alerts and paused lanes (stack/lanes/ai/lanestate.py); skipped, not failed, if unreadable."""
    from stack.lanes.ai.lanestate import alert_samples

    try:
        with engine.connect() as conn:
            alerts, paused = alert_samples(conn)
    except Exception as exc:  # noqa: BLE001 - a scrape never fails on one section
        log.warning("metrics: alerts unreadable: %s", exc)
        return
    out.metric("proctor_alerts_total", "counter", "Alerts raised by a lane (credit exhausted, key revoked).",
               ["lane", "kind"], alerts)
    out.metric("proctor_lane_paused", "gauge", "1 while the lane is paused (no provider calls until an operator "
               "resumes).", ["lane"], paused)


def render_metrics(node: str, counters: RequestCounters, clients: ValkeyClients, engine: Engine, draining: bool,
                   limiter_fallbacks: int = 0) -> str:
    requests, errors = counters.snapshot()
    read = _valkey_lanes(clients)
    lanes = read[0] if read is not None else None
    ledger = ledger_sample(engine, counters.lane_latency)
    out = _Families()
    out.metric("proctor_http_requests_total", "counter", "HTTP requests served by this node.", ["node"], [((node,), requests)])
    out.metric("proctor_http_5xx_total", "counter", "HTTP 5xx responses of this node.", ["node"], [((node,), errors)])
    out.metric("proctor_draining", "gauge", "1 while this node drains (readyz 503).", ["node"], [((node,), int(draining))])
    out.metric("proctor_valkey_up", "gauge", "1 if the lanes could be read from Valkey.", ["node"], [((node,), int(lanes is not None))])
    # While this grows the node limits alone: each limit is in effect multiplied by the node count
    # (docs/security.md, "Web nodes, limits and exam rules").
    out.metric("proctor_limiter_fallbacks_total", "counter",
               "Request-limiter checks this node counted in its own memory because Valkey failed.", ["node"],
               [((node,), limiter_fallbacks)])
    if lanes is not None:
        out.metric("proctor_lane_depth", "gauge", "Jobs waiting in the lane's queue.", ["lane"],
                   [((lane,), s.depth) for lane, s in lanes.items()])
        out.metric("proctor_lane_oldest_job_age_seconds", "gauge", "Age of the job at the head of the lane.", ["lane"],
                   [((lane,), s.oldest_age) for lane, s in lanes.items()])
        out.metric("proctor_lane_failed_jobs", "gauge", "Jobs in the lane's RQ failed registry.", ["lane"],
                   [((lane,), s.failed) for lane, s in lanes.items()])
        out.metric("proctor_refused_jobs_total", "counter", "Jobs workers refused to run: a function outside the "
                   "allow-list or undecodable data (an injection attempt; stack/lanes/allowlist.py).", [],
                   [((), read[1])])
    conn = process_stats().snapshot()
    out.metric("proctor_valkey_connects_total", "counter", "Valkey connections this node opened (TCP + TLS + SETNAME).",
               ["node"], [((node,), conn["connects"])])
    out.metric("proctor_valkey_errors_total", "counter", "Valkey connection errors of this node, by kind.", ["node", "kind"],
               [((node, kind), conn["errors"].get(kind, 0)) for kind in ERROR_KINDS])
    out.metric("proctor_ledger_up", "gauge", "1 if the ledger could be read.", ["node"], [((node,), int(ledger.up))])
    if ledger.up:
        out.metric("proctor_pending_outcomes", "gauge", "Outbox rows not yet done or failed.", [], [((), ledger.pending_outcomes)])
        out.metric("proctor_outbox_lag_seconds", "gauge", "Age of the oldest non-final outbox row.", [], [((), ledger.outbox_lag)])
        out.lane_latency(ledger.latency or {})
        _alert_families(out, engine)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(out)  # type: ignore[arg-type] - any object with collect() is a collector
    return (generate_latest(registry) + generate_latest(counters.registry)).decode()
