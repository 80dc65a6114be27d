"""The exam digest's time series as a run-report plot (``digest.png``, #12).

The run's monitor samples ``/metrics`` through HAProxy during the load (chaos/observe/monitor.py):
the same series `proctor digest` shows on one screen. This plot draws what the queue plot
(``queues.png``: depth and oldest-job age per lane) does not: pending outcomes and outbox
lag, and RQ's failed jobs per lane. Fault windows are shaded as in every run plot.
"""

from __future__ import annotations

from typing import Sequence

from matplotlib.figure import Figure

from chaos.history import FaultWindow, Op, monitor_samples
from chaos.plots.style import DPI, no_data, shade_faults

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


def plot_digest(history: Sequence[Op], windows: Sequence[FaultWindow], end: float) -> Figure:
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
        for name, (times, values) in sorted(drawn.items()):
            axes.plot(times, values, label=name, drawstyle="steps-post")
        shade_faults(axes, windows, end)
        axes.legend(loc="upper right", fontsize="small")
    failed_axes.set_xlabel("run time (s)")
    figure.tight_layout()
    return figure
