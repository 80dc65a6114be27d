"""The look every run plot shares: resolution, titled axes, shaded fault windows, "no data".

The plot modules (chaos/plots/run.py, chaos/plots/digest.py, chaos/plots/ai_lane.py) draw with
matplotlib's object API on the Agg canvas and take these from here, so none of them
reaches into another's private helpers and none imports another.
"""

from __future__ import annotations

from typing import Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from chaos.history import FaultWindow

__all__ = ["DPI", "no_data", "shade_faults", "titled_figure"]

DPI = 100
"""Pixels per inch of every run plot: a 9-inch figure is 900 px wide."""


def titled_figure(title: str, xlabel: str, ylabel: str) -> tuple[Figure, Axes]:
    """A one-panel figure with its title and axis labels set."""
    figure = Figure(figsize=(9, 4), dpi=DPI, layout="tight")
    axes = figure.add_subplot()
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    return figure, axes


def shade_faults(axes: Axes, windows: Sequence[FaultWindow], end: float) -> None:
    """Grey band per fault (Jepsen's nemesis regions); an unhealed fault runs to the end."""
    for i, window in enumerate(windows):
        stop = window.end if window.end is not None else end
        label = "fault" if i == 0 else None
        axes.axvspan(window.start, max(stop, window.start), color="0.5", alpha=0.2, label=label, linewidth=0)
        height = 1.0 - 0.06 * (i % 3)  # staggered, so labels of close faults do not overprint
        axes.text(window.start, height, f" {window.kind} {window.target}", transform=axes.get_xaxis_transform(),
                  fontsize="x-small", va="top")


def no_data(axes: Axes) -> None:
    """A panel with nothing to draw says so, rather than staying blank or failing."""
    axes.text(0.5, 0.5, "no data", transform=axes.transAxes, ha="center", va="center", color="0.4")
