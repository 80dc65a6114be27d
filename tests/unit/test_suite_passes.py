"""suite_passes.py (root): make test's main and compose passes, side by side."""

from __future__ import annotations

import os
import re
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
    assert "--no-loadscope-reorder" in main.argv  # files in the collection's order: long_files_first's
    assert compose.argv[compose.argv.index("--chaos-target") + 1] == "compose"
    assert "-n" not in compose.argv and compose.spread == []  # one process unless asked
    # the compose stack test last: the scenarios' session fixture started the engine, so it leaves it running
    assert compose.argv.index("tests/compose") > max(compose.argv.index(t) for t in suite_passes.COMPOSE_TESTS[:-1])
    for run in (main, compose):
        assert run.argv[-3:] == ["-x", "--chaos-seed", "7"]  # the user's pytest options reach both passes
    assert main.log is None and compose.log == REPO / suite_passes.COMPOSE_LOG
    assert suite_passes.passes(0, [], python="py")[0].argv[3] != "-n"  # 0 workers: one process


def test_the_compose_pass_keeps_its_workers_aside_until_its_set_up_is_ready() -> None:
    main, compose = suite_passes.passes(3, [], python="py", compose_workers=2)
    assert compose.spread == ["-n", "2", "--dist", "loadfile", "--no-loadscope-reorder"]
    assert "-n" not in compose.argv  # given at its start, and only if the set-up ahead is ready


class Item:
    """What ``long_files_first`` and ``ScenariosDone`` read of a pytest item."""

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid

    def __repr__(self) -> str:
        return self.nodeid


def test_the_main_pass_hands_out_the_long_files_first() -> None:
    collected = [Item(n) for n in ("tests/checkers/test_a.py::t1", "tests/integration/test_b.py::t1",
                                   "tests/unit/test_c.py::t1", "tests/security/test_d.py::t1",
                                   "tests/integration/test_b.py::t2", "chaos/test_e.py::t1", "chaos/test_f.py::t1",
                                   "chaos/test_e.py::t2", "conftest_like_other.py::t")]
    ordered = [item.nodeid for item in suite_passes.long_files_first(collected)]
    assert ordered == ["chaos/test_e.py::t1", "chaos/test_f.py::t1", "chaos/test_e.py::t2",
                       "tests/integration/test_b.py::t1", "tests/integration/test_b.py::t2",
                       "tests/security/test_d.py::t1",
                       "tests/checkers/test_a.py::t1", "tests/unit/test_c.py::t1", "conftest_like_other.py::t"]


def test_within_a_folder_the_longest_files_go_first_longest_first() -> None:
    longest, second = suite_passes.LONGEST_FILES[:2]
    collected = [Item(n) for n in ("chaos/test_short.py::t1", f"{second}::t1", "tests/unit/test_u.py::t1",
                                   f"{longest}::t1", f"{second}::t2", f"{longest}::t2", "chaos/test_short.py::t2")]
    ordered = [item.nodeid for item in suite_passes.long_files_first(collected)]
    assert ordered == [f"{longest}::t1", f"{longest}::t2", f"{second}::t1", f"{second}::t2",
                       "chaos/test_short.py::t1", "chaos/test_short.py::t2", "tests/unit/test_u.py::t1"]
    for path in suite_passes.LONGEST_FILES:
        assert (REPO / path).exists(), path  # a renamed file would silently lose its place


def test_the_other_long_files_follow_the_scenarios_ahead_of_their_folders() -> None:
    security = next(path for path in suite_passes.LONGEST_FILES if path.startswith("tests/security/"))
    collected = [Item(n) for n in ("tests/integration/test_short.py::t", f"{security}::t", "chaos/test_short.py::t",
                                   "tests/unit/test_u.py::t")]
    ordered = [item.nodeid for item in suite_passes.long_files_first(collected)]
    assert ordered == ["chaos/test_short.py::t", f"{security}::t", "tests/integration/test_short.py::t",
                       "tests/unit/test_u.py::t"]


def test_every_parity_test_named_exists() -> None:
    for test in suite_passes.COMPOSE_TESTS:
        path, _, name = test.partition("::")
        assert (REPO / path).exists(), path
        if name:
            assert f"def {name}(" in (REPO / path).read_text(), test


@pytest.mark.parametrize(("argv", "named"), [(["--workers", "-1"], "--workers"), (["--compose", "later"], "--compose"),
                                             (["--workers", "two"], "--workers"),
                                             (["--compose-workers", "0"], "--compose-workers")])
def test_bad_options_are_named_with_exit_2(argv: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        suite_passes.parse(argv)
    assert exited.value.code == 2
    assert named in capsys.readouterr().err


class Report:
    def __init__(self, nodeid: str, when: str) -> None:
        self.nodeid, self.when = nodeid, when


def _phases(done: suite_passes.ScenariosDone, nodeid: str, *whens: str) -> None:
    for when in whens:
        done.pytest_runtest_logreport(Report(nodeid, when))  # type: ignore[arg-type]


def test_scenarios_done_is_written_once_the_last_chaos_test_has_torn_down(tmp_path: Path) -> None:
    done = suite_passes.ScenariosDone(tmp_path / "results" / "main-scenarios.done")
    ids = ["chaos/test_a.py::t1", "chaos/test_a.py::t2", "chaos/test_b.py::t1", "tests/unit/test_c.py::t1"]
    done.pytest_xdist_node_collection_finished(object(), ids)
    done.pytest_xdist_node_collection_finished(object(), ids[:1])  # the next worker's collection changes nothing
    _phases(done, "chaos/test_a.py::t1", "setup", "call", "teardown")
    _phases(done, "tests/unit/test_c.py::t1", "setup", "call", "teardown")
    _phases(done, "chaos/test_b.py::t1", "setup", "call", "teardown")
    _phases(done, "chaos/test_a.py::t2", "setup", "call")
    assert not done.path.exists()  # one scenario test is still tearing its stack down
    _phases(done, "chaos/test_a.py::t2", "teardown")
    assert done.path.exists()


def test_a_crashed_workers_scenario_test_counts_as_finished(tmp_path: Path) -> None:
    done = suite_passes.ScenariosDone(tmp_path / "done")
    done.pytest_xdist_node_collection_finished(object(), ["chaos/test_a.py::t1", "chaos/test_a.py::t2"])
    _phases(done, "chaos/test_a.py::t1", "setup", "call", "teardown")
    _phases(done, "chaos/test_a.py::t2", "setup")
    assert not done.path.exists()
    _phases(done, "chaos/test_a.py::t2", "???")  # xdist's report for the test a dead worker was running
    assert done.path.exists()


def test_without_scenarios_collected_the_file_is_written_at_once(tmp_path: Path) -> None:
    class Session:
        items = [Item("tests/unit/test_c.py::t1")]

    done = suite_passes.ScenariosDone(tmp_path / "done")
    done.pytest_collection_finish(Session())  # type: ignore[arg-type]
    assert done.path.exists()


def test_a_real_xdist_pass_writes_scenarios_done_while_its_other_files_still_run(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller's hooks as xdist calls them: a test of the other file waits for the file, which
    appears only once the chaos/ tests, run by the other worker, have finished."""
    done = pytester.path / "scenarios.done"
    pytester.makeconftest(f"""
        import pathlib, suite_passes
        def pytest_configure(config):
            if not hasattr(config, "workerinput"):  # the controller (PYTEST_XDIST_WORKER is the outer run's)
                config.pluginmanager.register(suite_passes.ScenariosDone(pathlib.Path({str(done)!r})))
    """)
    pytester.mkdir("chaos")
    pytester.path.joinpath("chaos", "test_scenario.py").write_text(
        "import time\ndef test_one():\n    time.sleep(0.5)\ndef test_two():\n    time.sleep(0.5)\n")
    pytester.makepyfile(test_other=f"""
        import pathlib, time
        def test_sees_the_scenarios_done():
            while not pathlib.Path({str(done)!r}).exists():  # pytest-timeout guards a file never written
                time.sleep(0.05)
    """)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider", "--timeout", "60")
    result.assert_outcomes(passed=3)
    assert done.exists()


def test_in_tail_mode_the_compose_pass_starts_once_the_scenarios_are_done_before_the_main_pass_ends(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    setup = _setup_ahead(tmp_path, f"import pathlib; pathlib.Path({str(tmp_path / 'ready')!r}).write_text('ready')")
    marker = tmp_path / "scenarios.done"
    main = _pass("main", f"import pathlib, time; time.sleep(1.0); pathlib.Path({str(marker)!r}).write_text(repr(time.time()));"
                         f" time.sleep(2.0); pathlib.Path({str(tmp_path / 'main.end')!r}).write_text(repr(time.time()))",
                 tmp_path)
    main.scenarios_done = marker
    compose = _stamped("compose", tmp_path)
    compose.log = tmp_path / "compose.log"
    assert suite_passes.run_passes(main, compose, "tail", setup) == 0
    assert _at(marker) <= _at(tmp_path / "compose.start") < _at(tmp_path / "main.end")
    assert re.search(r"the main pass's scenario files are done \(\d+ s in\): the compose pass runs alongside",
                     capsys.readouterr().out)


def test_in_tail_mode_a_main_pass_that_never_says_so_has_the_compose_pass_after_it(tmp_path: Path) -> None:
    setup = _setup_ahead(tmp_path, f"import pathlib; pathlib.Path({str(tmp_path / 'ready')!r}).write_text('ready')")
    main = _stamped("main", tmp_path, seconds=1.0)
    main.scenarios_done = tmp_path / "scenarios.done"
    compose = _stamped("compose", tmp_path)
    assert suite_passes.run_passes(main, compose, "tail", setup) == 0
    assert _at(tmp_path / "compose.start") >= _at(tmp_path / "main.end")


def test_by_default_the_compose_pass_runs_beside_the_main_ones_tail() -> None:
    args, _ = suite_passes.parse([])
    assert (args.workers, args.compose, args.compose_workers) == (3, "tail", 2)


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


SETUP_AHEAD = textwrap.dedent("""
    import pathlib, sys, time
    out = pathlib.Path(sys.argv[1])
    time.sleep(0.8)  # longer than the main pass: the compose pass must wait for it
    (out / "ready").write_text("ready")
    (out / "ready.at").write_text(repr(time.time()))
    try:
        time.sleep(60)
    except KeyboardInterrupt:
        (out / "released.at").write_text(repr(time.time()))
""")


def _setup_ahead(tmp_path: Path, code: str = SETUP_AHEAD) -> suite_passes.Pass:
    return suite_passes.Pass("compose set-up ahead", [sys.executable, "-c", code, str(tmp_path)], None,
                             log=tmp_path / "setup.log", ready=tmp_path / "ready")


def _stamped(name: str, tmp_path: Path, seconds: float = 0.3) -> suite_passes.Pass:
    """A pass that notes when it started and ended."""
    code = (f"import time, pathlib; d = pathlib.Path({str(tmp_path)!r}); d.joinpath('{name}.start').write_text(repr(time.time()));"
            f" time.sleep({seconds}); d.joinpath('{name}.end').write_text(repr(time.time()))")
    return _pass(name, code, tmp_path)


def _at(path: Path) -> float:
    return float(path.read_text())


def test_the_compose_pass_waits_for_its_set_up_ahead_and_releases_it_when_done(tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    setup = _setup_ahead(tmp_path)
    (tmp_path / "ready").write_text("ready")  # an earlier run's: must not count
    main, compose = _pass("main", "pass", tmp_path), _stamped("compose", tmp_path)
    assert suite_passes.run_passes(main, compose, "after", setup) == 0
    assert _at(tmp_path / "compose.start") >= _at(tmp_path / "ready.at")
    assert _at(tmp_path / "released.at") >= _at(tmp_path / "compose.end")  # held the engine through the pass
    assert setup.took >= 0.8 and "compose set-up ahead: ready after" in capsys.readouterr().out


def test_the_set_up_ahead_is_timed_until_it_was_ready_not_until_the_main_pass_ended(tmp_path: Path) -> None:
    setup = _setup_ahead(tmp_path)
    main = _pass("main", "import time; time.sleep(2.5)", tmp_path)  # ends well after the set-up is ready
    assert suite_passes.run_passes(main, _pass("compose", "pass", tmp_path), "after", setup) == 0
    assert 0.8 <= setup.took < main.took, (setup.took, main.took)  # the old reading was at least the main pass's


def test_a_failed_set_up_ahead_leaves_the_verdict_to_the_compose_pass(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    setup = _setup_ahead(tmp_path, "import sys; print('mmdebstrap failed'); sys.exit(1)")
    compose = _stamped("compose", tmp_path)
    assert suite_passes.run_passes(_pass("main", "pass", tmp_path), compose, "after", setup) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "compose.end").exists()  # it ran: its own set-up reports a failure as a test's
    assert "ended with exit 1" in out and "mmdebstrap failed" in out


def test_skip_has_no_set_up_ahead(tmp_path: Path) -> None:
    setup = _setup_ahead(tmp_path)
    assert suite_passes.run_passes(_pass("main", "pass", tmp_path), _pass("compose", "pass", tmp_path, log=True),
                                   "skip", setup) == 0
    assert setup.process is None


def test_alongside_the_compose_pass_starts_once_its_set_up_is_ready_before_the_main_pass_ends(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    setup = _setup_ahead(tmp_path)  # ready after 0.8 s
    main = _stamped("main", tmp_path, seconds=3.0)
    compose = _stamped("compose", tmp_path)
    compose.log = tmp_path / "compose.log"
    assert suite_passes.run_passes(main, compose, "alongside", setup) == 0
    assert _at(tmp_path / "ready.at") <= _at(tmp_path / "compose.start") < _at(tmp_path / "main.end")
    assert _at(tmp_path / "released.at") >= _at(tmp_path / "compose.end")  # held the engine through the pass
    out = capsys.readouterr().out
    assert "the compose pass runs alongside from now on" in out and "compose set-up ahead: ready after" in out


ARGV = "import sys, pathlib; pathlib.Path({!r}).write_text(' '.join(sys.argv[1:]))"  # as pytest's, after -m pytest


@pytest.mark.parametrize(("mode", "state", "spread"), [("after", "ready", True), ("alongside", "ready", True),
                                                        ("after", "failed", False), ("alongside", "unavailable", False)])
def test_the_compose_pass_gets_its_workers_only_when_its_set_up_is_ready(tmp_path: Path, mode: str, state: str,
                                                                         spread: bool) -> None:
    setup = _setup_ahead(tmp_path, f"import pathlib; pathlib.Path({str(tmp_path / 'ready')!r}).write_text('{state}')")
    workers = ["-n", "2", "--dist", "loadfile"]
    compose = suite_passes.Pass("compose", [sys.executable, "-c", ARGV.format(str(tmp_path / "argv")), "the-tests"],
                                "20000-20999", log=tmp_path / "compose.log", spread=workers)
    assert suite_passes.run_passes(_pass("main", "import time; time.sleep(0.5)", tmp_path), compose, mode, setup) == 0
    given = (tmp_path / "argv").read_text()
    assert given == ("-n 2 --dist loadfile the-tests" if spread else "the-tests"), given


def test_make_tests_set_up_ahead_is_compose_setup_with_a_ready_file() -> None:
    setup = suite_passes.setup_ahead(python="py")
    assert setup.argv[:4] == ["py", "-m", "chaos.deployment.compose_setup", "--ahead"]
    assert setup.argv[4] == str(setup.ready) and setup.port_range is None and setup.log is not None


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


RUNNER_WITH_SETUP = textwrap.dedent("""
    import sys, suite_passes
    from pathlib import Path
    out = Path(sys.argv[1])
    child = ("import sys, time, pathlib, os; p = pathlib.Path(sys.argv[1]); p.write_text(str(os.getpid()))\\n"
             "try:\\n    time.sleep(60)\\nexcept KeyboardInterrupt:\\n    p.with_suffix('.int').write_text('')")
    main = suite_passes.Pass("main", [sys.executable, "-c", child, str(out / "main.pid")], "20000-20999")
    compose = suite_passes.Pass("compose", [sys.executable, "-c", "pass"], "21000-21999")
    setup = suite_passes.Pass("compose set-up ahead", [sys.executable, "-c", child, str(out / "setup.pid")], None,
                              log=out / "setup.log", ready=out / "ready")
    sys.exit(suite_passes.run_passes(main, compose, "after", setup))
""")


def test_a_runner_killed_outright_releases_its_set_up_ahead(tmp_path: Path) -> None:
    """The set-up ahead stops the engine it started when released: the kernel must release it too."""
    runner = subprocess.Popen([sys.executable, "-c", RUNNER_WITH_SETUP, str(tmp_path)], cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    while not all((tmp_path / f"{name}.pid").exists() for name in ("main", "setup")):
        assert runner.poll() is None, "the runner ended before the main pass and the set-up started"
        time.sleep(0.05)
    pids = [int((tmp_path / f"{name}.pid").read_text()) for name in ("main", "setup")]
    runner.kill()
    runner.wait()
    while not all(_ended(pid) for pid in pids):  # pytest-timeout guards a hang
        time.sleep(0.05)
    assert (tmp_path / "setup.int").exists(), "the set-up ahead got no SIGINT"
