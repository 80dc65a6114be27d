"""The digest's time series in the run report (chaos/plots/digest.py) and the monitor fields it draws."""

from __future__ import annotations

from chaos.plots.digest import plot_digest
from chaos.history import MONITOR, SAMPLE, Op
from chaos.observe.monitor import lane_sample

METRICS = """proctor_http_requests_total{node="web_2"} 40.0
proctor_http_5xx_total{node="web_2"} 1.0
proctor_lane_depth{lane="ai"} 1990.0
proctor_lane_failed_jobs{lane="ai"} 3.0
proctor_lane_failed_jobs{lane="merit"} 0.0
proctor_pending_outcomes 4010.0
proctor_outbox_lag_seconds 12.5
"""


def _sample(index: int, time: float, value: dict) -> Op:
    return Op(index=index, time=time, process=MONITOR, type="info", f=SAMPLE, value=value)


def test_the_monitor_records_failed_jobs_and_the_scraped_nodes_totals() -> None:
    sample = lane_sample(METRICS)
    assert sample["lanes"]["ai"] == {"depth": 1990.0, "failed": 3.0}
    assert sample["pending_outcomes"] == 4010.0 and sample["outbox_lag"] == 12.5
    assert (sample["requests"], sample["errors_5xx"]) == (40.0, 1.0)


def _lines(axes) -> dict[str, list[float]]:  # matplotlib Axes
    return {line.get_label(): list(line.get_ydata()) for line in axes.get_lines()}


def test_the_plot_draws_pending_outcomes_lag_and_failed_jobs_over_time() -> None:
    later = {**lane_sample(METRICS), "pending_outcomes": 3000.0, "lanes": {"ai": {"failed": 5.0}}}
    history = [_sample(0, 1.0, lane_sample(METRICS)), _sample(1, 2.0, later)]
    pending, lag, failed = plot_digest(history, [], end=2.0).axes
    assert _lines(pending) == {"pending": [4010.0, 3000.0]}
    assert _lines(lag) == {"lag": [12.5, 12.5]}
    assert _lines(failed) == {"ai": [3.0, 5.0], "merit": [0.0]}


def test_a_run_without_samples_says_no_data_in_every_panel() -> None:
    for axes in plot_digest([], [], end=0.0).axes:
        assert [text.get_text() for text in axes.texts] == ["no data"]
