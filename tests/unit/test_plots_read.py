"""Issue #27 item 7: the plots a newcomer misread. Each test inspects the figure itself: the
end-of-load marker, labels that do not overlap, the digest's final value and integer axis, the
p99 gate line, lanes that stay visible when equal, and the AI plot's shared time origin."""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg

from chaos.history import Op, fault_windows
from chaos.plots.digest import plot_digest
from chaos.plots.run import load_end, plot_queues, plot_throughput
from chaos.plots.style import END_OF_LOAD

OUT = Path(__file__).resolve().parents[2] / "results" / "plots-read"  # kept to be looked at


def _op(index: int, time: float, process: object, type_: str, f: str, value: object = None) -> Op:
    return Op(index=index, time=time, process=process, type=type_, f=f, value=value)


def _history(faults: int) -> list[Op]:
    ops: list[Op] = []
    for i in range(40):
        ops.append(_op(len(ops), i * 0.25, i % 4, "invoke", "answer"))
        ops.append(_op(len(ops), i * 0.25 + 0.1, i % 4, "ok", "answer"))
    for k in range(faults):  # close together: their labels would overprint
        value = {"fault_id": k, "kind": "kill", "target": f"worker_merit_{k}"}
        ops.append(_op(len(ops), 2.0 + 0.3 * k, "nemesis", "info", "fault-start", value))
        ops.append(_op(len(ops), 2.2 + 0.3 * k, "nemesis", "info", "fault-end", value))
    for j in range(30):  # the monitor keeps sampling after the load: its ops are not load
        lanes = {"merit": {"depth": 0, "oldest_age": 0.0, "failed": 0}, "sms": {"depth": 0, "oldest_age": 0.0,
                                                                              "failed": 0}}
        ops.append(_op(len(ops), j * 0.5, "monitor", "ok", "sample",
                       {"lanes": lanes, "pending_outcomes": 3 if j > 20 else j % 4, "outbox_lag": 0.1}))
    return sorted(ops, key=lambda op: op.time)


def _save(figure, name: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(figure).print_png(str(OUT / name))


def test_throughput_marks_the_end_of_the_load() -> None:
    history = _history(faults=1)
    figure = plot_throughput(history, fault_windows(history), max(op.time for op in history))
    _save(figure, "throughput.png")
    [marker] = [line for line in figure.axes[0].lines if line.get_label() == END_OF_LOAD]
    assert marker.get_xdata()[0] == load_end(history) == 39 * 0.25 + 0.1


def test_fault_labels_do_not_overlap() -> None:
    history = _history(faults=5)
    figure = plot_throughput(history, fault_windows(history), max(op.time for op in history))
    _save(figure, "throughput-5-faults.png")
    renderer = FigureCanvasAgg(figure).get_renderer()
    boxes = [t.get_window_extent(renderer) for t in figure.axes[0].texts if "worker_merit" in t.get_text()]
    assert len(boxes) == 5
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_the_control_close_labels_on_one_row_would_overlap() -> None:
    """The check above can fail: the same labels all on the top row do overlap."""
    history = _history(faults=5)
    figure = plot_throughput(history, fault_windows(history), max(op.time for op in history))
    texts = [t for t in figure.axes[0].texts if "worker_merit" in t.get_text()]
    for text in texts:
        text.set_y(1.0)
    renderer = FigureCanvasAgg(figure).get_renderer()
    boxes = [t.get_window_extent(renderer) for t in texts]
    assert any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_digest_ends_at_the_final_read_and_counts_from_zero() -> None:
    history = _history(faults=1)
    figure = plot_digest(history, fault_windows(history), max(op.time for op in history), final_pending=0)
    _save(figure, "digest.png")
    pending, _lag, failed = figure.axes
    [final] = [line for line in pending.lines if line.get_label().startswith("after the final read")]
    assert final.get_ydata()[-1] == 0 and final.get_label() == "after the final read: 0"
    low, high = failed.get_ylim()
    assert low == 0 and high >= 1  # a flat 0 sits on the floor of a whole-number axis, not mid +-0.04
    assert all(float(t).is_integer() for t in failed.get_yticks())


def test_queue_lanes_with_equal_values_stay_distinguishable() -> None:
    history = _history(faults=0)
    figure = plot_queues(history, [], max(op.time for op in history))
    _save(figure, "queues.png")
    merit, sms = (next(l for l in figure.axes[0].lines if l.get_label() == lane) for lane in ("merit", "sms"))
    assert list(merit.get_ydata()) == list(sms.get_ydata())  # drawn on top of each other...
    assert (merit.get_linewidth(), merit.get_linestyle()) != (sms.get_linewidth(), sms.get_linestyle())
    assert merit.get_linewidth() > sms.get_linewidth()  # ...the first one drawn is the wider: it shows around


def test_ramp_p99_panel_has_the_gate_line(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    from chaos.ramp import report as ramp_report

    captured = {}
    real_close = plt.close
    plt.close = lambda fig: captured.setdefault("fig", fig)  # keep the figure to inspect it
    try:
        series = {"t": [0, 1, 2], "offered": [25, 25, 50], "achieved": [24, 25, 49], "p50": [0.01, 0.02, 0.02],
                  "p99": [0.05, 0.2, 0.3], "load_balancer": [0, 0, 0], "application": [0, 0, 0], "client": [0, 0, 0]}
        assert ramp_report.plot_ramp(series, tmp_path / "ramp.png", p99_limit=0.25)
    finally:
        plt.close = real_close
    figure = captured["fig"]
    figure.savefig(OUT / "ramp.png") if OUT.mkdir(parents=True, exist_ok=True) is None else None
    [gate] = [line for line in figure.axes[1].lines if line.get_label().startswith("gate: p99")]
    assert list(gate.get_ydata()) == [0.25, 0.25]
    real_close(figure)


def test_ai_lane_shares_the_run_time_origin(tmp_path: Path) -> None:
    from chaos.ledgers import Ledgers, OutboxRow
    from chaos.ledgers import EffectRow
    from chaos.plots import ai_lane

    t0 = 1_800_000_000.0
    outbox = tuple(OutboxRow(f"n{i}", "a", "narrative", "done", created_at=t0 + 5 + i * 0.1, done_at=t0 + 7 + i)
                   for i in range(3))
    effects = tuple(EffectRow(**{**_effect_fields(EffectRow), "operation_id": f"n{i}", "started_at": t0 + 6 + i})
                    for i in range(3))
    ledgers = Ledgers(outbox=outbox, ai_effects=effects, ai_reservations=())
    captured = {}
    real_print = FigureCanvasAgg.print_png

    def keep(canvas, path, *args, **kwargs):
        captured["fig"] = canvas.figure
        return real_print(canvas, path, *args, **kwargs)

    FigureCanvasAgg.print_png = keep
    try:
        assert ai_lane.plot_ai_lane(ledgers, 0.01, tmp_path, run_origin=t0)
    finally:
        FigureCanvasAgg.print_png = real_print
    backlog = captured["fig"].axes[1]
    waiting = next(line for line in backlog.lines if line.get_label() == "narratives waiting")
    assert min(waiting.get_xdata()) == 5.0  # seconds of run time, as in every other plot, not 0
    assert "run time (s)" in captured["fig"].axes[2].get_xlabel()
    assert not any("theoretical" in line.get_label() for line in backlog.lines)


def _effect_fields(cls) -> dict:
    import dataclasses

    return {f.name: (f.default if f.default is not dataclasses.MISSING else None) for f in dataclasses.fields(cls)}
