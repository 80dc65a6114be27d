"""Samples the stack's /metrics while a run goes on: queue depth and oldest-job age
per lane, pending outcomes, outbox lag — recorded as ``sample`` ops in the history
so plots and the latency checker can show what the queues did during faults. Each sample
also carries ``pace``, the seconds of the machine-pace probe (chaos/observe/pace.py), by
which the latency checker scales client SLOs.

/metrics is served on the web nodes' admin listeners only (never through HAProxy), with the
admin token, so the monitor takes them in turn and sends the run's token; a run whose monitor collected no sample fails (``NoSamples``):
its plots and latency verdicts would otherwise rest on nothing."""

from __future__ import annotations

import asyncio
import itertools
import re
from typing import Any, Callable, Mapping

import httpx

from chaos.history import History
from stack.headers import ADMIN_TOKEN_HEADER
from chaos.observe.pace import probe

__all__ = ["NoSamples", "admin_urls", "parse_prometheus", "lane_sample", "require_samples", "run_monitor"]


class NoSamples(RuntimeError):
    """The monitor ran for the whole load and read /metrics not once."""


def admin_urls(urls: Mapping[str, str]) -> list[str]:
    """Every web node's admin listener (``web_N_admin``), or the one ``admin`` a deployment
    publishes (compose: web-1's)."""
    nodes = [url for name, url in sorted(urls.items()) if name.startswith("web_") and name.endswith("_admin")]
    return nodes or ([urls["admin"]] if "admin" in urls else [])


def require_samples(collected: int, sources: list[str]) -> None:
    if collected == 0:
        raise NoSamples(f"the monitor collected 0 samples of /metrics from {sources or 'no admin listener'}: "
                        "the run has no queue evidence, so it is not judged")

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)')
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            continue
        name, labels, value = match.groups()
        try:
            samples.append((name, dict(_LABEL.findall(labels or "")), float(value)))
        except ValueError:
            continue
    return samples


METRIC_DEPTH = "proctor_lane_depth"
METRIC_OLDEST = "proctor_lane_oldest_job_age_seconds"
METRIC_PENDING = "proctor_pending_outcomes"
METRIC_OUTBOX_LAG = "proctor_outbox_lag_seconds"
METRIC_FAILED = "proctor_lane_failed_jobs"
METRIC_REQUESTS = "proctor_http_requests_total"
METRIC_5XX = "proctor_http_5xx_total"


def lane_sample(text: str) -> dict[str, Any]:
    lanes: dict[str, dict[str, float]] = {}
    sample: dict[str, Any] = {"lanes": lanes}
    for name, labels, value in parse_prometheus(text):
        if name == METRIC_DEPTH and "lane" in labels:
            lanes.setdefault(labels["lane"], {})["depth"] = value
        elif name == METRIC_OLDEST and "lane" in labels:
            lanes.setdefault(labels["lane"], {})["oldest_age"] = value
        elif name == METRIC_PENDING:
            sample["pending_outcomes"] = sample.get("pending_outcomes", 0) + value
        elif name == METRIC_OUTBOX_LAG:
            sample["outbox_lag"] = value
        elif name == METRIC_FAILED and "lane" in labels:
            lanes.setdefault(labels["lane"], {})["failed"] = value
        elif name in (METRIC_REQUESTS, METRIC_5XX):  # per node: the node whose admin listener was read
            sample["requests" if name == METRIC_REQUESTS else "errors_5xx"] = value
    return sample


async def run_monitor(sources: Callable[[], list[str]], history: History, interval: float,
                      stop: asyncio.Event, admin_token: str) -> int:
    """Sample until ``stop``, one admin listener after another (``sources()`` is read again each
    time: a scaled pool adds nodes), with the run's admin token; returns how many samples were recorded."""
    collected = 0
    turn = itertools.count()
    async with httpx.AsyncClient(timeout=2.0, trust_env=False, headers={ADMIN_TOKEN_HEADER: admin_token}) as http:
        while not stop.is_set():
            urls = sources()
            try:
                if urls:
                    response = await http.get(f"{urls[next(turn) % len(urls)].rstrip('/')}/metrics")
                    if response.status_code == 200:
                        history.sample({**lane_sample(response.text), "pace": round(probe(), 6)})
                        collected += 1
            except httpx.HTTPError:
                pass  # a failed sample is a gap in the plot, not a harness error
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
            except TimeoutError:
                pass
    return collected
