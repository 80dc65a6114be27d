"""The knee benchmark's arithmetic (loadtests/bench_ramp.py, proc_cpu.py, profile_spy.py),
without running a ramp: the knee rule, /proc parsing, the profile summary."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]

import proc_cpu  # noqa: E402
from bench_ramp import KNEE_P99, _parse, _step_row, knee, steps_to_redo  # noqa: E402
from proc_cpu import _TICKS, ProcessTable, Sampler, _parse_stat  # noqa: E402
from profile_spy import summarise  # noqa: E402


def _ops(count: int, latency: float, failed: int = 0) -> list:
    return [SimpleNamespace(type="fail" if n < failed else "ok", latency=latency) for n in range(count)]


def _row(target: float, count: int, latency: float, failed: int = 0, offered: float | None = None) -> dict:
    return _step_row({"rate": target, "users": 1}, _ops(count, latency, failed), 10.0, None, None, offered=offered)


def test_a_step_holds_only_with_its_rate_its_p99_and_no_failure() -> None:
    assert _row(10, 100, KNEE_P99)["held"]
    assert not _row(10, 100, KNEE_P99 + 0.001)["held"]  # slow
    assert not _row(10, 100, 0.01, failed=1)["held"]  # one failure
    assert not _row(10, 94, 0.01)["held"]  # 9.4 of 10 req/s


def test_the_rate_is_judged_against_what_the_open_model_offered() -> None:
    # Poisson drew 9.3 req/s for a 10 req/s step and every request was served: the stack held.
    assert _row(10, 93, 0.01, offered=9.3)["held"]
    assert not _row(10, 93, 0.01)["held"]  # against the target it would not have
    # Offered 10.0, served 9.4: short, whatever the target.
    assert not _row(10, 94, 0.01, offered=10.0)["held"]
    assert _row(10, 94, 0.01, offered=9.3)["offered"] == 9.3


def test_the_knee_is_the_last_step_of_the_unbroken_run_from_the_start() -> None:
    rows = [_row(25, 250, 0.05), _row(50, 500, 0.1), _row(100, 1000, 0.9), _row(200, 2000, 0.1)]
    assert knee(rows) == 50  # 200 held again, but after 100 broke: not the knee
    assert knee(rows[:2]) == 50
    assert knee([_row(25, 250, 0.9)]) is None


def _sampled_row(target: float, other_cpu_s: float) -> dict:
    # 10 s on 2 cores = 20 CPU s of machine; the stack took 8, Locust 1, others the rest of what was busy.
    first = {"stack": 0.0, "load": 0.0, "machine_busy": 0.0, "machine_total": 0.0, "components": {}}
    last = {"stack": 8.0, "load": 1.0, "machine_busy": 9.0 + other_cpu_s, "machine_total": 20.0, "components": {}}
    return _step_row({"rate": target, "users": 1}, _ops(100, 0.01), 10.0, first, last)


def test_a_step_where_other_processes_took_over_a_tenth_of_the_machine_is_to_be_redone() -> None:
    rows = [_sampled_row(25, other_cpu_s=0.5), _sampled_row(50, other_cpu_s=2.0), _sampled_row(100, other_cpu_s=2.2)]
    assert [row["other_share"] for row in rows] == [0.025, 0.1, 0.11]
    assert steps_to_redo(rows) == [100]  # 10 % is still within the limit
    assert steps_to_redo([_row(25, 250, 0.05)]) == []  # no samples: nothing to judge


def test_proc_stat_parsing_survives_odd_command_names() -> None:
    line = f"42 (we ird) (name)) S 7 40 40 0 -1 0 0 0 0 0 {3 * _TICKS} {_TICKS} {2 * _TICKS} 0 20 0 1 0"
    stat = _parse_stat(line)
    assert (stat.pid, stat.ppid, stat.pgid, stat.cpu) == (42, 7, 40, 6.0)


def test_a_tree_counts_descendants_and_a_group_its_members() -> None:
    rows = [f"{pid} (p) S {ppid} {pgid} 0 0 -1 0 0 0 0 0 {_TICKS} 0 0 0 20 0 1 0"
            for pid, ppid, pgid in ((1, 0, 1), (10, 1, 10), (11, 10, 10), (12, 11, 20), (30, 1, 30))]
    table = ProcessTable({stat.pid: stat for stat in map(_parse_stat, rows)})
    assert table.tree(10) == {10, 11, 12}
    assert table.group(10) == {10, 11}
    assert table.cpu(table.tree(10) - table.group(10)) == 1.0


def test_a_ledger_server_outside_the_supervisor_counts_as_the_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    # supervisor 10 -> web 11; PostgreSQL 50 -> backend 51 (its own session); Locust group 70.
    rows = [f"{pid} (p) S {ppid} {pgid} 0 0 -1 0 0 0 0 0 {_TICKS} 0 0 0 20 0 1 0"
            for pid, ppid, pgid in ((10, 1, 10), (11, 10, 10), (50, 1, 50), (51, 50, 50), (70, 1, 70))]
    table = ProcessTable({stat.pid: stat for stat in map(_parse_stat, rows)})
    monkeypatch.setattr(proc_cpu, "read_table", lambda: table)
    monkeypatch.setattr(proc_cpu, "machine_busy_seconds", lambda: (5.0, 10.0))
    with_ledger = Sampler(load_pgid=70, stack_root=lambda: 10, ledger_root=50)
    without = Sampler(load_pgid=70, stack_root=lambda: 10)
    with_ledger.sample()
    without.sample()
    assert (with_ledger.samples[0]["stack"], with_ledger.samples[0]["load"]) == (4.0, 1.0)
    assert (without.samples[0]["stack"], without.samples[0]["load"]) == (2.0, 1.0)


@pytest.mark.parametrize("argv, said", [
    (["--ledger", "postgres", "--lock-trace"], "--lock-trace traces SQLite's write lock"),
    (["--ledger", "mysql"], "invalid choice: 'mysql'"),
])
def test_bad_options_exit_2_naming_the_option(argv: list[str], said: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exited:
        _parse(argv)
    assert exited.value.code == 2
    assert said in capsys.readouterr().err


def test_profile_summary_shares_by_innermost_frame_and_our_functions(tmp_path: Path) -> None:
    collapsed = tmp_path / "profile.txt"
    collapsed.write_text(
        "main (stack/web/serve.py:50);put_answer (stack/web/routes_answers.py:58);"
        "execute (sqlalchemy/engine/base.py:1) 3\n"
        "main (stack/web/serve.py:50);notify (threading.py:382) 1\n"
    )
    summary = summarise(collapsed)
    assert summary["samples"] == 4
    assert summary["self_by_package"] == [["sqlalchemy", 0.75], ["python (stdlib)", 0.25]]
    inclusive = dict(summary["inclusive_by_stack_function"])
    assert inclusive == {"main (serve.py)": 1.0, "put_answer (routes_answers.py)": 0.75}
