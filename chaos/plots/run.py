"""Run plots: throughput, latency and lane queues over time, with fault windows shaded.

Figures are built with matplotlib's object API on the Agg canvas, never pyplot:
no global figure registry to leak, no GUI backend, safe in threads and in tests
(nothing to close). Every plot draws "no data" rather than failing on an empty run.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from chaos.plots.digest import plot_digest
from chaos.history import FaultWindow, Op, fault_windows, monitor_samples, pair_ops
from chaos.plots.style import DPI, lane_style, mark_end_of_load, no_data, shade_faults, titled_figure

__all__ = ["PLOT_FILES", "load_end", "plot_latency", "plot_queues", "plot_run", "plot_throughput"]

PLOT_FILES = ("throughput.png", "latency.png", "queues.png", "digest.png")
_COLOURS = {"ok": "tab:green", "fail": "tab:orange", "info": "tab:red"}


def plot_run(history: Sequence[Op], out_dir: Path, final_pending: int | None = None) -> list[Path]:
    """Write the PNGs into ``out_dir`` (the digest's series: chaos/plots/digest.py); returns their paths.
    ``final_pending``: outbox rows still owed after the final read (the digest's last point)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    windows = fault_windows(history)
    end = max((op.time for op in history), default=0.0)
    paths = [out_dir / name for name in PLOT_FILES]
    draws = (plot_throughput, plot_latency, plot_queues,
             lambda h, w, e: plot_digest(h, w, e, final_pending=final_pending))
    for path, draw in zip(paths, draws):
        figure = draw(history, windows, end)
        FigureCanvasAgg(figure).print_png(str(path))
    return paths


def load_end(history: Sequence[Op]) -> float | None:
    """When the workload's last client op completed (monitor and nemesis ops are not load)."""
    return max((op.time for op in history if op.is_client and op.type != "invoke"), default=None)


def plot_throughput(history: Sequence[Op], windows: Sequence[FaultWindow], end: float) -> Figure:
    """Completions per second by outcome type."""
    figure, axes = titled_figure("Throughput (completions/s)", "run time (s)", "ops/s")
    done = [d for _, d in pair_ops(history) if d is not None]
    if not done:
        no_data(axes)
        return figure
    width = _bin_width(end)
    bins = int(end // width) + 1
    for kind, colour in _COLOURS.items():
        counts = [0] * bins
        for op in done:
            if op.type == kind:
                counts[int(op.time // width)] += 1
        if any(counts):
            axes.plot([i * width for i in range(bins)], [c / width for c in counts], color=colour, label=kind, drawstyle="steps-post")
    mark_end_of_load(axes, load_end(history))
    shade_faults(axes, windows, end)
    axes.legend(loc="upper right", fontsize="small")
    return figure


def plot_latency(history: Sequence[Op], windows: Sequence[FaultWindow], end: float) -> Figure:
    """One point per completed try at its invoke time; colour = outcome."""
    figure, axes = titled_figure("Latency by outcome", "run time (s)", "latency (s)")
    points: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for invoked, done in pair_ops(history):
        if done is not None:
            xs, ys = points[done.type]
            xs.append(invoked.time)
            ys.append(done.latency if done.latency is not None else done.time - invoked.time)
    if not points:
        no_data(axes)
        return figure
    for kind, (xs, ys) in sorted(points.items()):
        axes.scatter(xs, ys, s=6, color=_COLOURS.get(kind, "tab:gray"), label=f"{kind} ({len(xs)})")
    shade_faults(axes, windows, end)
    axes.legend(loc="upper right", fontsize="small")
    return figure


def plot_queues(history: Sequence[Op], windows: Sequence[FaultWindow], end: float) -> Figure:
    """Queue depth and oldest-job age per lane, from monitor samples."""
    figure = Figure(figsize=(9, 6), dpi=DPI)
    depth_axes, age_axes = figure.subplots(2, 1, sharex=True)
    depth_axes.set_title("Queue depth per lane")
    depth_axes.set_ylabel("jobs")
    age_axes.set_title("Oldest job age per lane")
    age_axes.set_ylabel("age (s)")
    age_axes.set_xlabel("run time (s)")
    series = _lane_series(monitor_samples(history))
    if not series:
        no_data(depth_axes)
        no_data(age_axes)
        return figure
    for index, (lane, (times, depths, ages)) in enumerate(sorted(series.items())):
        depth_axes.plot(times, depths, label=lane, drawstyle="steps-post", **lane_style(index))
        age_axes.plot(times, ages, label=lane, **lane_style(index))
    depth_axes.set_ylim(0, max(1.0, *(d for _, ds, _ in series.values() for d in ds if d == d)) * 1.15)
    depth_axes.yaxis.set_major_locator(MaxNLocator(integer=True))  # jobs: whole numbers from 0
    age_axes.set_ylim(bottom=0)
    for axes in (depth_axes, age_axes):
        mark_end_of_load(axes, load_end(history))
        shade_faults(axes, windows, end)
        axes.legend(loc="upper right", fontsize="small")
    figure.tight_layout()
    return figure


def _lane_series(samples: Sequence[Op]) -> dict[str, tuple[list[float], list[float], list[float]]]:
    series: dict[str, tuple[list[float], list[float], list[float]]] = defaultdict(lambda: ([], [], []))
    for sample in samples:
        for lane, stats in (sample.value.get("lanes") or {}).items():
            if not isinstance(stats, dict):
                continue
            times, depths, ages = series[lane]
            times.append(sample.time)
            depths.append(_number(stats.get("depth")))
            ages.append(_number(stats.get("oldest_age")))
    return dict(series)


def _number(value: object) -> float:
    """Missing/None plots as a gap (NaN), not as a misleading zero."""
    return float(value) if isinstance(value, (int, float)) else math.nan


def _bin_width(end: float) -> float:
    """1 s bins, widened so a long run has at most ~200 bins."""
    return max(1.0, math.ceil(end / 200))
