"""How the supervisor starts a component's process: a policy chosen once, when the supervisor starts.

- ``ForkSpawner`` (the default): a ``python -m MODULE`` component is forked from the fork server
  (stack/embedded/forkserver.py), which imported the third-party libraries once, and which every
  stack of the process shares (``ServerPool``); anything else
  (valkey-server, haproxy, the fault proxy under another interpreter, a caller's own command)
  is started as before. A ``nice -n N`` or ``chrt --idle 0`` prefix becomes the child's own
  call. A component whose ``PYTHON*`` environment differs from the server's (a ``PYTHONPATH``
  with a ``sitecustomize``, say) is started as before too: a fork could not honour it.
- ``ExecSpawner``: every component a fresh process (``subprocess.Popen``), as before the server.

``PROCTOR_SPAWN=fork|exec`` chooses (docs/embedded.md). Either way the component runs in its own
session with its log as stdout and stderr, and the supervisor gets an object with ``pid``,
``returncode``, ``poll()`` and ``wait(timeout)``, as ``subprocess.Popen`` has.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from stack.embedded import StackError
from stack.embedded.forkserver import FD_ENV, PRIORITY_IDLE, PRIORITY_NICE
from stack.embedded.watchdog import identity, is_alive

__all__ = ["PROCESS_POOL", "SPAWN_ENV", "ExecSpawner", "ForkSpawner", "Process", "ServerPool", "Spawner",
           "fork_request", "reap_helper", "spawner_from_env"]

log = logging.getLogger(__name__)

SPAWN_ENV = "PROCTOR_SPAWN"
SERVER_ENV = {"PYTHONUNBUFFERED": "1"}
"""What the server's interpreter starts with besides ours: what every component's environment has
(stack/embedded/topology.py), so its children's streams behave as a fresh interpreter's would."""
UNKNOWN_EXIT = 255
"""The exit code of a forked child whose server died before it could say (the child is gone)."""


class Process(Protocol):
    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class Spawner(Protocol):
    def prepare(self) -> None: ...

    def spawn(self, argv: Sequence[str], env: Mapping[str, str] | None, cwd: Path, log_file: IO[bytes],
              name: str) -> Process: ...

    def close(self) -> None: ...


def _popen(argv: Sequence[str], env: Mapping[str, str] | None, cwd: Path, log_file: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(list(argv), env=dict(env) if env is not None else None, cwd=cwd,
                            stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                            start_new_session=True, close_fds=True)


def reap_helper(popen: subprocess.Popen[Any], grace: float = 5.0) -> None:
    """Reap a helper process told to end (its channel closed): SIGKILL if it lingers past ``grace``."""
    try:
        popen.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait()


class ExecSpawner:
    """Every component a fresh process."""

    def prepare(self) -> None:
        pass

    def spawn(self, argv: Sequence[str], env: Mapping[str, str] | None, cwd: Path, log_file: IO[bytes],
              name: str) -> Process:
        return _popen(argv, env, cwd, log_file)

    def close(self) -> None:
        pass


def fork_request(argv: Sequence[str], env: Mapping[str, str] | None, server_env: Mapping[str, str]
                 ) -> dict[str, Any] | None:
    """What to ask the fork server for, or None when ``argv`` must be started as it is."""
    priority: list[Any] | None = None
    rest = list(argv)
    if rest[:2] == ["nice", "-n"] and len(rest) > 2 and rest[2].lstrip("-").isdigit():
        priority, rest = [PRIORITY_NICE, int(rest[2])], rest[3:]
    elif rest[:3] == ["chrt", "--idle", "0"]:
        priority, rest = [PRIORITY_IDLE], rest[3:]
    if len(rest) < 3 or rest[0] != sys.executable or rest[1] != "-m":
        return None
    full_env = dict(os.environ if env is None else env)
    if _python_vars(full_env) != _python_vars(server_env):
        return None
    return {"module": rest[2], "args": rest[3:], "env": full_env, "nice": priority}


def _python_vars(env: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in env.items() if key.startswith("PYTHON")}


class _ForkedProcess:
    """A child of the fork server, seen from the supervisor: its exit comes over the server's socket."""

    def __init__(self, server: "_ServerLink", pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._server = server
        self._ident = identity(pid)

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid, self._ident)
        return self.returncode

    @property
    def exit_reported_at(self) -> float | None:
        """Monotonic: when the fork server's report of this child's exit reached us (None: not yet)."""
        return self._server.exit_reported_at(self.pid)

    def wait(self, timeout: float | None = None) -> int:
        if self._server.wait_exit(self.pid, self._ident, timeout) is None:
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
        code = self.poll()
        assert code is not None
        return code


class _ServerLink:
    """The supervisor's end of one fork server's socket, and a thread that reads what it says."""

    def __init__(self, log_file: IO[bytes]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = {**os.environ, **SERVER_ENV, FD_ENV: str(theirs.fileno())}
        try:
            self.popen = subprocess.Popen([sys.executable, "-m", "stack.embedded.forkserver"], env=env,
                                          cwd=Path(__file__).resolve().parents[2], stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                                          start_new_session=True, close_fds=True, pass_fds=(theirs.fileno(),))
        finally:
            theirs.close()
        self.env = env
        self._socket = ours
        self._send_lock = threading.Lock()
        self._changed = threading.Condition()
        self._replies: dict[int, dict[str, Any]] = {}
        self._exits: dict[int, tuple[int, float]] = {}  # pid -> (exit code, monotonic time its report was read)
        self._next_id = 0
        self.alive = True
        self._reader = threading.Thread(target=self._read, name="forkserver-reader", daemon=True)
        self._reader.start()

    def fork(self, request: dict[str, Any]) -> int:
        """The child's pid. No deadline: the server answers each fork at once, after its preload
        (which the first request waits for); if it ends instead, this says so."""
        with self._send_lock:
            self._next_id += 1
            request_id = self._next_id
            self._socket.sendall(json.dumps({**request, "id": request_id}).encode() + b"\n")
        with self._changed:
            self._changed.wait_for(lambda: request_id in self._replies or not self.alive)
            reply = self._replies.pop(request_id, None)
        if reply is None:
            raise StackError("the fork server ended")
        if "error" in reply:
            raise StackError(f"the fork server could not fork: {reply['error']}")
        return int(reply["pid"])

    def exit_code(self, pid: int, ident: Any) -> int | None:
        with self._changed:
            if pid in self._exits:
                return self._exits[pid][0]
            if self.alive:
                return None
        return None if ident is not None and is_alive(ident) else UNKNOWN_EXIT

    def exit_reported_at(self, pid: int) -> float | None:
        with self._changed:
            return self._exits[pid][1] if pid in self._exits else None

    def wait_exit(self, pid: int, ident: Any, timeout: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits or not self.alive, timeout)
        return self.exit_code(pid, ident) if self.alive or pid in self._exits else self._wait_gone(ident, timeout)

    @staticmethod
    def _wait_gone(ident: Any, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while ident is not None and is_alive(ident):
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
        return UNKNOWN_EXIT

    def _read(self) -> None:
        buffered = b""
        try:
            while True:
                data = self._socket.recv(65536)
                if not data:
                    break
                buffered += data
                while b"\n" in buffered:
                    line, buffered = buffered.split(b"\n", 1)
                    self._take(json.loads(line))
        except OSError:
            pass
        finally:
            with self._changed:
                self.alive = False
                self._changed.notify_all()

    def _take(self, message: dict[str, Any]) -> None:
        with self._changed:
            if "exit" in message:
                self._exits[int(message["exit"])] = (int(message["code"]), time.monotonic())
            else:
                self._replies[int(message["id"])] = message
                if "pid" in message:  # a recycled pid: the exit of its earlier holder is not this child's
                    self._exits.pop(int(message["pid"]), None)
            self._changed.notify_all()

    def close(self) -> None:
        """Let the server go (it exits when its socket closes) and reap it."""
        try:
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._socket.close()
        reap_helper(self.popen)


class ServerPool:
    """Holds one fork server for every stack that uses the pool, in turn or at once.

    A process that runs many stacks (pytest, ``proctor sweep``) paid the server's imports, about
    2 CPU s, once per stack; with the process's pool (``PROCESS_POOL``, the default) it pays them once.
    The server holds no state of any stack: it has imported libraries, and each request carries the
    child's whole environment, directory and log. It ends when its socket closes: at this process's
    exit (``atexit``, or the kernel's closing of the socket after a kill), and the watchdog of every
    stack that used it knows its pid, so it never outlives the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._link: _ServerLink | None = None
        self._closes_at_exit = False

    def attach(self, server_log: Path) -> tuple[_ServerLink, bool]:
        """The running server (started now, its output in ``server_log``, if none is alive), and
        whether this call started it."""
        with self._lock:
            if self._link is not None and self._link.alive:
                return self._link, False
            if self._link is not None:
                self._link.close()  # it died: reap it before its successor starts
            server_log.parent.mkdir(parents=True, exist_ok=True)
            with open(server_log, "ab") as out:
                self._link = _ServerLink(out)
            if not self._closes_at_exit:
                atexit.register(self.close)
                self._closes_at_exit = True
            return self._link, True

    def cpu_seconds(self) -> float:
        """CPU seconds of the live server and of the children it has reaped (each stack's components).
        The process's own ``RUSAGE_CHILDREN`` sees them only once the server itself is reaped, at the
        process's end; suite_time.py adds this, so a file's CPU still counts its stacks."""
        with self._lock:
            link = self._link
        return 0.0 if link is None else _tree_cpu_seconds(link.popen.pid)

    def close(self) -> None:
        """Let the server go and reap it; the next ``attach`` starts another."""
        with self._lock:
            if self._link is not None:
                self._link.close()
                self._link = None


PROCESS_POOL = ServerPool()


def _tree_cpu_seconds(pid: int) -> float:
    """utime + stime + cutime + cstime of ``pid`` (its own CPU and its reaped children's), 0 if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().decode(errors="replace").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return sum(int(tick) for tick in fields[11:15]) / os.sysconf("SC_CLK_TCK")


class ForkSpawner:
    """Forks ``python -m`` components from the process's fork server, started with the first of them."""

    def __init__(self, server_log: Path, on_server: Any = None, pool: ServerPool | None = None) -> None:
        """``on_server``: called with the server's pid once this stack uses it (the supervisor registers
        it with its watchdog). ``pool``: where the server comes from (default: the process's)."""
        self.server_log = server_log
        self._on_server = on_server
        self._pool = PROCESS_POOL if pool is None else pool
        self._server: _ServerLink | None = None
        self._lock = threading.Lock()

    def prepare(self) -> None:
        """Start the server now (or join the running one), so that its imports overlap the start of
        what is not forked."""
        self._running_server()

    def spawn(self, argv: Sequence[str], env: Mapping[str, str] | None, cwd: Path, log_file: IO[bytes],
              name: str) -> Process:
        server = self._running_server()
        request = fork_request(argv, env, server.env) if server is not None else None
        if server is None or request is None:
            return _popen(argv, env, cwd, log_file)
        log_file.flush()
        pid = server.fork({**request, "cwd": str(cwd), "log": log_file.name, "name": name})
        return _ForkedProcess(server, pid)

    def _running_server(self) -> _ServerLink | None:
        with self._lock:
            if self._server is not None and not self._server.alive:
                # This stack's children were forked by it, and their exits are no longer reported;
                # rather than mix two servers in one stack, the rest of it starts fresh processes.
                log.warning("the fork server ended; components start as fresh processes from now on")
                return None
            if self._server is None:
                self._server, started = self._pool.attach(self.server_log)
                if not started:
                    with open(self.server_log, "a") as out:
                        out.write(f"forkserver: this stack uses the running fork server, pid {self._server.popen.pid}\n")
                if self._on_server is not None:
                    self._on_server(self._server.popen.pid)
            return self._server

    def close(self) -> None:
        """This stack is done with the server; it keeps serving the process's next stack."""
        with self._lock:
            self._server = None


def spawner_from_env(server_log: Path, on_server: Any = None, environ: Mapping[str, str] | None = None) -> Spawner:
    """The policy ``$PROCTOR_SPAWN`` names (``fork``, the default, or ``exec``); StackError otherwise."""
    choice = (os.environ if environ is None else environ).get(SPAWN_ENV, "fork").strip() or "fork"
    if choice == "exec":
        return ExecSpawner()
    if choice == "fork":
        return ForkSpawner(server_log, on_server)
    raise StackError(f"{SPAWN_ENV}={choice!r}: expected fork or exec")
