"""The AI lane's plot (issue #11): ``ai_lane.png`` in the run folder, from the final read.

Three panels on one time axis (seconds from the first narrative accepted):

1. provider calls in the sliding case-minute ending at each call, against the limit (8);
2. the narrative backlog (accepted, not yet done) against the theoretical bound: from
   the first provider call, the limit drains at most 8 per case-minute;
3. unknown outcomes: reservations still pending (a call whose answer was never heard).

Drawn from the ledgers, not the history: the provider's ``started_at`` and the stack's
``created_at``/``done_at``/``reserved_at``/``settled_at`` are what the checkers judge.
The oldest job's age per lane is in ``queues.png`` (monitor samples). Like chaos/plots/run.py:
matplotlib's object API on Agg, "no data" rather than an error.
"""

from __future__ import annotations

from bisect import bisect_right
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from chaos.checkers.ailane import AI_CALLS_PER_CASE_MINUTE
from chaos.ledgers import Ledgers
from chaos.plots.style import DPI, no_data

__all__ = ["AI_LANE_PLOT", "plot_ai_lane"]

AI_LANE_PLOT = "ai_lane.png"


def plot_ai_lane(ledgers: Ledgers, time_scale: float, out_dir: Path, run_origin: float | None = None) -> Path | None:
    """Write ``ai_lane.png``; None (nothing written) when the run made no AI call. ``run_origin``: the
    wall-clock time of the history's 0 (scenario.json ``history_origin``), so that this plot's time
    axis is the other plots' run time; without it, the first narrative accepted is 0."""
    calls = sorted(e.started_at or e.created_at or 0.0 for e in ledgers.ai_effects or ())
    narratives = [row for row in ledgers.outbox or () if row.kind == "narrative" and row.created_at is not None]
    if not calls or not narratives:
        return None
    first = min(row.created_at for row in narratives)  # type: ignore[type-var]
    origin = run_origin if run_origin is not None else first
    window = 60.0 * time_scale
    figure = Figure(figsize=(9, 8), dpi=DPI)
    rate, backlog, pending = figure.subplots(3, 1, sharex=True)
    _calls_panel(rate, calls, window, origin)
    _backlog_panel(backlog, narratives, calls[0], window, origin)
    _pending_panel(pending, ledgers, origin)
    since = "run time (s)" if run_origin is not None else "seconds from the first narrative accepted"
    pending.set_xlabel(f"{since}; a case-minute is {window:g} s")
    figure.tight_layout()
    path = out_dir / AI_LANE_PLOT
    FigureCanvasAgg(figure).print_png(str(path))
    return path


def _calls_panel(axes, calls: list[float], window: float, origin: float) -> None:  # Axes
    in_window = [i + 1 - bisect_right(calls, at - window) for i, at in enumerate(calls)]
    axes.plot([at - origin for at in calls], in_window, drawstyle="steps-post", marker=".",
              label="calls in the last case-minute")  # a marker: a lone call is a point, not an invisible step
    axes.axhline(AI_CALLS_PER_CASE_MINUTE, color="tab:red", linestyle="--", label=f"limit {AI_CALLS_PER_CASE_MINUTE}")
    axes.set_ylim(0, AI_CALLS_PER_CASE_MINUTE * 1.25)
    axes.set_title("AI provider calls per sliding case-minute")
    axes.set_ylabel("calls")
    axes.legend(loc="upper right", fontsize="small")


def _backlog_panel(axes, narratives: list, first_call: float, window: float, origin: float) -> None:
    accepted = sorted(row.created_at for row in narratives)
    done = sorted(row.done_at for row in narratives if row.done_at is not None)
    times = sorted(set(accepted) | set(done))
    left = [bisect_right(accepted, t) - bisect_right(done, t) for t in times]
    axes.plot([t - origin for t in times], left, drawstyle="steps-post", label="narratives waiting")
    total = len(narratives)
    drain_end = first_call + total / AI_CALLS_PER_CASE_MINUTE * window
    axes.plot([first_call - origin, drain_end - origin], [total, 0], color="tab:green", linestyle=":",
              label=f"fastest drain the limit allows: {AI_CALLS_PER_CASE_MINUTE}/case-minute from the 1st call")
    axes.set_title("Narrative backlog against the limiter's bound (waiting cannot fall faster than the dotted line)")
    axes.set_ylabel("narratives")
    axes.set_ylim(0, total * 1.25)
    axes.legend(loc="upper right", fontsize="small")


def _pending_panel(axes, ledgers: Ledgers, origin: float) -> None:
    rows = [r for r in ledgers.ai_reservations or () if r.reserved_at is not None]
    axes.set_title("Unknown outcomes: reservations pending (answer not heard yet)")
    axes.set_ylabel("pending")
    if not rows:
        no_data(axes)
        return
    starts = sorted(r.reserved_at for r in rows)  # type: ignore[type-var]
    ends = sorted(r.settled_at for r in rows if r.settled_at is not None)
    times = sorted(set(starts) | set(ends))
    open_at = [bisect_right(starts, t) - bisect_right(ends, t) for t in times]
    axes.plot([t - origin for t in times], open_at, drawstyle="steps-post", color="tab:purple")
