"""The fork server: one interpreter imports the stack's third-party libraries once, then forks
each Python component, instead of a fresh interpreter importing them again for every component.

Measured (docs/harness.md): a fresh interpreter importing ``stack.web.app`` took 796 CPU ms, a
fork of a process that had imported it 1.8 CPU ms. A stack starts about ten Python components
(web nodes, workers, relay, providers), and every kill's restart starts one more.

Only third-party libraries are imported ahead (``PRELOAD``). The stack's own modules read their
settings at import, from the environment each component is given, so each child imports them
itself once its environment is in place; its ``-m`` module then runs as ``__main__``, as
``python -m`` would run it.

The supervisor's end is ``stack/embedded/spawn.py``. The protocol is JSON lines over one Unix
socket (its fd number in ``$PROCTOR_FORKSERVER_FD``):

- asked ``{"id", "module", "args", "env", "cwd", "log", "nice", "name"}``, the server forks and
  answers ``{"id", "pid"}`` (or ``{"id", "error"}``) before it reads anything else;
- whenever a child ends, ``{"exit": pid, "code": returncode}`` (a signal's death is ``-signum``, as
  ``subprocess`` says it).

The server is single-threaded, so a fork copies no lock held by another thread. It exits when the
socket closes (the supervisor ended or let it go). Its children then carry on: the supervisor's
watchdog (stack/embedded/watchdog.py) already knows each of them and stops them if the supervisor
dies.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import selectors
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["FD_ENV", "PRELOAD", "child_main", "main"]

FD_ENV = "PROCTOR_FORKSERVER_FD"
PRELOAD = (
    "fastapi", "starlette.applications", "pydantic", "sqlalchemy", "sqlalchemy.dialects.sqlite",
    "redis", "redis.sentinel", "rq", "rq.worker", "httpx", "anyio", "uvicorn.main", "uvicorn.config",
    "uvloop", "httptools", "uvicorn.loops.uvloop", "uvicorn.protocols.http.httptools_impl",
    "uvicorn.lifespan.on", "limits", "prometheus_client",
    # imported by the stack's own modules at their import (measured in a forked web node, 7 December 2026:
    # argparse 57 ms, sqlalchemy's postgresql dialect 33-48 ms, pydantic.v1 26 ms, sqlite3 up to 90 ms)
    "argparse", "sqlite3", "sqlalchemy.dialects.postgresql", "pydantic.v1", "prometheus_client.core",
)
"""Third-party modules the components import. One that is missing is skipped: the child then
imports what it needs itself, as a fresh interpreter would."""
PRIORITY_NICE, PRIORITY_IDLE = "nice", "idle"


def preload() -> list[str]:
    """Import ``PRELOAD``; returns the modules that could not be imported."""
    missing = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def main() -> int:
    missing = preload()
    channel = socket.socket(fileno=int(os.environ[FD_ENV]))
    if missing:
        print(f"forkserver: not preloaded (imported by each child): {', '.join(missing)}", file=sys.stderr, flush=True)
    reaped_r, reaped_w = os.pipe()
    os.set_blocking(reaped_w, False)
    signal.set_wakeup_fd(reaped_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd hears of each exit
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the supervisor's to act on
    selector = selectors.DefaultSelector()
    selector.register(channel, selectors.EVENT_READ, "request")
    selector.register(reaped_r, selectors.EVENT_READ, "exits")

    def let_go() -> None:
        """In a child: close the server's own files through their objects, so that nothing closes
        one of the component's later files that reuses a number."""
        signal.set_wakeup_fd(-1)
        selector.close()
        channel.close()
        os.close(reaped_r)
        os.close(reaped_w)

    buffered = b""
    while True:
        for key, _ in selector.select():
            if key.data == "exits":
                os.read(reaped_r, 4096)
                _report_exits(channel)
                continue
            data = channel.recv(65536)
            if not data:
                return 0
            buffered += data
            while b"\n" in buffered:
                line, buffered = buffered.split(b"\n", 1)
                _answer(channel, json.loads(line), let_go)
        _report_exits(channel)  # a SIGCHLD may have come while a request was being answered


def _send(channel: socket.socket, message: dict[str, Any]) -> None:
    channel.sendall(json.dumps(message).encode() + b"\n")


def _answer(channel: socket.socket, request: dict[str, Any], let_go: Callable[[], None]) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    session_r, session_w = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(session_r)
        os.close(session_w)
        _send(channel, {"id": request["id"], "error": f"fork failed: {exc}"})
        return
    if pid == 0:
        # Its own session first, and only then may the supervisor learn its pid: a look at the
        # child's process group before setsid() would find the server in it, and a kill of the
        # component's tree would then kill the server too.
        os.setsid()
        os.close(session_r)
        os.write(session_w, b"s")
        os.close(session_w)
        child_main(request, let_go)  # never returns
    os.close(session_w)
    os.read(session_r, 1)  # b"s", or b"" if the child died first (its exit is reported anyway)
    os.close(session_r)
    _send(channel, {"id": request["id"], "pid": pid})


def _report_exits(channel: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(channel, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def child_main(request: dict[str, Any], let_go: Callable[[], None]) -> None:
    """In the forked child: become the component (own session, log, environment, priority),
    run its module as ``__main__``, then end as the interpreter would."""
    code: Any = 1
    try:
        let_go()
        _become(request)
        code = _run_module(request["module"], request["args"])
    except BaseException as exc:  # noqa: BLE001 - whatever happens, this process must not return into the server
        with contextlib.suppress(Exception):
            import traceback

            traceback.print_exception(exc)
    finally:
        os._exit(_exit_status(code))


def _become(request: dict[str, Any]) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter has it
    _redirect(request["log"])
    os.chdir(request["cwd"])
    sys.path[0] = os.getcwd()  # where python -m looks first: the component's directory, not the server's
    os.environ.clear()
    os.environ.update(request["env"])
    _set_priority(request.get("nice"))
    with contextlib.suppress(OSError):  # what ps and top show: the component, not the server
        with open("/proc/self/comm", "w") as comm:
            comm.write(str(request.get("name") or request["module"])[:15])


def _redirect(log_path: str) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    for fd in (devnull, log):
        if fd > 2:
            os.close(fd)


def _set_priority(priority: Any) -> None:
    """``["nice", N]`` or ``["idle"]``: what a ``nice -n N`` or ``chrt --idle 0`` prefix did."""
    if not priority:
        return
    if priority[0] == PRIORITY_IDLE:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    elif priority[0] == PRIORITY_NICE:
        os.nice(int(priority[1]))


def _run_module(module: str, args: list[str]) -> Any:
    import runpy
    import threading

    sys.argv = [module, *args]  # runpy puts the module's path in argv[0], as python -m does
    code: Any = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:
        code = -signal.SIGINT
    # What the interpreter does at its end: wait for non-daemon threads, run atexit, flush.
    with contextlib.suppress(Exception):
        threading._shutdown()  # type: ignore[attr-defined]
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


def _exit_status(code: Any) -> int:
    """``sys.exit``'s argument as an exit status: None is 0, a message is 1 (printed), a signal 128+n."""
    if code is None:
        return 0
    if isinstance(code, int):
        return 128 - code if code < 0 else code & 0xFF
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
