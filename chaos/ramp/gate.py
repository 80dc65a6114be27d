"""The ramp's load gate and its error split, computed from the merged history.

Everything here is measured from the history (one completion per request, with its
``wall`` time, latency, status and ``X-Proctor-Node``), so it is the same in local and
distributed Locust runs and can be recomputed offline:

- per step, the achieved rate: completions whose wall time falls in the step (after its
  settle seconds) divided by that window: a request-count delta, never Locust's lagging
  ``current_rps``. Its ratio is taken against the **offered** rate: in the open model the
  requests whose intended start fell in that window (Poisson arrivals offer 25 req/s ± its
  noise: 350 of 375 in 15 s is the schedule's draw, not a stack falling behind; a stack that
  stalls completes fewer than were offered in the window, whatever was drawn), in the closed
  model, or when no request carries an intended start, the step's target;
- p50/p99 latency and the failure ratio (completions that were not ``ok``). Two latencies in
  the open model: ``latency`` from the actual send (service time) and ``corrected_latency``
  from the intended start (the arrival schedule's, so a stall's queued arrivals count); the
  gate judges the corrected one. A closed-model or older history has only ``latency``;

- errors by layer: ``load_balancer`` (a 5xx without ``X-Proctor-Node``: HAProxy's own
  503 queue timeout, 502, 504), ``application`` (a 5xx a node answered, by node),
  ``client`` (no response: timeout, reset, refused) and ``rejected`` (4xx, by status).
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Sequence

from chaos.history import Op, client_ops

__all__ = ["completions", "corrected_latency", "error_layer", "error_split", "gate", "intended_start", "is_open",
           "latency_quantiles", "offered_rate", "read_ticks", "step_rates", "time_series"]


def read_ticks(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "ramp_ticks.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def completions(history: Sequence[Op]) -> list[Op]:
    return [op for op in client_ops(history) if op.type != "invoke"]


def error_layer(op: Op) -> str | None:
    """Which layer a completion's error belongs to; None for an ok."""
    if op.type == "ok":
        return None
    if op.status is None:
        return "client"
    if op.status >= 500:
        return "application" if op.node else "load_balancer"
    return "rejected"


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def corrected_latency(op: Op) -> float | None:
    """Seconds from the intended start (open model); the service time when there was none."""
    value = op.extra.get("corrected_latency")
    return float(value) if isinstance(value, (int, float)) else op.latency


def is_open(config: dict[str, Any]) -> bool:
    return (config.get("arrivals") or {}).get("mode") == "open"


def latency_quantiles(ops: Sequence[Op], corrected: bool = False) -> dict[str, float | None]:
    values = [v for v in (corrected_latency(op) if corrected else op.latency for op in ops) if v is not None]
    return {"p50": _quantile(values, 0.50), "p99": _quantile(values, 0.99), "max": max(values, default=None)}


def _origin(ticks: list[dict[str, Any]]) -> float | None:
    """Wall time the shape's clock started (its first tick, less the elapsed it reported)."""
    return ticks[0]["wall"] - ticks[0]["elapsed"] if ticks else None


def intended_start(op: Op) -> float | None:
    """Epoch seconds of the request's scheduled start (open model), else None."""
    value = op.extra.get("intended")
    return float(value) if isinstance(value, (int, float)) else None


def offered_rate(step: dict[str, Any], done: Sequence[Op], start: float, end: float) -> float:
    """Requests per second offered in [start, end): intended starts there (open model), else the target.
    An arrival the generator dropped has no op and is not offered; ``generator_kept_up`` fails
    such a run on its own (dropped must be 0)."""
    intended = [t for t in (intended_start(op) for op in done) if t is not None]
    if not intended:
        return float(step["rate"])
    return sum(1 for t in intended if start <= t < end) / (end - start)


def step_rates(config: dict[str, Any], ticks: list[dict[str, Any]], done: Sequence[Op]) -> list[dict[str, Any]]:
    """Achieved req/s per step, from completion counts in the step's settled window, against the offered rate."""
    origin = _origin(ticks)
    if origin is None:
        return []
    settle = float(config.get("settle", 0.0))
    walls = sorted(float(op.extra["wall"]) for op in done)
    rows = []
    for step in config["plan"]["schedule"]:
        start = origin + step["start"] + min(settle, (step["end"] - step["start"]) / 2)
        end = origin + step["end"]
        count = sum(1 for wall in walls if start <= wall < end)
        achieved = count / (end - start)
        offered = offered_rate(step, done, start, end) if is_open(config) else float(step["rate"])
        in_step = [op for op in done if origin + step["start"] <= float(op.extra["wall"]) < end]
        users = (config.get("arrivals") or {}).get("slots") if is_open(config) else step["users"]
        rows.append({"step": step["index"], "target": step["rate"], "users": users, "window": end - start,
                     "completed": count, "offered": round(offered, 2), "achieved": round(achieved, 2),
                     "ratio": round(achieved / offered, 3) if offered > 0 else 0.0,
                     "p99_service": latency_quantiles(in_step)["p99"],
                     "p99_corrected": latency_quantiles(in_step, corrected=True)["p99"] if is_open(config) else None})
    return rows


def gate(config: dict[str, Any], steps: list[dict[str, Any]], done: Sequence[Op]) -> list[dict[str, Any]]:
    """Each load criterion with its limit, what was measured and whether it held."""
    limits = config["gate"]
    p99 = latency_quantiles(done, corrected=is_open(config))["p99"]
    failed = sum(1 for op in done if op.type != "ok")
    ratio = failed / len(done) if done else None
    worst = min(steps, key=lambda s: s["ratio"]) if steps else None
    return [
        {"name": "p99_seconds", "limit": limits["p99"], "measured": p99,
         "latency": "corrected (from the intended start)" if is_open(config) else "service (from the send)",
         "passed": p99 is not None and p99 <= limits["p99"]},
        {"name": "failure_ratio", "limit": limits["max_failure_ratio"], "measured": ratio,
         "passed": ratio is not None and ratio <= limits["max_failure_ratio"]},
        {"name": "achieved_rate_ratio", "limit": limits["min_rate_ratio"], "measured": worst and worst["ratio"],
         "step": worst and worst["step"], "passed": worst is not None and worst["ratio"] >= limits["min_rate_ratio"]},
    ]


def error_split(done: Sequence[Op]) -> dict[str, Any]:
    layers: Counter[str] = Counter()
    by_node: dict[str, Counter[str]] = defaultdict(Counter)
    rejected: Counter[str] = Counter()
    client: Counter[str] = Counter()
    for op in done:
        layer = error_layer(op)
        if layer is None:
            continue
        layers[layer] += 1
        if layer == "application":
            by_node[str(op.node)][str(op.status)] += 1
        elif layer == "load_balancer":
            by_node["(load balancer)"][str(op.status)] += 1
        elif layer == "rejected":
            rejected[f"{op.f} {op.status}"] += 1
        else:
            client[(op.error or "?").split(":", 1)[0]] += 1
    return {"layers": {name: layers.get(name, 0) for name in ("load_balancer", "application", "client", "rejected")},
            "by_node": {node: dict(c) for node, c in sorted(by_node.items())},
            "rejected": dict(rejected), "client": dict(client),
            # sent twice: the reused connection closed under the first send (loadtests/ramp_student.py)
            "resent": sum(1 for op in done if op.extra.get("resent"))}


def time_series(ticks: list[dict[str, Any]], done: Sequence[Op], bucket: float = 1.0) -> dict[str, list[Any]]:
    """Per ``bucket`` seconds since the shape began: offered, achieved, p50/p99, errors per layer."""
    origin = _origin(ticks)
    if origin is None:
        return {}
    buckets: dict[int, list[Op]] = defaultdict(list)
    for op in done:
        buckets[int((float(op.extra["wall"]) - origin) // bucket)].append(op)
    span = int(max(buckets, default=0)) + 1
    offered = {int(t["elapsed"] // bucket): t["target"] for t in ticks}
    series: dict[str, list[Any]] = {key: [] for key in ("t", "offered", "achieved", "p50", "p99", "p99_corrected",
                                                        "load_balancer", "application", "client")}
    last_offered = 0.0
    for index in range(max(0, min(buckets, default=0)), span):
        ops = buckets.get(index, [])
        last_offered = offered.get(index, last_offered)
        quantiles = latency_quantiles(ops)
        layers = Counter(error_layer(op) for op in ops)
        series["t"].append(index * bucket)
        series["offered"].append(last_offered)
        series["achieved"].append(len(ops) / bucket)
        series["p50"].append(quantiles["p50"])
        series["p99"].append(quantiles["p99"])
        has_intended = any("corrected_latency" in op.extra for op in ops)
        series["p99_corrected"].append(latency_quantiles(ops, corrected=True)["p99"] if has_intended else None)
        for layer in ("load_balancer", "application", "client"):
            series[layer].append(layers.get(layer, 0) / bucket)
    return series
