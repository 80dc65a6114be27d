"""The CPU hog of `proctor sweep --stress`: started, stopped by pid, never an orphan.

Every wait here blocks on the process itself (wait, EOF on a pipe it holds), never on a
timer; pytest-timeout is the guard should a hog fail to exit.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

import chaos.load.stress as stress_module
from chaos.load.stress import DEFAULT_HOG_MAX_SECONDS, CpuHog, hog_command


def is_gone(pid: int) -> bool:
    """Exited: no such process, or a zombie waiting for a reaper that is not us."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_the_hog_runs_one_busy_loop_per_core_and_stop_reaps_them() -> None:
    with CpuHog(2) as hog:
        processes = list(hog.processes)
        assert len(processes) == 2 and all(p.poll() is None for p in processes)
        assert all(p.args == hog_command(os.getpid(), DEFAULT_HOG_MAX_SECONDS) for p in processes)
        if len(os.sched_getaffinity(0)) >= 2:
            assert len({frozenset(os.sched_getaffinity(p.pid)) for p in processes}) == 2  # one per core
    assert all(p.returncode is not None for p in processes)  # reaped by us, by pid
    assert hog.pids == [] and all(is_gone(p.pid) for p in processes)
    hog.stop()  # a second stop is harmless


@pytest.mark.parametrize("interruption", [RuntimeError("a harness error"), KeyboardInterrupt()])
def test_the_hog_is_stopped_when_the_sweep_raises(interruption: BaseException) -> None:
    processes: list[subprocess.Popen] = []
    with pytest.raises(type(interruption)):
        with CpuHog(1) as hog:
            processes = list(hog.processes)
            raise interruption
    assert processes and all(p.returncode is not None for p in processes)


def wait_until_exited(pid: int) -> None:
    """Block until a process that is not our child has exited (a pidfd turns readable)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # already exited and reaped
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


def test_a_hog_whose_sweep_died_without_stopping_it_exits_by_itself(tmp_path: Path) -> None:
    """A SIGKILLed sweep runs no cleanup: the hog must notice its parent is gone."""
    code = ("import os\nfrom chaos.load.stress import CpuHog\n"
            "hog = CpuHog(1).start()\nprint(hog.pids[0], flush=True)\nos._exit(0)  # no stop(), no cleanup\n")
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                          cwd=Path(__file__).resolve().parents[2]) as parent:
        assert parent.stdout is not None
        hog_pid = int(parent.stdout.readline())
    assert parent.returncode == 0  # the parent is gone, the hog was never stopped
    wait_until_exited(hog_pid)  # hangs (pytest-timeout fails it) if the hog outlives its parent
    assert is_gone(hog_pid)


def test_a_hog_is_bounded_in_time_even_if_nobody_stops_it() -> None:
    hog = CpuHog(1, max_seconds=0.2).start()
    process = hog.processes[0]
    assert process.wait() == 0  # returns only once it ended by itself
    hog.stop()


def test_a_failed_start_leaves_no_hog_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[subprocess.Popen] = []
    real_spawn = CpuHog._spawn

    def spawn_then_fail(self: CpuHog, core: int) -> subprocess.Popen:
        if core == 1:
            raise OSError("fork failed")
        started.append(real_spawn(self, core))
        return started[-1]

    monkeypatch.setattr(CpuHog, "_spawn", spawn_then_fail)
    hog = CpuHog(2)
    with pytest.raises(OSError, match="fork failed"):
        hog.start()
    assert len(started) == 1 and started[0].returncode is not None and hog.pids == []


def test_zero_cores_start_nothing_and_bad_values_name_the_field() -> None:
    with CpuHog(0) as hog:
        assert hog.pids == []
    with pytest.raises(ValueError, match="cores=-1"):
        CpuHog(-1)
    with pytest.raises(ValueError, match="max_seconds=0"):
        CpuHog(1, max_seconds=0)


def test_exports_are_exact() -> None:
    assert sorted(stress_module.__all__) == sorted(["DEFAULT_HOG_MAX_SECONDS", "CpuHog", "hog_command"])
