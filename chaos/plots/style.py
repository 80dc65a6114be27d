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

__all__ = ["DPI", "END_OF_LOAD", "LANE_STYLES", "lane_style", "mark_end_of_load", "no_data", "shade_faults",
           "titled_figure"]

END_OF_LOAD = "end of load"
"""Label of the marker where the workload stopped: a drop after it is the load ending, not a fault."""

LANE_STYLES = ({"linewidth": 3.2, "linestyle": "-", "alpha": 0.6}, {"linewidth": 1.8, "linestyle": "--"},
               {"linewidth": 1.2, "linestyle": ":"}, {"linewidth": 1.0, "linestyle": "-."})
"""Lanes drawn thick to thin, solid to dotted: two lanes with the same values (merit and sms both
at 0) both stay visible instead of the last one hiding the first."""

_LABEL_ROWS = 8

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


def lane_style(index: int) -> dict[str, object]:
    return dict(LANE_STYLES[index % len(LANE_STYLES)])


def shade_faults(axes: Axes, windows: Sequence[FaultWindow], end: float) -> None:
    """Grey band per fault (Jepsen's nemesis regions); an unhealed fault runs to the end.

    Each band's label goes on the first row where it overlaps no label already placed, measured
    with the renderer (text widths depend on the font, not on a guess)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    for i, window in enumerate(windows):
        stop = window.end if window.end is not None else end
        axes.axvspan(window.start, max(stop, window.start), color="0.5", alpha=0.2,
                     label="fault" if i == 0 else None, linewidth=0)
    if not windows:
        return
    axes.set_xlim(*axes.get_xlim())  # freeze the x range: label extents are measured against it
    renderer = FigureCanvasAgg(axes.figure).get_renderer()
    placed: list = []
    for window in windows:
        text = axes.text(window.start, 1.0, f" {window.kind} {window.target}", transform=axes.get_xaxis_transform(),
                         fontsize="x-small", va="top")
        for row in range(_LABEL_ROWS):
            text.set_y(1.0 - 0.07 * row)
            box = text.get_window_extent(renderer)
            if not any(box.overlaps(other) for other in placed):
                break
        placed.append(text.get_window_extent(renderer))


def mark_end_of_load(axes: Axes, at: float | None) -> None:
    """A dashed line where the workload's last client op completed."""
    if at is not None:
        axes.axvline(at, color="black", linestyle="--", linewidth=1.0, label=END_OF_LOAD)


def no_data(axes: Axes) -> None:
    """A panel with nothing to draw says so, rather than staying blank or failing."""
    axes.text(0.5, 0.5, "no data", transform=axes.transAxes, ha="center", va="center", color="0.4")
