"""How the admin commands print: a table for people, ``--json`` for scripts (issue #27).

Every command hands its answer to :func:`emit` with a renderer; the renderer makes rows and
:func:`table` lays them out. Times are UTC ISO 8601 everywhere (:func:`iso`): the API keeps
epoch seconds, people read dates. An empty result says that it is empty, in words, because
an empty screen reads as "the command did nothing". This module talks to nobody: it is kept
apart from the admin client (which finds the stack and its token) so that either can change
alone.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Sequence

__all__ = ["add_json_flag", "emit", "iso", "render_alerts", "render_audit", "render_lane", "render_lock",
           "render_replay", "render_review", "table"]

Renderer = Callable[[Any], str]

_TIME_KEYS = frozenset({"at", "since", "accepted_at", "opens_at", "closes_at", "expires_at", "updated_at"})


def add_json_flag(parser: Any) -> None:
    parser.add_argument("--json", action="store_true", help="print the API's answer as JSON (for scripts)")


def iso(value: Any) -> str:
    """Epoch seconds -> ``2026-12-01T21:50:02Z``; None -> ``-``; anything else as text."""
    if value is None:
        return "-"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, tz=timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    return str(value)


def _cell(key: str, value: Any) -> str:
    if key in _TIME_KEYS:
        return iso(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, default=str) if value else "-"
    if isinstance(value, float):
        return f"{value:g}"
    return "-" if value is None or value == "" else str(value)


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]], empty: str) -> str:
    """Rows under their headers (``columns`` is (key, header) pairs); ``empty`` when there is none."""
    if not rows:
        return empty
    cells = [[_cell(key, row.get(key)) for key, _ in columns] for row in rows]
    headers = [header for _, header in columns]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def emit(data: Any, as_json: bool, render: Renderer) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str) if as_json else render(data))


def render_lane(data: Mapping[str, Any]) -> str:
    if "resumed" in data:  # POST .../resume answers what it did, not the state
        return render_resumed(data)
    state = "PAUSED" if data.get("paused") else "running"
    lines = [f"lane {data.get('lane')}: {state} since {iso(data.get('since'))}"
             + (f" ({data['reason']})" if data.get("reason") else "")]
    if "changed" in data:
        lines.append("changed" if data["changed"] else "unchanged (it already was)")
    return "\n".join(lines)


def render_resumed(data: Mapping[str, Any]) -> str:
    lines = [f"lane {data.get('lane')}: " + ("resumed" if data["resumed"] else "unchanged (it was not paused)")]
    if data.get("to_review"):
        lines.append(f"sent to review (retry deadline passed while paused): {', '.join(data['to_review'])}")
    return "\n".join(lines)


def render_review(data: Mapping[str, Any]) -> str:
    return table(data.get("items", []), [("operation_id", "operation"), ("attempt_id", "attempt"),
                                         ("accepted_at", "accepted"), ("replays", "replays"),
                                         ("last_error", "last error")],
                 "the review queue is empty")


def render_replay(data: Mapping[str, Any]) -> str:
    pending = data.get("pending_reservations")
    return f"{data.get('operation_id')}: back in the AI lane once (pending reservations: {_cell('', pending)})"


def render_alerts(data: Mapping[str, Any]) -> str:
    return table(data.get("alerts", []), [("at", "at"), ("lane", "lane"), ("kind", "kind"), ("detail", "detail")],
                 "no alerts")


def render_audit(data: Mapping[str, Any]) -> str:
    summary, verdict = data.get("summary", {}), data.get("verdict", {})
    states = [(k, v) for k, v in summary.items() if k not in ("reservations", "cost")]
    lines = [f"billing audit: {_word(verdict.get('valid'))}",
             f"reservations {summary.get('reservations', 0)}: " + ", ".join(f"{k} {v}" for k, v in states)]
    costs = summary.get("cost") or {}
    if costs:
        lines.append("cost: " + ", ".join(f"{k} {v:g}" for k, v in costs.items()))
    counts = verdict.get("counts") or {}
    if counts:
        lines.append("checked: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for category in verdict.get("violations", []):
        lines.append(f"VIOLATION {category}: {json.dumps(verdict.get('examples', {}).get(category, []))[:300]}")
    return "\n".join(lines)


def render_lock(data: Mapping[str, Any]) -> str:
    windows = [{**w, "state": "OPEN" if w.get("open") else "closed"} for w in data.get("windows", [])]
    lines = [table(windows, [("exam_code", "exam"), ("state", "state"), ("opens_at", "opens"),
                             ("closes_at", "closes"), ("min_web", "min web"), ("min_workers", "min workers")],
                   "no exam windows stored (store one: proctor lock EXAM --opens ... --closes ...)")]
    capacity = data.get("capacity_lock") or {}
    lines.append(f"capacity lock: held by {capacity.get('description')}" if capacity.get("held")
                 else "capacity lock: free")
    return "\n".join(lines)


def _word(valid: Any) -> str:
    return {True: "VALID", False: "INVALID"}.get(valid, "UNKNOWN") if isinstance(valid, bool) else "UNKNOWN"

