"""Latency: how long clients and lanes waited, compared with the scenario's SLOs.

Measured (all real seconds):

- per client ``f``: invoke -> completion, over every completed try (ok, fail and
  info alike: a timeout is what the student waited). Tries that never completed
  have no duration and are only counted (``incomplete``);
- per lane (merit, ai, sms) from the outbox: queue wait ``done_at - enqueued_at``
  (from the last enqueue) and completion ``done_at - created_at`` (from finish);
- per lane from monitor samples: the largest oldest-job age seen. The seed's point:
  watch the oldest job, not only CPU or a zero failed-job count.

``options.slo`` maps a series to thresholds, e.g. ``{"answer": {"p99": 0.5},
"merit": {"p99": 0.6, "oldest_age": 2.0}}``. A key names a lane if it is one of
merit/ai/sms (or is written ``lane:<lane>``), else a client f (or ``op:<f>``).
Lane p50/p95/p99/max thresholds apply to completion time. A threshold exceeded
is an **slo_violation** (invalid); an SLO on a series with no data is unknown.

Client (op) SLOs are promises made on the reference machine, so each is applied multiplied by
the run's **pace factor** (chaos/observe/pace.py): the median of the monitor's machine-pace
probes against the reference machine's, never below 1. A run beside a CPU hog, or on a
slower machine, gets a proportionally longer limit; a stack that got slow on its own does not
move the probe, so its SLO still fails. Violations and the report show the stated limit, the
factor and the limit applied. Lane thresholds are compared as given: a scenario's lane
bounds are derived from the run's own service times (chaos/bounds.py).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from chaos.checkers.base import (
    UNKNOWN,
    CheckerOptions,
    OptionsError,
    Result,
    build_result,
    format_seconds,
    option,
    parse_seconds,
    summarize,
)
from chaos.history import Op, monitor_samples, pair_ops
from chaos.ledgers import LANE_OF_KIND, Ledgers, OutboxRow
from chaos.observe.pace import pace_factor

__all__ = ["LANES", "LatencyOptions", "NAME", "SLO_THRESHOLDS", "check_latency", "op_latencies", "render_details", "resolve_slo_key"]

NAME = "latency"

LANES = ("merit", "ai", "sms")
"""Mirrors stack.lanes.queues.LANES."""


SLO_THRESHOLDS = ("p50", "p95", "p99", "max", "oldest_age")


def _slo(value: Any, where: str) -> dict[str, dict[str, float]]:
    if not isinstance(value, Mapping):
        raise OptionsError(f"{where}={value!r}: expected an object")
    slo: dict[str, dict[str, float]] = {}
    for key, limits in value.items():
        if not isinstance(limits, Mapping) or not limits:
            raise OptionsError(f"{where}.{key}={limits!r}: expected e.g. {{\"p99\": 0.5}}")
        bad = [name for name in limits if name not in SLO_THRESHOLDS]
        if bad:
            raise OptionsError(f"{where}.{key}: {bad} are not among {SLO_THRESHOLDS}")
        slo[key] = {name: parse_seconds(v, f"{where}.{key}.{name}") for name, v in limits.items()}
    return slo


def _show_slo(name: str, value: Any, both: Callable[[float | None], str]) -> list[str]:
    return [f"- {name} {key}: " + ", ".join(f"{t} {both(v)}" for t, v in limits.items()) for key, limits in value.items()]


@dataclass(frozen=True)
class LatencyOptions(CheckerOptions):
    slo: Mapping[str, Mapping[str, float]] = option({}, _slo, dump=lambda slo: {k: dict(v) for k, v in slo.items()},
                                                    show=_show_slo)
    """{"answer": {"p99": 0.5}, "lane:merit": {"p99": 0.6, "oldest_age": 2}}: real seconds."""


def check_latency(history: Sequence[Op], ledgers: Ledgers, options: LatencyOptions) -> Result:
    ops, incomplete = op_latencies(history)
    op_summary = {f: summarize(values) for f, values in sorted(ops.items())}
    lanes = _lane_summaries(ledgers.outbox, history)
    factor, pace = pace_factor(sample.value.get("pace") for sample in monitor_samples(history))
    violations: list[dict[str, Any]] = []
    unknowns: list[str] = []
    for key, limits in sorted(options.slo.items()):
        kind, name = resolve_slo_key(key)
        series = lanes.get(name) if kind == "lane" else op_summary.get(name)
        _compare(key, kind, series, limits, 1.0 if kind == "lane" else factor, violations, unknowns)
    details = {"ops": op_summary, "incomplete": dict(sorted(incomplete.items())), "lanes": lanes,
               "slo": {k: dict(v) for k, v in options.slo.items()}, "pace": pace}
    notes = ledgers.missing("outbox") if ledgers.outbox is None else []
    result = build_result(NAME, bad={"slo_violations": violations}, counts={"slos": len(options.slo)}, notes=notes + unknowns, details=details)
    if result.valid is True and unknowns:
        result.valid = UNKNOWN
    return result


def resolve_slo_key(key: str) -> tuple[str, str]:
    """("lane", name) or ("op", f) for an slo key."""
    prefix, sep, rest = key.partition(":")
    if sep and prefix in ("lane", "op"):
        return prefix, rest
    return ("lane", key) if key in LANES else ("op", key)


def op_latencies(history: Sequence[Op]) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Per f: durations of completed tries; and how many tries never completed."""
    latencies: dict[str, list[float]] = defaultdict(list)
    incomplete: dict[str, int] = defaultdict(int)
    for invoked, done in pair_ops(history):
        if done is None:
            incomplete[invoked.f] += 1
            continue
        duration = done.latency if done.latency is not None else done.time - invoked.time
        latencies[invoked.f].append(round(float(duration), 6))
    return dict(latencies), dict(incomplete)


def _lane_summaries(outbox: Sequence[OutboxRow] | None, history: Sequence[Op]) -> dict[str, dict[str, Any]]:
    waits: dict[str, list[float]] = defaultdict(list)
    completions: dict[str, list[float]] = defaultdict(list)
    for row in outbox or ():
        lane = LANE_OF_KIND.get(row.kind, row.kind)
        if row.status != "done" or row.done_at is None:
            continue
        if row.enqueued_at is not None:
            waits[lane].append(round(row.done_at - row.enqueued_at, 6))
        if row.created_at is not None:
            completions[lane].append(round(row.done_at - row.created_at, 6))
    oldest = _oldest_ages(history)
    lanes: dict[str, dict[str, Any]] = {}
    for lane in sorted(set(LANES) | set(waits) | set(completions) | set(oldest)):
        summary: dict[str, Any] = summarize(completions[lane]) if outbox is not None else {"count": 0}
        summary["wait"] = summarize(waits[lane])
        summary["oldest_age"] = oldest.get(lane)
        lanes[lane] = summary
    return lanes


def _oldest_ages(history: Sequence[Op]) -> dict[str, float]:
    """Largest oldest-job age per lane over all monitor samples."""
    oldest: dict[str, float] = {}
    for sample in monitor_samples(history):
        for lane, stats in (sample.value.get("lanes") or {}).items():
            age = stats.get("oldest_age") if isinstance(stats, Mapping) else None
            if isinstance(age, (int, float)):
                oldest[lane] = max(oldest.get(lane, 0.0), float(age))
    return oldest


def _compare(
    key: str,
    kind: str,
    series: Mapping[str, Any] | None,
    limits: Mapping[str, float],
    factor: float,
    violations: list[dict[str, Any]],
    unknowns: list[str],
) -> None:
    for threshold, stated in sorted(limits.items()):
        if threshold == "oldest_age" and kind != "lane":
            unknowns.append(f"slo {key}: oldest_age applies to lanes only")
            continue
        limit = round(stated * factor, 6)
        observed = series.get(threshold) if series else None
        if observed is None:
            unknowns.append(f"slo {key}.{threshold}: no data to compare with {limit} s")
        elif observed > limit:
            scaled = {} if kind == "lane" else {"stated": stated, "pace_factor": round(factor, 3)}
            violations.append({"slo": key, "threshold": threshold, "limit": limit, **scaled, "observed": observed})


def render_details(details: Mapping[str, Any]) -> list[str]:
    """report.md lines: one row per client f and per lane, quantiles in readable units."""
    lines = ["", "| series | count | p50 | p95 | p99 | max | queue wait p99 | oldest job |", "|---|---|---|---|---|---|---|---|"]
    for f, s in details.get("ops", {}).items():
        lines.append(f"| op {f} | {s['count']} | " + " | ".join(format_seconds(s[q]) for q in ("p50", "p95", "p99", "max")) + " | | |")
    for lane, s in details.get("lanes", {}).items():
        cells = " | ".join(format_seconds(s.get(q)) for q in ("p50", "p95", "p99", "max"))
        wait = format_seconds((s.get("wait") or {}).get("p99"))
        lines.append(f"| lane {lane} (finish to done) | {s.get('count', 0)} | {cells} | {wait} | {format_seconds(s.get('oldest_age'))} |")
    return lines + _pace_lines(details.get("pace"))


def _pace_lines(pace: Mapping[str, Any] | None) -> list[str]:
    if not pace or not pace.get("probes"):
        return ["", "Machine pace: no probe in the history; client SLOs applied as stated."]
    return ["", f"Machine pace: median probe {format_seconds(pace['median_seconds'])} over {pace['probes']} samples "
                f"against the reference machine's {format_seconds(pace['reference_seconds'])}: client SLOs applied "
                f"x{pace['factor']:g} (factor = max(1, median / reference); chaos/observe/pace.py)."]
