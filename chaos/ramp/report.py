"""The ramp's report: ``ramp.json``, ``ramp.md`` and ``ramp.png`` in the run folder.

The seed's figure stands next to ours: its ramp recorded "0 application errors, 143
load-balancer errors"; the table below puts this run's errors per layer beside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaos.checkers.connections import SEED_CONNECTION_TIMEOUTS
from chaos.settle import settle_markdown

__all__ = ["SEED_LINE", "plot_ramp", "write_ramp_report"]

SEED_LINE = {"application": 0, "load_balancer": 143}
"""The incident's ramp (25 -> 500 req/s at CPU saturation): errors by layer it reported."""


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "-" if value is None else str(value)


def _markdown(report: dict[str, Any]) -> str:
    split = report["errors"]["layers"]
    lines = [f"# Ramp {report['run_dir']}", "", f"**Verdict: {report['verdict']}** (exit {report['exit_code']}); "
             f"invariants: {report['invariants']['valid']}", "",
             *([f"**Interrupted** by {report['interrupted'].get('signal')} during the "
                f"{report['interrupted'].get('phase')}: the plan did not finish, so the gate was not judged.", ""]
               if report.get("interrupted") else []),
             f"Load generator and stack shared this machine ({report['machine']}).", "",
             "## Gate", "", "| criterion | limit | measured | held |", "|---|---|---|---|"]
    lines += [f"| {g['name']} | {_fmt(g['limit'])} | {_fmt(g['measured'])} | {'yes' if g['passed'] else 'NO'} |"
              for g in report["gate"]]
    arrivals = report.get("arrivals") or {"mode": "closed"}
    users = "slots" if arrivals["mode"] == "open" else "users"
    lines += ["", "## Achieved vs offered, per step", "",
              f"Arrivals: **{arrivals['mode']}** model" + (f" ({arrivals.get('distribution')}, {arrivals.get('slots')} "
                                                         "in-flight slots)" if arrivals["mode"] == "open" else "")
              + ". p99 corrected: from each request's intended start; service: from its actual send.", "",
              f"| step | target req/s | {users} | window s | completed | offered req/s | achieved req/s | ratio "
              "(achieved / offered) | p99 corrected s | p99 service s |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {s['step']} | {s['target']:g} | {s['users']} | {s['window']:.1f} | {s['completed']} | "
              f"{s.get('offered', s['target']):.1f} | {s['achieved']:.1f} | {s['ratio']:.3f} | "
              f"{_fmt(s.get('p99_corrected'))} | {_fmt(s.get('p99_service'))} |"
              for s in report["steps"]]
    lines += _generator_lines(report.get("generator"))
    lines += ["", *settle_markdown(report.get("settle_wait"))]
    lines += ["## Errors by layer", "", "| | application | load balancer | client | rejected (4xx) |",
              "|---|---|---|---|---|",
              f"| seed's ramp (incident) | {SEED_LINE['application']} | {SEED_LINE['load_balancer']} | - | - |",
              f"| this run | {split['application']} | {split['load_balancer']} | {split['client']} | {split['rejected']} |",
              "", f"By node (5xx): `{json.dumps(report['errors']['by_node'])}`",
              f"Rejected: `{json.dumps(report['errors']['rejected'])}`; client: `{json.dumps(report['errors']['client'])}`; "
              f"resent after a kept-alive connection closed under them: {report['errors'].get('resent', 0)}",
              "", "HAProxy's own counters (stats socket, since the stack started): "
              f"`{json.dumps(report['haproxy'])}`", "",
              "## Valkey connections per component (the stack's own counters)", "",
              "| component | processes | connects | errors | by kind | connection timeouts | by phase |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {name} | {c['pids']} | {c['connects']} | {c['error_total']} | {json.dumps(c['errors'])} | "
              f"{c.get('timeout_total', 0)} | {json.dumps(c.get('timeouts') or {})} |"
              for name, c in sorted(report["valkey"].items())]
    lines += [f"| the seed's load test (seed figure, not measured here) | - | - | - | - | {SEED_CONNECTION_TIMEOUTS:,} | - |"]
    lines += ["", f"Latency: `{json.dumps(report['latency'])}`", f"Plot: {report.get('plot') or '(none)'}",
              f"Invariants: report.md (re-check: `proctor check {report['run_dir']}`)"]
    if report["notes"]:
        lines += ["", "Notes:", *[f"- {note}" for note in report["notes"]]]
    return "\n".join(lines) + "\n"


def _generator_lines(generator: dict[str, Any] | None) -> list[str]:
    if not generator:
        return []
    kept_up = generator["kept_up"]
    lines = ["", "## The load generator, per step", "",
             f"Kept up: **{'yes' if kept_up['passed'] else 'NO: the generator, not the stack, was short'}** "
             f"({kept_up['derivation']}); {generator['processes']} Locust process(es) with users. Busy share: CPU "
             "seconds / wall seconds of the busiest process (1.0 = one core flat out).", "",
             "| step | scheduled | sent | queued | delayed | late | dropped | max lag s | completed | Locust CPU s | "
             "CPU ms / request | busy share |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {g['step']} | {g['scheduled']} | {g['sent']} | {g['queued']} | {g['delayed']} | {g['late']} | "
              f"{g['dropped']} | {_fmt(g['max_lag'])} | {g['completed']} | {_fmt(g['cpu_seconds'])} | "
              f"{_fmt(g['cpu_ms_per_request'])} | {_fmt(g['busy_share'])} |" for g in generator["steps"]]
    return lines


def plot_ramp(series: dict[str, list[Any]], path: Path, p99_limit: float | None = None) -> Path | None:
    """Offered vs achieved rate, p50/p99 and errors per layer over time (three panels)."""
    if not series or not series.get("t"):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rate, latency, errors) = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    rate.plot(series["t"], series["offered"], label="offered (target)", drawstyle="steps-post")
    rate.plot(series["t"], series["achieved"], label="achieved (completions/s)")
    rate.set_ylabel("req/s")
    rate.legend(loc="upper left")
    for key, label in (("p50", "p50 service"), ("p99", "p99 service (from the send)"),
                       ("p99_corrected", "p99 corrected (from the intended start)")):
        values = series.get(key) or []
        if any(v is not None for v in values):
            latency.plot(series["t"], [v if v is not None else float("nan") for v in values], label=label)
    if p99_limit is not None:
        latency.axhline(p99_limit, color="tab:red", linestyle="--", label=f"gate: p99 <= {p99_limit:g} s")
    latency.set_ylabel("latency s")
    latency.legend(loc="upper left")
    for key in ("load_balancer", "application", "client"):
        errors.plot(series["t"], series[key], label=key.replace("_", " "))
    errors.set_ylabel("errors/s")
    errors.set_xlabel("seconds since the ramp began")
    errors.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_ramp_report(run_dir: Path, report: dict[str, Any], series: dict[str, list[Any]]) -> None:
    try:
        limit = next((g["limit"] for g in report.get("gate", []) if g.get("name") == "p99_seconds"), None)
        plotted = plot_ramp(series, run_dir / "ramp.png", p99_limit=limit)
        report["plot"] = plotted.name if plotted else None
    except Exception as exc:  # noqa: BLE001 - a plot is evidence, never the verdict
        report["notes"].append(f"plot failed: {type(exc).__name__}: {exc}")
    (run_dir / "ramp.json").write_text(json.dumps({**report, "series": series}, indent=1, default=str))
    (run_dir / "ramp.md").write_text(_markdown(report))
