"""suite_passes.py (root): make test's main and compose passes, side by side."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import suite_passes
from stack.deploy.ports import listen_ports

REPO = Path(__file__).resolve().parents[2]


def _bounds(spelled: str) -> range:
    low, high = (int(x) for x in spelled.split("-"))
    return range(low, high + 1)


@pytest.mark.parametrize("workers", [0, 1, 3, 8])
def test_the_two_passes_draw_ports_from_disjoint_parts_of_the_range(workers: int) -> None:
    ports = range(20000, 32768)
    main, compose = (_bounds(part) for part in suite_passes.split_ports(workers, ports))
    assert main.start == ports.start and compose.stop <= ports.stop
    assert main.stop == compose.start  # adjacent, not overlapping
    assert len(compose) >= 100 and len(main) // max(workers, 1) >= 100  # each worker's slice is usable
    assert len(main) == len(compose) * max(workers, 1)  # a worker's slice is as large as compose's part


def test_the_main_pass_leaves_the_container_tests_to_the_compose_pass() -> None:
    main, compose = suite_passes.passes(3, ["-x", "--chaos-seed", "7"], python="py")
    assert main.argv[:5] == ["py", "-m", "pytest", "-n", "3"]
    assert "--ignore=tests/compose" in main.argv and "--chaos-target" not in main.argv
    assert compose.argv[compose.argv.index("--chaos-target") + 1] == "compose"
    assert "-n" not in compose.argv  # one process: its tests share one engine and one image build
    # the compose stack test last: the scenarios' session fixture started the engine, so it leaves it running
    assert compose.argv.index("tests/compose") > max(compose.argv.index(t) for t in suite_passes.COMPOSE_TESTS[:-1])
    for run in (main, compose):
        assert run.argv[-3:] == ["-x", "--chaos-seed", "7"]  # the user's pytest options reach both passes
    assert main.log is None and compose.log == REPO / suite_passes.COMPOSE_LOG
    assert suite_passes.passes(0, [], python="py")[0].argv[3] != "-n"  # 0 workers: one process


def test_every_parity_test_named_exists() -> None:
    for test in suite_passes.COMPOSE_TESTS:
        path, _, name = test.partition("::")
        assert (REPO / path).exists(), path
        if name:
            assert f"def {name}(" in (REPO / path).read_text(), test


@pytest.mark.parametrize(("argv", "named"), [(["--workers", "-1"], "--workers"), (["--compose", "later"], "--compose"),
                                             (["--workers", "two"], "--workers")])
def test_bad_options_are_named_with_exit_2(argv: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        suite_passes.parse(argv)
    assert exited.value.code == 2
    assert named in capsys.readouterr().err


def test_by_default_the_compose_pass_runs_after_the_main_one() -> None:
    args, _ = suite_passes.parse([])
    assert (args.workers, args.compose) == (3, "after")


def test_options_before_the_separator_are_ours_and_after_it_pytests() -> None:
    args, pytest_args = suite_passes.parse(["--workers", "2", "--compose", "after", "--", "--workers", "x"])
    assert (args.workers, args.compose, pytest_args) == (2, "after", ["--workers", "x"])


def _pass(name: str, code: str, tmp_path: Path, log: bool = False) -> suite_passes.Pass:
    return suite_passes.Pass(name, [sys.executable, "-c", code], "20000-20999",
                             log=tmp_path / f"{name}.log" if log else None)


def test_the_first_failing_pass_sets_the_exit_and_the_compose_log_is_shown(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    main = _pass("main", "import sys; sys.exit(0)", tmp_path)
    compose = _pass("compose", "import os, sys; print('ports', os.environ['PROCTOR_PORT_RANGE']); sys.exit(3)",
                    tmp_path, log=True)
    assert suite_passes.run_passes(main, compose, "alongside") == 3
    out = capsys.readouterr().out
    assert "ports 20000-20999" in out  # the log, shown after the main pass; the pass's own port range
    assert "main pass exit 0" in out and "compose pass exit 3" in out
    failing_main = _pass("main", "import sys; sys.exit(1)", tmp_path)
    assert suite_passes.run_passes(failing_main, _pass("compose", "import sys; sys.exit(3)", tmp_path, log=True),
                                   "after") == 1


def test_each_pass_has_its_own_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main = _pass("main", "import time; time.sleep(1.5)", tmp_path)
    compose = _pass("compose", "pass", tmp_path, log=True)
    assert suite_passes.run_passes(main, compose, "alongside") == 0
    assert main.took >= 1.5 and compose.took < 1.0, (main.took, compose.took)  # not the main pass's end


def test_skip_runs_no_compose_pass(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    compose = _pass("compose", f"open({str(marker)!r}, 'w')", tmp_path, log=True)
    assert suite_passes.run_passes(_pass("main", "pass", tmp_path), compose, "skip") == 0
    assert compose.process is None and not marker.exists()


RUNNER = textwrap.dedent("""
    import sys, suite_passes
    from pathlib import Path
    out = Path(sys.argv[1])
    child = ("import signal, sys, time, pathlib, os; p = pathlib.Path(sys.argv[1]); p.write_text(str(os.getpid()))\\n"
             "try:\\n    time.sleep(60)\\nexcept KeyboardInterrupt:\\n    p.with_suffix('.int').write_text('')")
    passes = [suite_passes.Pass(name, [sys.executable, "-c", child, str(out / f"{name}.pid")], "20000-20999",
                                log=out / "compose.log" if name == "compose" else None)
              for name in ("main", "compose")]
    sys.exit(suite_passes.run_passes(*passes, "alongside"))
""")


def _start_runner(tmp_path: Path) -> subprocess.Popen:
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(tmp_path)], cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    while not all((tmp_path / f"{name}.pid").exists() for name in ("main", "compose")):
        assert runner.poll() is None, "the runner ended before both passes started"
        time.sleep(0.05)
    return runner


def _ended(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


def test_sigterm_to_the_runner_interrupts_both_passes(tmp_path: Path) -> None:
    runner = _start_runner(tmp_path)
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=30) == 143
    for name in ("main", "compose"):
        assert (tmp_path / f"{name}.int").exists(), f"the {name} pass got no SIGINT"  # so pytest tears down


def test_a_runner_killed_outright_leaves_no_pass_behind(tmp_path: Path) -> None:
    runner = _start_runner(tmp_path)
    pids = [int((tmp_path / f"{name}.pid").read_text()) for name in ("main", "compose")]
    runner.kill()
    runner.wait()
    while not all(_ended(pid) for pid in pids):  # the kernel signals them at once; pytest-timeout guards a hang
        time.sleep(0.05)
    for name in ("main", "compose"):
        assert (tmp_path / f"{name}.int").exists(), f"the {name} pass got no SIGINT"


def test_the_runner_follows_the_given_port_range() -> None:
    main, compose = suite_passes.passes(3, [])
    assert _bounds(main.port_range).start == listen_ports().start
    assert _bounds(compose.port_range).stop <= listen_ports().stop


def test_cores_busy_counts_every_tick_but_idle_and_iowait() -> None:
    before = suite_passes.cpu_ticks("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3\n")
    after = suite_passes.cpu_ticks("cpu  400 0 200 900 100 0 0 0 0 0\n")
    assert before == (200, 1000) and after == (600, 1600)
    assert suite_passes.cores_busy(before, after, 2) == pytest.approx(2 * 400 / 600)
    assert suite_passes.cores_busy(after, after, 2) == 0.0
    busy, total = suite_passes.cpu_ticks()  # the machine's own
    assert 0 <= busy <= total
