"""Connections: what connection churn cost, per component, and whether it broke a limit.

The seed's 6 October load test recorded 2,854 connection timeouts with fresh TLS
connections to managed Valkey. This checker reads three kinds of monitor samples:

- ``valkey-sample`` (chaos/observe/valkey_stats.py): Valkey's INFO (``total_connections_received``,
  ``rejected_connections``, ``used_cpu_sys``/``used_cpu_user``), CLIENT LIST ids
  grouped by component, and each component's own counters (connects, errors by kind);
- ``churn-sample`` (chaos/load/churn.py): the fresh-connection generator's outcomes.

It also sums each component's events (stack/connection_stats.py ``EVENT_KINDS``): commands
Valkey refused with OOM (``oom_refusals``), the request limiter's fallbacks to per-node memory
(``limiter_fallbacks``, each one loosens the limit to nodes x limit) and relay passes that
failed and were retried after a backoff (``relay_failed_passes``). Measured only, never judged.

| category | invalid? | meaning |
|---|---|---|
| ``rejected_over_limit`` | yes | Valkey rejected more connections (maxclients) than ``max_rejected_connections`` |
| ``component_errors_over_limit`` | yes | a stack component counted more connection errors than ``max_component_connection_errors`` |
| ``process_connects_over_limit`` | yes | one process of a stack component opened more Valkey connections than ``max_connects_per_process`` (pooled clients open a handful, even through reconnect storms; a connection per call opens one per call) |
| ``pooled_timeouts_over_connects`` | yes | a component of ``pooled_components`` counted more connection timeouts than connections it opened (a pool pays a slow handshake once per connection, not per call) |
| ``fresh_timeouts_under_ratio`` | yes | the ``fresh_components`` together counted fewer than ``min_fresh_timeout_ratio`` x the pooled group's connection timeouts (at least 1 each), under the same slow link in the same run |

Connection timeouts (stack/connection_stats.py ``TIMEOUT_PHASES``) are connection attempts that ran
out of the clients' connect timeout in the TCP connect or the TLS handshake, counted by each
component, as the seed's load test counted its 2,854 (``SEED_CONNECTION_TIMEOUTS``, printed beside
the measured ones as a seed figure).

With a limit set but nothing to judge it by (no readable Valkey sample, no
component counters) the result is **unknown**. With no limit set it only measures.
Counters are cumulative; a Valkey restart (a counter going down) is handled by
summing the increases.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from chaos.checkers.base import (UNKNOWN, CheckerOptions, OptionsError, Result, build_result, option, parse_limit,
                                 parse_strings)
from chaos.history import CHURN_SAMPLE, MONITOR, VALKEY_SAMPLE, Op
from chaos.ledgers import Ledgers

__all__ = ["ConnectionsOptions", "NAME", "SEED_CONNECTION_TIMEOUTS", "check_connections", "counter_increase",
           "render_details", "timeout_rule"]

NAME = "connections"
HARNESS_CLIENTS = {"proctor-monitor", "proctor-churn"}
EVENT_KINDS = ("oom_refusals", "limiter_fallbacks", "relay_failed_passes")
"""Mirrors stack.connection_stats.EVENT_KINDS (copied so analysis imports no stack code;
tests/unit/test_connection_stats.py keeps the two equal)."""
SEED_CONNECTION_TIMEOUTS = 2854
"""The seed's figure: connection timeouts its 6 October load test recorded with fresh TLS
connections to managed Valkey. Never measured here; reports print it labelled as the seed's."""
UNNAMED = "(unnamed)"
"""Connections CLIENT LIST caught before their CLIENT SETNAME (mid-handshake) or from clients that never name themselves."""


def _samples(history: Sequence[Op], f: str) -> list[Op]:
    return [op for op in history if op.process == MONITOR and op.f == f and isinstance(op.value, dict)]


def counter_increase(values: Sequence[float]) -> float:
    """Total growth of a counter that may reset (Valkey restarted): first value + positive steps."""
    if not values:
        return 0.0
    total = values[0]
    for before, after in pairwise(values):
        total += after - before if after >= before else after
    return total


def _growth(values: Sequence[float]) -> float:
    """How much a counter grew between the first and the last sample, across a Valkey restart too
    (last - first would undercount a counter that climbed back above its first value)."""
    return counter_increase(values) - values[0] if values else 0.0


def _valkey_figures(ok: list[Op]) -> dict[str, Any]:
    """Figures over the successful samples (at least one: the caller asks only then)."""
    def series(key: str) -> list[float]:
        return [float(op.value[key]) for op in ok if isinstance(op.value.get(key), (int, float))]

    received = series("total_connections_received")
    cpu = [float(op.value.get("used_cpu_sys", 0)) + float(op.value.get("used_cpu_user", 0)) for op in ok]
    span = ok[-1].time - ok[0].time  # one sample: 0
    received_in_run, cpu_in_run = _growth(received), _growth(cpu)
    peak = 0.0
    for a, b in pairwise(ok):
        dt = b.time - a.time
        ra, rb = a.value.get("total_connections_received"), b.value.get("total_connections_received")
        if dt > 0 and isinstance(ra, (int, float)) and isinstance(rb, (int, float)) and rb >= ra:
            peak = max(peak, (rb - ra) / dt)
    return {
        "rejected_connections": int(counter_increase(series("rejected_connections"))),
        "connections_received": int(counter_increase(received)),
        "handshakes_per_second": round(received_in_run / span, 2) if span > 0 else 0.0,
        "handshakes_per_second_peak": round(peak, 2),
        "valkey_cpu_seconds": round(cpu_in_run, 3),
        "valkey_cpu_percent": round(100.0 * cpu_in_run / span, 1) if span > 0 else 0.0,
        "max_connected_clients": int(max(series("connected_clients"), default=0)),
        "sampled_seconds": round(span, 3),
    }


def _components(samples: list[Op]) -> dict[str, dict[str, Any]]:
    """Per component: CLIENT LIST ids (connections now / seen / new after first seen) + own counters."""
    seen: dict[str, set[int]] = {}
    first: dict[str, set[int]] = {}
    now: dict[str, int] = {}
    for op in samples:
        if not op.value.get("ok"):
            continue
        clients = op.value.get("clients") or {}
        for name, ids in clients.items():
            ids = {int(i) for i in ids}
            first.setdefault(name, ids)
            seen.setdefault(name, set()).update(ids)
        now = {name: len(ids) for name, ids in clients.items()}
    counters = {}
    for op in reversed(samples):  # the last sample that carries the counters
        if isinstance(op.value.get("processes"), dict):
            counters = op.value["processes"]
            break
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(set(seen) | set(counters)):
        own = counters.get(name, {})
        out[name] = {
            "connections_now": now.get(name, 0),
            "client_ids_seen": len(seen.get(name, ())),
            "reconnects": len(seen.get(name, set()) - first.get(name, set())),
            "connects": int(own.get("connects", 0)),
            "errors": dict(own.get("errors", {})),
            "error_total": int(own.get("error_total", 0)),
            "events": {kind: int(n) for kind, n in (own.get("events") or {}).items()},
            "timeouts": {phase: int(n) for phase, n in (own.get("timeouts") or {}).items()},
            "timeout_total": int(own.get("timeout_total", 0)),
            "processes": int(own.get("pids", 0)),
            "max_process_connects": int(own.get("max_process_connects", 0)),
            "harness": name in HARNESS_CLIENTS,
            "unnamed": name == UNNAMED,
        }
    return out


def _churn(history: Sequence[Op]) -> dict[str, Any]:
    samples = _samples(history, CHURN_SAMPLE)
    if not samples:
        return {}
    last = samples[-1].value
    outcomes = last.get("outcomes") or {}
    return {
        "churn_ops": int(last.get("ops", 0)),
        **{f"churn_{kind}": int(n) for kind, n in sorted(outcomes.items())},
        "churn_handshakes_per_second": float(last.get("handshakes_per_second", 0.0)),
    }


def _timeout_group(names: Sequence[str], counted: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """A group's connection timeouts (by phase) and connects, summed over its components."""
    phases: dict[str, int] = {}
    for name in names:
        for phase, n in counted.get(name, {}).get("timeouts", {}).items():
            phases[phase] = phases.get(phase, 0) + n
    return {"components": list(names), "timeouts": sum(phases.values()), "by_phase": phases,
            "connects": sum(counted.get(name, {}).get("connects", 0) for name in names)}


def _timeout_rules(options: "ConnectionsOptions", counted: Mapping[str, dict[str, Any]]
                   ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any], list[str]]:
    """(violations by category, the groups' figures and the rule's derivation, reasons it is unknown)."""
    if options.min_fresh_timeout_ratio is None:
        return {}, {}, []
    return timeout_rule(options.fresh_components, options.pooled_components, options.min_fresh_timeout_ratio, counted)


def timeout_rule(fresh_components: Sequence[str], pooled_components: Sequence[str], ratio: float,
                 counted: Mapping[str, dict[str, Any]]
                 ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any], list[str]]:
    """The fresh-against-pooled rule on each component's counters (``connects``, ``timeouts`` by phase,
    ``timeout_total``), as the checker's history samples or a run folder's stats files give them
    (chaos/observe/valkey_stats.py): a load test outside the chaos runner judges by the same rule."""
    fresh = _timeout_group(fresh_components, counted)
    pooled = _timeout_group(pooled_components, counted)
    missing = [n for n in (*fresh_components, *pooled_components) if n not in counted]
    if not fresh_components or not pooled_components:
        return {}, {}, [f"min_fresh_timeout_ratio={ratio:g} needs both fresh_components and pooled_components"]
    if missing:
        return {}, {}, [f"min_fresh_timeout_ratio={ratio:g}: no connection counters from {missing}"]
    needed = ratio * max(1, pooled["timeouts"])
    derivation = (f"fresh {fresh['timeouts']} >= {ratio:g} x max(1, pooled {pooled['timeouts']}) = {needed:g}: "
                  f"{'held' if fresh['timeouts'] >= needed else 'failed'}")
    over = [{"component": name, "timeouts": counted[name]["timeout_total"], "connects": counted[name]["connects"]}
            for name in pooled_components if counted[name]["timeout_total"] > counted[name]["connects"]]
    under = [] if fresh["timeouts"] >= needed else [{"fresh_timeouts": fresh["timeouts"],
                                                     "pooled_timeouts": pooled["timeouts"], "needed": needed}]
    groups = {"fresh": fresh, "pooled": pooled, "ratio": ratio, "derivation": derivation,
              "seed_connection_timeouts": SEED_CONNECTION_TIMEOUTS}
    return {"pooled_timeouts_over_connects": over, "fresh_timeouts_under_ratio": under}, groups, []


def _event_totals(components: Mapping[str, dict[str, Any]]) -> dict[str, int]:
    """Each of ``EVENT_KINDS`` summed over the stack's components (0 when none counted it)."""
    return {kind: sum(c["events"].get(kind, 0) for c in components.values()) for kind in EVENT_KINDS}


def _parse_ratio(value: object, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 1:
        raise OptionsError(f"{where}={value!r}: expected a number >= 1 (or null)")
    return float(value)


@dataclass(frozen=True)
class ConnectionsOptions(CheckerOptions):
    max_rejected_connections: int | None = option(None, parse_limit)
    """Valkey's rejected_connections (maxclients) over the run may not exceed this; None = not checked."""
    max_component_connection_errors: int | None = option(None, parse_limit)
    """Connection errors each stack component may report (its own counters); None = not checked."""
    max_connects_per_process: int | None = option(None, parse_limit)
    """Valkey connections any one stack process may open over the run (pooled: a handful); None = not checked."""
    fresh_components: tuple[str, ...] = option((), parse_strings, dump=list)
    """Components that open a fresh Valkey connection per call (their connection policy), for the timeout rules."""
    pooled_components: tuple[str, ...] = option((), parse_strings, dump=list)
    """Components that pool their Valkey connections, behind the same slow link as ``fresh_components``."""
    min_fresh_timeout_ratio: float | None = option(None, _parse_ratio)
    """The fresh group must count at least this many times the pooled group's connection timeouts
    (and the pooled group at most one per connection it opened); None = not checked."""


def check_connections(history: Sequence[Op], ledgers: Ledgers, options: ConnectionsOptions) -> Result:
    samples = _samples(history, VALKEY_SAMPLE)
    ok = [op for op in samples if op.value.get("ok")]
    figures = _valkey_figures(ok) if ok else {}
    components = _components(samples)
    stack_components = {name: c for name, c in components.items() if not c["harness"] and not c["unnamed"]}
    counted = {name: c for name, c in stack_components.items() if c["processes"]}
    churn = _churn(history)
    counts: dict[str, Any] = {
        "samples": len(samples),
        "samples_failed": len(samples) - len(ok),
        **figures,
        "component_connects": sum(c["connects"] for c in stack_components.values()),
        "component_reconnects": sum(c["reconnects"] for c in stack_components.values()),
        "component_errors": sum(c["error_total"] for c in stack_components.values()),
        "component_timeouts": sum(c["timeout_total"] for c in stack_components.values()),
        "unnamed_client_ids": components.get(UNNAMED, {}).get("client_ids_seen", 0),
        **_event_totals(stack_components),
        **churn,
    }
    notes: list[str] = []
    unknown: list[str] = []
    rejected_bad: list[dict[str, Any]] = []
    limit = options.max_rejected_connections
    if limit is not None:
        if not ok:
            unknown.append(f"max_rejected_connections={limit} is set but no valkey-sample could read Valkey")
        elif figures["rejected_connections"] > limit:
            rejected_bad.append({"rejected_connections": figures["rejected_connections"], "limit": limit,
                                 "max_connected_clients": figures["max_connected_clients"]})
    errors_bad: list[dict[str, Any]] = []
    limit = options.max_component_connection_errors
    if limit is not None:
        if not counted:
            unknown.append(f"max_component_connection_errors={limit} is set but no component counted its connections")
        errors_bad = [{"component": name, "errors": c["error_total"], "by_kind": c["errors"], "limit": limit}
                      for name, c in counted.items() if c["error_total"] > limit]
    churn_bad: list[dict[str, Any]] = []
    limit = options.max_connects_per_process
    if limit is not None:
        if not counted:
            unknown.append(f"max_connects_per_process={limit} is set but no component counted its connections")
        churn_bad = [{"component": name, "max_process_connects": c["max_process_connects"], "connects": c["connects"],
                      "processes": c["processes"], "limit": limit}
                     for name, c in counted.items() if c["max_process_connects"] > limit]
    timeout_bad, timeout_groups, timeout_unknown = _timeout_rules(options, counted)
    unknown.extend(timeout_unknown)
    if timeout_groups:
        counts.update(fresh_timeouts=timeout_groups["fresh"]["timeouts"],
                      pooled_timeouts=timeout_groups["pooled"]["timeouts"],
                      pooled_connects=timeout_groups["pooled"]["connects"])
        notes.append(timeout_groups["derivation"])
    if not samples:
        notes.append("no valkey-sample in the history: connections were not measured")
    result = build_result(NAME, bad={"rejected_over_limit": rejected_bad, "component_errors_over_limit": errors_bad,
                                     "process_connects_over_limit": churn_bad, **timeout_bad},
                          counts=counts, notes=notes + unknown,
                          details={"components": components, "churn": churn,
                                   **({"timeout_groups": timeout_groups} if timeout_groups else {})})
    if result.valid is True and unknown:
        result.valid = UNKNOWN
    if result.valid is True and not samples and not counted:
        result.na = "no valkey-sample in the history and no component counted its connections: nothing to check"
    return result


def render_details(details: Mapping[str, Any]) -> list[str]:
    """report.md lines: per component, Valkey's view (CLIENT LIST ids) beside the component's own counters."""
    components = details.get("components") or {}
    if not components:
        return []
    header = ("| component | connections at end | client ids seen | reconnects (new ids) | connects (own count) "
              "| connection errors | by kind | connection timeouts | events |")
    lines = ["", header, "|---|---|---|---|---|---|---|---|---|"]
    for name, c in components.items():
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(c.get("errors", {}).items())) or "-"
        events = ", ".join(f"{k} {v}" for k, v in sorted(c.get("events", {}).items())) or "-"
        phases = ", ".join(f"{k} {v}" for k, v in sorted(c.get("timeouts", {}).items()))
        timeouts = f"{c.get('timeout_total', 0)} ({phases})" if phases else "0"
        label = f"{name} (harness)" if c.get("harness") else name
        lines.append(f"| {label} | {c.get('connections_now', 0)} | {c.get('client_ids_seen', 0)} | {c.get('reconnects', 0)} "
                     f"| {c.get('connects', 0)} | {c.get('error_total', 0)} | {kinds} | {timeouts} | {events} |")
    return lines + _render_timeout_groups(details.get("timeout_groups") or {})


def _render_timeout_groups(groups: Mapping[str, Any]) -> list[str]:
    """The fresh and pooled groups' connection timeouts beside the seed's figure."""
    if not groups:
        return []
    lines = ["", "| connection timeouts | components | timeouts (by phase) | connections opened |", "|---|---|---|---|"]
    for label in ("fresh", "pooled"):
        g = groups[label]
        phases = ", ".join(f"{k} {v}" for k, v in sorted(g["by_phase"].items())) or "-"
        lines.append(f"| {label} (measured) | {', '.join(g['components'])} | {g['timeouts']} ({phases}) | {g['connects']} |")
    lines.append(f"| the seed's load test (seed figure, not measured here) | fresh TLS connections to managed Valkey "
                 f"| {groups['seed_connection_timeouts']:,} | - |")
    lines.append(f"\nRatio rule: {groups['derivation']}; pooled: at most one timeout per connection opened.")
    return lines
