"""The run report: ``report.json`` for machines, ``report.md`` for people.

Both carry the verdict, every checker's counts and examples, the settings, and the
command that reproduces the run. Every duration taken from the incident (the
``CASE_*`` constants of stack/config.py, which the runner records in scenario.json as
``case_constants``) is shown in case time *and* in the real time the run used
(case x TIME_SCALE), so "a 10 s AI call" in the story and "0.1 s" in the run are never
confused. Each checker renders its own details (``DETAIL_SECTIONS``) and options
(``CheckOptions.report_lines``); this module imports no stack code, so ``proctor check``
runs where only the harness is installed.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from chaos.bounds import bounds_markdown
from chaos.settle import settle_markdown
from chaos.checkers import DETAIL_SECTIONS, CheckOptions
from chaos.checkers.base import Result, format_seconds

__all__ = [
    "REPORT_JSON",
    "REPORT_MD",
    "build_report",
    "check_word",
    "headline_counts",
    "case_durations",
    "format_seconds",
    "render_markdown",
    "verdict_word",
    "write_report",
]

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
_EXAMPLE_CHARS = 400


def verdict_word(valid: Any) -> str:
    return {True: "VALID", False: "INVALID"}.get(valid, "UNKNOWN") if isinstance(valid, bool) else "UNKNOWN"


def check_word(check: Mapping[str, Any]) -> str:
    """One checker's word: n/a when it had nothing to check (chaos/checkers/base.py), else its verdict."""
    return "n/a" if check.get("na") else verdict_word(check.get("valid"))


def headline_counts(counts: Mapping[str, Any]) -> str:
    """"5 valid, 3 n/a, 0 invalid, 0 unknown": what was checked apart from what had nothing to check."""
    return (f"{counts.get('valid', 0)} valid, {counts.get('n/a', 0)} n/a, "
            f"{counts.get('invalid', 0)} invalid, {counts.get('unknown', 0)} unknown")


def case_durations(case_constants: Mapping[str, Any], time_scale: float) -> list[dict[str, Any]]:
    """Every CASE_*_SECONDS of the seed (as the run recorded them), in case and in this run's real seconds."""
    rows = []
    for name in sorted(case_constants):
        value = case_constants[name]
        if name.startswith("CASE_") and name.endswith("_SECONDS") and _is_number(value):
            rows.append({"name": name, "case_seconds": float(value), "real_seconds": float(value) * time_scale})
    rate = case_constants.get("CASE_PROVIDER_CALLS_PER_MINUTE")
    if _is_number(rate) and rate > 0:
        # A rate scales as its interval: 8 calls per case minute = one per 7.5 case seconds.
        interval = 60.0 / rate
        rows.append({"name": "CASE_PROVIDER_CALLS_PER_MINUTE (interval)", "case_seconds": interval, "real_seconds": interval * time_scale})
    return rows


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def build_report(
    scenario: Mapping[str, Any],
    result: Result,
    options: CheckOptions,
    time_scale: float,
    plots: list[str],
    harness_notes: list[str],
) -> dict[str, Any]:
    """The report document; ``checkers`` maps each checker name to its Result as a dict."""
    composed = result.to_dict()
    return {
        "verdict": verdict_word(result.valid),
        "valid": result.valid,
        "summary": composed["counts"],
        "notes": composed["notes"],
        "name": scenario.get("name"),
        "description": scenario.get("description"),
        "seed": scenario.get("seed"),
        "time_scale": time_scale,
        "started_at": scenario.get("started_at"),
        "ended_at": scenario.get("ended_at"),
        "reproduce": scenario.get("reproduce"),
        "checkers": composed.get("checks", {}),
        "settings": dict(scenario.get("settings") or {}),
        "options": options.to_dict(),
        "case_durations": case_durations(scenario.get("case_constants") or {}, time_scale),
        "harness_notes": harness_notes,
        "plots": plots,
        "recovery_seconds": scenario.get("recovery_seconds"),
        "settled": scenario.get("settled"),
        "settle_wait": scenario.get("settle_wait"),
        "workload": scenario.get("workload_stats"),
        "faults": [],  # filled by analyze() from the history's fault windows
    }


def write_report(run_dir: Path, report: Mapping[str, Any]) -> tuple[Path, Path]:
    json_path, md_path = run_dir / REPORT_JSON, run_dir / REPORT_MD
    json_path.write_text(json.dumps(report, indent=2, sort_keys=False, default=str) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown(report), encoding="utf-8")
    from chaos.browse.page import write_html  # it renders with this module's words

    write_html(run_dir, report)
    return json_path, md_path


def render_markdown(report: Mapping[str, Any]) -> str:
    lines = [f"# Proctor run report: {report.get('name') or '(unnamed)'}", ""]
    lines += _verdict_section(report)
    lines += _run_section(report)
    lines += failover_markdown(report.get("failovers"))
    lines += bounds_markdown(report.get("bounds"))
    lines += settle_markdown(report.get("settle_wait"))
    for name, check in report["checkers"].items():
        lines += _checker_section(name, check)
    lines += _settings_section(report)
    lines += [f"![{Path(p).stem}]({p})" for p in report.get("plots", [])]
    if report.get("plots_drawn") is False:
        lines += ["Plots not drawn in this judgement (about 2 CPU s a run): `proctor check RUN_DIR` draws them."]
    text = "\n".join(lines).rstrip() + "\n"
    while "\n\n\n" in text:  # sections end with a blank line; never stack two
        text = text.replace("\n\n\n", "\n\n")
    return text


def _verdict_section(report: Mapping[str, Any]) -> list[str]:
    counts = report["summary"]
    lines = [
        f"**Verdict: {report['verdict']}** ({headline_counts(counts)})",
        "",
        *([str(report["description"]), ""] if report.get("description") else []),
        f"Seed `{report.get('seed')}`, started {_when(report.get('started_at'))}, ended {_when(report.get('ended_at'))}.",
        "",
        "Reproduce:",
        "",
        "```",
        str(report.get("reproduce") or "(scenario.json has no reproduce command)"),
        "```",
        "",
    ]
    cut = report.get("interrupted")
    if cut is not None:
        lines += [f"**Interrupted** by {cut.get('signal', 'a signal')} during {cut.get('phase', '?')} at "
                  f"{_when(cut.get('at'))}: the run did not finish, so nothing below is a verdict on the stack.", ""]
    notes = list(report.get("harness_notes", [])) + list(report.get("notes", []))
    lines += [f"- {note}" for note in notes] + ([""] if notes else [])
    lines += ["| checker | verdict | problems |", "|---|---|---|"]
    for name, check in report["checkers"].items():
        problems = ", ".join(f"{k} {check['counts'].get(k)}" for k in check.get("violations", [])) or "-"
        lines.append(f"| {name} | {check_word(check)} | {check.get('na') or problems} |")
    return lines + [""]


def _run_section(report: Mapping[str, Any]) -> list[str]:
    """What the nemesis did and how long the stack took to settle after heal."""
    lines = ["## Faults and recovery", ""]
    faults = report.get("faults") or []
    if faults:
        lines += ["| # | kind | target | from | to | detail |", "|---|---|---|---|---|---|"]
        for fault in faults:
            end = "never healed" if fault.get("end") is None else f"{fault['end']:.2f} s"
            lines.append(f"| {fault['fault_id']} | {fault['kind']} | {fault['target']} | {fault['start']:.2f} s | {end} "
                         f"| {_clip(json.dumps(fault.get('detail', {}), default=str))} |")
        lines.append("")
    else:
        lines += ["No faults were injected.", ""]
    recovery = report.get("recovery_seconds")
    if recovery is not None:
        settled = "settled" if report.get("settled") else "did NOT settle"
        lines += [f"After heal the outbox {settled} in {_both(recovery, report['time_scale'])}.", ""]
    if report.get("workload"):
        lines += ["Workload: " + ", ".join(f"{k} **{_short(v)}**" for k, v in report["workload"].items()), ""]
    return lines


def failover_markdown(failovers: Any) -> list[str]:
    """Each Valkey failover as a timeline: the kill, +switch-master, each client's first
    connection to the new primary, the old primary back as a replica; errors per component."""
    lines: list[str] = []
    for failover in failovers or []:
        killed = failover.get("killed_at")
        if not isinstance(killed, (int, float)):
            continue
        cut = failover.get("kind") == "partition"
        how = "cut off" if cut else "killed"
        lines += [f"## Valkey failover: {failover.get('node')} {how}, {failover.get('primary_after') or 'no node'} promoted",
                  "", f"| event | seconds after the {'partition' if cut else 'kill'} |", "|---|---|",
                  f"| {'partition of' if cut else 'SIGKILL'} {failover.get('node')} | 0.000 |"]
        switch = failover.get("switch_seconds")
        lines.append(f"| Sentinels name the new primary (+switch-master) | {'never' if switch is None else f'{switch:.3f}'} |")
        healed = failover.get("healed_at")
        if isinstance(healed, (int, float)):
            lines.append(f"| link healed (the schedule's end; its connections closed) | {healed - killed:.3f} |")
        for name, since in sorted((failover.get("first_success_seconds") or {}).items(), key=lambda item: item[1]):
            lines.append(f"| {name}: first connection to the new primary | {since:.3f} |")
        lines += [f"| {name}: never reached the new primary | - |" for name in failover.get("never_back") or []]
        for name, since in sorted((failover.get("serving_seconds") or {}).items(), key=lambda item: item[1]):
            lines.append(f"| {name}: serving again (queue connection + a liveness beat after the switch) | {since:.3f} |")
        lines += [f"| {name}: never served the new primary | - |" for name in failover.get("never_serving") or []]
        ready = failover.get("ready_at")
        if isinstance(ready, (int, float)):
            replica = "as a replica" if failover.get("rejoined_as_replica") else "NOT as a replica"
            back = "healed" if cut else "restarted"
            lines.append(f"| {failover.get('node')} {back} (fault end), back {replica} | {ready - killed:.3f} |")
        errors = failover.get("errors_by_component") or {}
        lines += ["", "Connection errors counted per component during the failover: "
                  + (", ".join(f"{c} {dict(k)}" for c, k in errors.items()) or "none"), ""]
        lines += [f"- watcher: {e}" for e in failover.get("errors") or []] + [""]
    return lines


def _short(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _checker_section(name: str, check: Mapping[str, Any]) -> list[str]:
    lines = [f"## {name}: {check_word(check)}", ""]
    counts = check.get("counts", {})
    if counts:
        lines += [", ".join(f"{key} **{value}**" for key, value in counts.items()), ""]
    lines += [f"- {note}" for note in check.get("notes", [])]
    for category, examples in check.get("examples", {}).items():
        lines += ["", f"{category} (first {len(examples)} of {counts.get(category, len(examples))}):", ""]
        lines += [f"- `{_clip(json.dumps(example, default=str))}`" for example in examples]
    if name in DETAIL_SECTIONS:
        lines += DETAIL_SECTIONS[name](check.get("details", {}))
    return lines + [""]


def _settings_section(report: Mapping[str, Any]) -> list[str]:
    scale = report["time_scale"]
    lines = ["## Settings", "", f"TIME_SCALE = {scale} (real seconds per case second)", ""]
    settings = report.get("settings", {})
    if settings:
        lines += ["| setting | value |", "|---|---|"] + [f"| {k} | `{v}` |" for k, v in sorted(settings.items())] + [""]
    if report["case_durations"]:
        lines += ["| seed duration | case time | real time in this run |", "|---|---|---|"]
        lines += [f"| {d['name']} | {format_seconds(d['case_seconds'])} | {format_seconds(d['real_seconds'])} |"
                  for d in report["case_durations"]]
    else:
        lines.append("(scenario.json records no case_constants: the seed's durations are not shown)")
    lines += ["", "Checker options (real seconds; case time = real / TIME_SCALE):", ""]
    lines += CheckOptions.report_lines(report["options"], lambda real: _both(real, scale))
    return lines + [""]


def _both(real: float | None, scale: float) -> str:
    if real is None:
        return "none"
    return f"{format_seconds(real)} real = {format_seconds(real / scale)} case"


def _when(value: Any) -> str:
    """Epoch seconds (what the runner writes) as UTC ISO 8601; strings pass through."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, tz=timezone.utc).isoformat(timespec="seconds")
    return str(value) if value is not None else "-"


def _clip(text: str) -> str:
    return text if len(text) <= _EXAMPLE_CHARS else text[: _EXAMPLE_CHARS - 3] + "..."
