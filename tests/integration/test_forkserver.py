"""The fork server (stack/embedded/forkserver.py, spawn.py): a ``python -m`` component forked from
one interpreter that imported the libraries once must behave as the fresh process it replaces."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Iterator

import pytest

from stack.embedded import StackError
from stack.embedded.spawn import ExecSpawner, ForkSpawner, ServerPool, fork_request, spawner_from_env
from stack.embedded.supervisor import ProcessSpec, Supervisor
from stack.embedded.watchdog import _read_stat

pytestmark = pytest.mark.integration

PROBE = '''
import atexit, os, sys, threading, time
print("argv", sys.argv[1:], "path0", sys.path[0], "cwd", os.getcwd(), flush=True)
print("env", os.environ.get("PROBE_VALUE"), "nice", os.nice(0), "sid", os.getsid(0) == os.getpid(), flush=True)
print("policy", os.sched_getscheduler(0) == os.SCHED_IDLE, "main", __name__, flush=True)
atexit.register(lambda: print("atexit ran", flush=True))
def late():
    time.sleep(0.3)
    print("thread joined", flush=True)
threading.Thread(target=late).start()
if "--serve" in sys.argv:
    time.sleep(60)
sys.exit(int(sys.argv[1]))
'''


@pytest.fixture
def probe_dir(tmp_path: Path) -> Path:
    (tmp_path / "probe_component.py").write_text(textwrap.dedent(PROBE))
    return tmp_path


@pytest.fixture
def pool() -> Iterator[ServerPool]:
    """A fork server of the test's own: the process's one serves the other tests' stacks, which a
    test that kills its server must not touch."""
    own = ServerPool()
    try:
        yield own
    finally:
        own.close()


@pytest.fixture
def sup(tmp_path: Path, pool: ServerPool) -> Iterator[Supervisor]:
    supervisor = Supervisor(tmp_path / "run", spawner=ForkSpawner(tmp_path / "run" / "logs" / "forkserver.log", pool=pool))
    try:
        yield supervisor
    finally:
        supervisor.stop_all(grace=2)


def _spec(name: str, probe_dir: Path, *args: str, prefix: tuple[str, ...] = (), **env: str) -> ProcessSpec:
    return ProcessSpec(name, [*prefix, sys.executable, "-m", "probe_component", *args],
                       env={**os.environ, "PYTHONUNBUFFERED": "1", "PROBE_VALUE": "42", **env}, cwd=probe_dir,
                       autorestart=False, settle=0.2)


def _parent(pid: int) -> int | None:
    info = _read_stat(pid)
    return None if info is None else info.ppid


def _exit_code(sup: Supervisor, name: str, timeout: float = 30.0) -> int | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        popen = sup._get(name).popen
        if popen is not None and popen.poll() is not None:
            return popen.returncode
        time.sleep(0.02)
    return None


def test_a_forked_component_lives_as_a_fresh_one_would(sup: Supervisor, probe_dir: Path) -> None:
    sup.start(_spec("probe", probe_dir, "3", prefix=("nice", "-n", "7")))
    pid = sup._get("probe").popen.pid
    assert _parent(pid) not in (None, os.getpid())  # forked by the server, not started by us
    assert _exit_code(sup, "probe") == 3
    log = (sup.log_dir / "probe.log").read_text()
    assert f"argv ['3'] path0 {probe_dir} cwd {probe_dir}" in log
    assert "env 42 nice 7 sid True" in log and "policy False main __main__" in log
    assert "thread joined" in log and "atexit ran" in log  # the interpreter's end, as after python -m


def test_an_idle_prefix_a_kill_and_a_restart(sup: Supervisor, probe_dir: Path) -> None:
    spec = _spec("probe", probe_dir, "0", "--serve", prefix=("chrt", "--idle", "0"))
    spec.autorestart = True
    sup.start(spec)
    sup.wait_ready("probe", 30)
    first = sup.pid("probe")
    assert first is not None and os.getpgid(first) == first  # its own session and group, as before
    assert Path(f"/proc/{first}/comm").read_text().strip() == "probe"  # what ps shows
    sup.kill("probe", signal.SIGKILL)
    deadline = time.monotonic() + 30
    while sup.pid("probe") in (None, first) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sup.pid("probe") not in (None, first)  # restarted, forked again
    log = (sup.log_dir / "probe.log").read_text()
    assert "exited with code -9" in log and "policy True" in log, log


def test_a_python_environment_the_server_lacks_is_started_fresh(sup: Supervisor, probe_dir: Path) -> None:
    sup.start(_spec("probe", probe_dir, "5", "--serve", PYTHONPATH=str(probe_dir)))
    pid = sup._get("probe").popen.pid
    assert _parent(pid) == os.getpid()  # a fork could not honour a PYTHONPATH of its own
    sup.kill("probe", signal.SIGKILL)


def test_a_dead_fork_server_leaves_its_children_and_later_starts_are_fresh(tmp_path: Path, probe_dir: Path,
                                                                          pool: ServerPool) -> None:
    spawner = ForkSpawner(tmp_path / "run" / "logs" / "forkserver.log", pool=pool)
    supervisor = Supervisor(tmp_path / "run", spawner=spawner)
    try:
        supervisor.start(_spec("first", probe_dir, "0", "--serve"))
        supervisor.wait_ready("first", 30)
        first = supervisor.pid("first")
        server = spawner._server
        assert server is not None and first is not None and _parent(first) == server.popen.pid
        os.kill(server.popen.pid, signal.SIGKILL)
        server.popen.wait()
        deadline = time.monotonic() + 30
        while server.alive and time.monotonic() < deadline:  # its reader thread sees the socket close
            time.sleep(0.02)
        assert not server.alive
        supervisor.start(_spec("second", probe_dir, "4"))
        assert _parent(supervisor._get("second").popen.pid) == os.getpid()  # a fresh process, not a fork
        assert _exit_code(supervisor, "second") == 4
        assert supervisor.pid("first") == first and _read_stat(first) is not None  # did not die with the server
        supervisor.kill("first", signal.SIGKILL)
        assert _exit_code(supervisor, "first") is not None  # its end is still seen, from /proc now
    finally:
        supervisor.stop_all(grace=2)
    # the next stack of the process gets a new server from the pool, and forks from it
    later = Supervisor(tmp_path / "later", spawner=ForkSpawner(tmp_path / "later" / "logs" / "forkserver.log", pool=pool))
    try:
        later.start(_spec("third", probe_dir, "0", "--serve"))
        later.wait_ready("third", 30)
        replacement = later._spawner._server
        assert replacement is not None and replacement.alive and replacement.popen.pid != server.popen.pid
        assert _parent(later.pid("third")) == replacement.popen.pid
    finally:
        later.stop_all(grace=2)


def test_stacks_of_one_process_share_its_fork_server(tmp_path: Path, probe_dir: Path, pool: ServerPool) -> None:
    def stack(name: str) -> Supervisor:
        return Supervisor(tmp_path / name, spawner=ForkSpawner(tmp_path / name / "logs" / "forkserver.log", pool=pool))

    first, second = stack("first"), stack("second")
    try:
        first.start(_spec("a", probe_dir, "0", "--serve"))
        second.start(_spec("b", probe_dir, "0", "--serve"))  # at once: both stacks running
        first.wait_ready("a", 30)
        second.wait_ready("b", 30)
        server = first._spawner._server
        assert server is not None and second._spawner._server is server
        assert _parent(first.pid("a")) == _parent(second.pid("b")) == server.popen.pid
        first.stop_all(grace=2)  # one stack done: the server keeps serving the other
        assert server.alive and server.popen.poll() is None
        second.kill("b", signal.SIGKILL)
        assert _exit_code(second, "b") == -9  # still reported over the server's socket
        assert "uses the running fork server, pid %d" % server.popen.pid in (second.log_dir / "forkserver.log").read_text()
    finally:
        first.stop_all(grace=2)
        second.stop_all(grace=2)
    pool.close()  # what the process's own pool does at exit
    assert server.popen.poll() is not None


def test_what_is_forked_and_what_is_not() -> None:
    server_env = {"PATH": "/bin", "PYTHONUNBUFFERED": "1"}
    env = {"PYTHONUNBUFFERED": "1", "A": "b"}
    python = sys.executable
    assert fork_request([python, "-m", "stack.relay"], env, server_env) == {
        "module": "stack.relay", "args": [], "env": env, "nice": None}
    assert fork_request(["nice", "-n", "10", python, "-m", "uvicorn", "x:y"], env, server_env)["nice"] == ["nice", 10]
    assert fork_request(["chrt", "--idle", "0", python, "-m", "m"], env, server_env)["nice"] == ["idle"]
    assert fork_request(["valkey-server", "conf"], env, server_env) is None
    assert fork_request([python, "-c", "print(1)"], env, server_env) is None
    assert fork_request(["/usr/bin/python3", "-m", "m"], env, server_env) is None  # another interpreter
    assert fork_request([python, "-m", "m"], {**env, "PYTHONPATH": "/x"}, server_env) is None


def test_a_recycled_pid_is_not_taken_for_dead() -> None:
    import threading

    from stack.embedded.spawn import _ServerLink

    link = object.__new__(_ServerLink)  # its bookkeeping only, no server
    link._changed, link._replies, link._exits, link.alive = threading.Condition(), {}, {}, True
    link._take({"exit": 4242, "code": -9})  # an earlier component that had pid 4242
    assert link.exit_code(4242, None) == -9 and link.exit_reported_at(4242) is not None
    link._take({"id": 7, "pid": 4242})  # a new child got the same pid
    assert link.exit_code(4242, None) is None and link.exit_reported_at(4242) is None
    link._take({"exit": 4242, "code": 0})
    assert link.exit_code(4242, None) == 0


def test_the_spawn_policy_is_chosen_by_name(tmp_path: Path) -> None:
    assert isinstance(spawner_from_env(tmp_path / "log", environ={}), ForkSpawner)
    assert isinstance(spawner_from_env(tmp_path / "log", environ={"PROCTOR_SPAWN": "exec"}), ExecSpawner)
    with pytest.raises(StackError, match="PROCTOR_SPAWN='vfork': expected fork or exec"):
        spawner_from_env(tmp_path / "log", environ={"PROCTOR_SPAWN": "vfork"})


RUNNER = '''
import os, sys, time
from pathlib import Path
from stack.embedded.supervisor import ProcessSpec, Supervisor
def probe():
    return ProcessSpec("probe", [sys.executable, "-m", "probe_component", "0", "--serve"],
                       env={**os.environ, "PYTHONUNBUFFERED": "1"}, cwd=Path(sys.argv[2]), settle=0.2)
earlier = Supervisor(Path(sys.argv[1]) / "earlier")  # a stack before, stopped: the process's server stays
earlier.start(probe())
earlier.wait_ready("probe", 30)
earlier_server = earlier._spawner._server.popen.pid
earlier.stop_all(grace=2)
sup = Supervisor(Path(sys.argv[1]) / "now")
sup.start(probe())
sup.wait_ready("probe", 30)
print(sup.pid("probe"), sup._spawner._server.popen.pid, earlier_server, flush=True)
time.sleep(120)
'''


def test_a_runner_killed_with_sigkill_leaves_neither_server_nor_component(tmp_path: Path, probe_dir: Path) -> None:
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(tmp_path / "run"), str(probe_dir)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        words = runner.stdout.readline().split()
        component, server, earlier_server = (int(word) for word in words)
        assert _parent(component) == server == earlier_server  # the process's own server, kept between stacks
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_read_stat(pid) is not None and _read_stat(pid).state != "Z"
                                                  for pid in (component, server)):
            time.sleep(0.05)
        assert [pid for pid in (component, server) if _read_stat(pid) is not None and _read_stat(pid).state != "Z"] == []
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
        runner.stdout.close()


def test_the_pool_counts_the_cpu_of_what_its_server_forked(tmp_path: Path, probe_dir: Path, pool: ServerPool) -> None:
    """suite_time.py adds it: the components' CPU reaches this process's rusage only when the shared
    server is reaped, at the process's end."""
    (probe_dir / "burner.py").write_text("import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end:\n    pass\n")
    supervisor = Supervisor(tmp_path / "run", spawner=ForkSpawner(tmp_path / "run" / "logs" / "forkserver.log", pool=pool))
    try:
        supervisor.start(_spec("first", probe_dir, "0"))  # answered once the server's imports are done
        assert _exit_code(supervisor, "first") == 0
        pool_before, reaped_before = pool.cpu_seconds(), _reaped_cpu_seconds()
        supervisor.start(ProcessSpec("burner", [sys.executable, "-m", "burner"], env={**os.environ}, cwd=probe_dir,
                                     autorestart=False, settle=0.0))
        assert _exit_code(supervisor, "burner") == 0
        assert pool.cpu_seconds() - pool_before >= 0.3
        assert _reaped_cpu_seconds() - reaped_before < 0.1  # not ours to see: the server reaped it
    finally:
        supervisor.stop_all(grace=2)
    pool.close()
    assert pool.cpu_seconds() == 0.0  # no server, nothing more to count


def _reaped_cpu_seconds() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
