"""Issue #27 items 2 and 3: `proctor check` on an interrupted run is unknown (exit 2) and names
the interruption; on a folder that holds no run it writes nothing and answers in one line."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from chaos.analyze import analyze, check_main
from chaos.interrupt import Interrupted, read_marker, signals_interrupt, write_marker
from test_analyze import build_run, drop_history_lines


def test_an_interrupted_run_is_unknown_even_with_faults_never_injected(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    run = build_run(tmp_path)
    drop_history_lines(run, "fault-start")  # what a cut run looks like: the declared fault never came
    drop_history_lines(run, "fault-end")
    assert check_main([str(run), "--no-plots"]) == 1  # without the marker: invalid (the control)
    capsys.readouterr()
    write_marker(run, signal.SIGINT, "load and faults")
    assert check_main([str(run), "--no-plots"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("UNKNOWN") and "interrupted by SIGINT during load and faults" in out
    report = analyze(run, plots=False)
    assert report["interrupted"]["signal"] == "SIGINT" and report["valid"] == "unknown"
    assert "**Interrupted** by SIGINT" in (run / "report.md").read_text()


def test_a_valid_run_interrupted_is_unknown_too(tmp_path: Path) -> None:
    run = build_run(tmp_path)
    assert analyze(run, plots=False)["valid"] is True
    write_marker(run, signal.SIGTERM, "final read")
    assert analyze(run, plots=False)["valid"] == "unknown"


@pytest.mark.parametrize("layout", ["empty", "results-root"])
def test_check_writes_nothing_into_a_folder_that_is_not_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              layout: str) -> None:
    folder = tmp_path / "results"
    folder.mkdir()
    if layout == "results-root":
        build_run(folder / "runs" / "20260101T000000Z-demo").mkdir(parents=True, exist_ok=True)
    before = sorted(folder.rglob("*"))
    assert check_main([str(folder)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "is not a run folder" in err
    assert sorted(folder.rglob("*")) == before


def test_signals_interrupt_turns_sigterm_into_exit_143_and_restores_handlers() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as caught:
        with signals_interrupt():
            signal.raise_signal(signal.SIGTERM)
    assert caught.value.exit_code == 143 and caught.value.signal_name == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before
    with pytest.raises(Interrupted) as caught:
        with signals_interrupt():
            raise KeyboardInterrupt  # asyncio's own Ctrl-C
    assert caught.value.exit_code == 130


def test_the_marker_round_trips(tmp_path: Path) -> None:
    assert read_marker(tmp_path) is None
    write_marker(tmp_path, signal.SIGINT, "start-up")
    assert read_marker(tmp_path)["phase"] == "start-up"
