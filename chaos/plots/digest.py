"""The exam digest's time series as a run-report plot (``digest.png``, #12).

The run's monitor samples ``/metrics`` through HAProxy during the load (chaos/observe/monitor.py):
the same series `proctor digest` shows on one screen. This plot draws what the queue plot
(``queues.png``: depth and oldest-job age per lane) does not: pending outcomes and outbox
lag, and RQ's failed jobs per lane. Fault windows are shaded as in every run plot.
"""

from __future__ import annotations

from typing import Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from chaos.history import FaultWindow, Op, monitor_samples
from chaos.plots.style import DPI, lane_style, no_data, shade_faults

__all__ = ["plot_digest"]


def _series(samples: Sequence[Op], key: str) -> tuple[list[float], list[float]]:
    points = [(s.time, float(s.value[key])) for s in samples if isinstance(s.value.get(key), (int, float))]
    return [t for t, _ in points], [v for _, v in points]


def _failed_per_lane(samples: Sequence[Op]) -> dict[str, tuple[list[float], list[float]]]:
    series: dict[str, tuple[list[float], list[float]]] = {}
    for sample in samples:
        for lane, stats in (sample.value.get("lanes") or {}).items():
            if isinstance(stats, dict) and isinstance(stats.get("failed"), (int, float)):
                times, values = series.setdefault(lane, ([], []))
                times.append(sample.time)
                values.append(float(stats["failed"]))
    return series


def plot_digest(history: Sequence[Op], windows: Sequence[FaultWindow], end: float,
                final_pending: int | None = None) -> Figure:
    """``final_pending``: rows still owed after the final read, drawn as the series' last point (the
    monitor stops with the load, before the outbox settles)."""
    samples = monitor_samples(history)
    figure = Figure(figsize=(9, 7), dpi=DPI)
    pending_axes, lag_axes, failed_axes = figure.subplots(3, 1, sharex=True)
    panels = [(pending_axes, "Pending outcomes (outbox rows owed)", "rows", {"pending": _series(samples, "pending_outcomes")}),
              (lag_axes, "Outbox lag (oldest owed row)", "age (s)", {"lag": _series(samples, "outbox_lag")}),
              (failed_axes, "Failed jobs per lane (RQ failed registry)", "jobs", _failed_per_lane(samples))]
    for axes, title, ylabel, series in panels:
        axes.set_title(title)
        axes.set_ylabel(ylabel)
        drawn = {name: points for name, points in series.items() if points[0]}
        if not drawn:
            no_data(axes)
            continue
        for index, (name, (times, values)) in enumerate(sorted(drawn.items())):
            axes.plot(times, values, label=name, drawstyle="steps-post", **lane_style(index))
        if axes is pending_axes and final_pending is not None:
            last_time, last = drawn["pending"][0][-1], drawn["pending"][1][-1]
            at = max(end, last_time)
            axes.plot([last_time, at], [last, final_pending], color="tab:blue", linestyle=":")
            axes.plot([at], [final_pending], marker="*", markersize=12, color="tab:green", linestyle="none",
                      label=f"after the final read: {final_pending}")
        if axes is not lag_axes:  # counts: whole numbers from 0, never a +-0.04 axis around a flat 0
            top = max(max(v for _, values in drawn.values() for v in values), final_pending or 0, 1)
            axes.set_ylim(0, top * 1.15)
            axes.yaxis.set_major_locator(MaxNLocator(integer=True))
        shade_faults(axes, windows, end)
        axes.legend(loc="upper right", fontsize="small")
    failed_axes.set_xlabel("run time (s)")
    figure.tight_layout()
    return figure
