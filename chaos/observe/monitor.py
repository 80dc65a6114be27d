"""Samples the stack's /metrics while a run goes on: queue depth and oldest-job age
per lane, pending outcomes, outbox lag — recorded as ``sample`` ops in the history
so plots and the latency checker can show what the queues did during faults."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx

from chaos.history import History

__all__ = ["parse_prometheus", "lane_sample", "run_monitor"]

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
        elif name in (METRIC_REQUESTS, METRIC_5XX):  # per node: the node HAProxy sent this scrape to
            sample["requests" if name == METRIC_REQUESTS else "errors_5xx"] = value
    return sample


async def run_monitor(api_url: str, history: History, interval: float, stop: asyncio.Event) -> None:
    async with httpx.AsyncClient(base_url=api_url, timeout=2.0) as http:
        while not stop.is_set():
            try:
                response = await http.get("/metrics")
                if response.status_code == 200:
                    history.sample(lane_sample(response.text))
            except httpx.HTTPError:
                pass  # a failed sample is a gap in the plot, not a harness error
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
            except TimeoutError:
                pass
