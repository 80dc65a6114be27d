"""Supervise local processes: start, readiness, restart with backoff, kill whole trees.

Every child runs in its own session/process group with stdout+stderr appended to
``<run_dir>/logs/<name>.log``. A monitor thread restarts a crashed component (RQ
workers exit on Valkey errors) with exponential backoff, once it has been ready at
least once (a component that cannot start is an error, not a restart loop). Every
pid, and every descendant seen by the periodic /proc scan, is registered with the
watchdog so that nothing outlives a runner killed with SIGKILL.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable, Mapping, Sequence

from stack.embedded import StackError
from stack.embedded.spawn import Process, Spawner, reap_helper, spawner_from_env
from stack.embedded.watchdog import Identity, collect_tree, identity, is_alive, signal_tree, snapshot

__all__ = ["Probe", "ProcessSpec", "Supervisor", "PROJECT_ROOT", "BACKOFF_INITIAL", "BACKOFF_MAX"]

log = logging.getLogger(__name__)

Probe = Callable[[], bool]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
BACKOFF_INITIAL = 0.25
"""First restart delay (seconds); doubles per consecutive crash."""
BACKOFF_MAX = 8.0
STABLE_AFTER = 10.0
"""A component that ran this long before crashing restarts with the initial delay again."""
MONITOR_TICK = 0.1
"""The monitor thread's period (seconds): exits, restarts and readiness are each seen on a tick."""
_SCAN_EVERY = 1.0
_TAIL_LINES = 40


@dataclass
class ProcessSpec:
    name: str
    argv: Sequence[str]
    env: Mapping[str, str] | None = None  # the full environment; None inherits ours
    log_path: Path | None = None  # None: <run_dir>/logs/<name>.log
    ready: Probe | None = None  # None: ready once alive for `settle` seconds
    settle: float = 0.0
    autorestart: bool = True
    stop_stage: int = 0  # stopped in ascending order: 0 front (web, haproxy, workers, relay), 1 providers, 2 valkey
    cwd: Path | None = None


@dataclass
class _Component:
    spec: ProcessSpec
    log_path: Path
    autorestart: bool
    popen: Process | None = None  # a subprocess.Popen, or a child of the fork server (stack/embedded/spawn.py)
    ident: Identity | None = None
    started_at: float = 0.0
    starts: int = 0
    crashes: int = 0  # consecutive, for the backoff
    restart_at: float | None = None
    ever_ready: bool = False
    stopping: bool = False
    exit_handled: bool = False
    kills: int = 0  # deliberate kill() calls, to explain an exit during wait_ready
    kills_at_spawn: int = 0  # kills when the current process started: more now = it was killed on purpose
    ready_seconds: float | None = None  # spawn -> first passing probe of the current process
    exit_seen_at: float | None = None  # monotonic: when the monitor saw the last exit
    exit_reported_at: float | None = None  # monotonic: when the fork server reported it (None: exec'd, or unknown)
    spawn_began_at: float | None = None  # monotonic: when the current process's start began (before its fork)
    ready_at: float | None = None  # monotonic: the current process's first passing probe
    seen: set[Identity] = field(default_factory=set)  # descendants seen by the scan

    def exited(self) -> bool:
        return self.popen is None or self.popen.poll() is not None


class _Watchdog:
    """The supervisor's end of the pipe to ``python -m stack.embedded.watchdog``."""

    def __init__(self, log_path: Path) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "stack.embedded.watchdog"],
                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, cwd=PROJECT_ROOT, text=True,
            )
        self._lock = threading.Lock()
        self.ident = identity(self.popen.pid)

    def register(self, ident: Identity) -> None:
        stdin: IO[str] | None = self.popen.stdin
        with self._lock:
            try:
                assert stdin is not None
                stdin.write(f"pid {ident[0]} {ident[1]}\n")
                stdin.flush()
            except (OSError, ValueError):
                log.warning("watchdog pipe closed; pid %s is not protected against orphaning", ident[0])

    def close(self) -> None:
        with self._lock:
            try:
                assert self.popen.stdin is not None
                self.popen.stdin.write("bye\n")
                self.popen.stdin.close()
            except (OSError, ValueError):
                pass
        reap_helper(self.popen)


class Supervisor:
    def __init__(self, run_dir: Path, on_change: Callable[[], None] | None = None, watchdog: bool = True,
                 spawner: Spawner | None = None) -> None:
        """``spawner``: how processes start (stack/embedded/spawn.py); None: ``$PROCTOR_SPAWN``'s choice."""
        self.run_dir = run_dir.resolve()
        self.log_dir = self.run_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._on_change = on_change
        self._lock = threading.RLock()
        self._components: dict[str, _Component] = {}
        self._closed = threading.Event()
        self._latest_lateness = 0.0  # the latest wake-up's delay past its tick, kept until reset
        self._watchdog = _Watchdog(self.log_dir / "watchdog.log") if watchdog else None
        self._spawner = spawner or spawner_from_env(self.log_dir / "forkserver.log", on_server=self._protect)
        self._spawner.prepare()
        self._monitor = threading.Thread(target=self._monitor_loop, name="supervisor-monitor", daemon=True)
        self._monitor.start()

    # ----------------------------------------------------------------- queries
    @property
    def watchdog_identity(self) -> Identity | None:
        return self._watchdog.ident if self._watchdog else None

    def names(self) -> list[str]:
        with self._lock:
            return list(self._components)

    def spec(self, name: str) -> ProcessSpec:
        return self._get(name).spec

    def pid(self, name: str) -> int | None:
        comp = self._get(name)
        return None if comp.exited() or comp.ident is None else comp.ident[0]

    def identity(self, name: str) -> Identity | None:
        comp = self._get(name)
        return None if comp.exited() else comp.ident

    def tree(self, name: str) -> set[Identity]:
        """The component's whole live tree (main process, descendants, their groups, orphans seen)."""
        return collect_tree(self._roots(self._get(name)))

    def trees(self) -> dict[str, set[Identity]]:
        """Every component's tree from one /proc snapshot (cheap enough for each manifest write)."""
        procs = snapshot()
        with self._lock:
            comps = dict(self._components)
        return {name: collect_tree(self._roots(comp), procs) for name, comp in comps.items()}

    def pids(self, name: str) -> list[int]:
        return sorted(pid for pid, _ in self.tree(name))

    def info(self, name: str) -> dict[str, object]:
        comp = self._get(name)
        return {
            "pid": self.pid(name),
            "start_ticks": comp.ident[1] if comp.ident else None,
            "starts": comp.starts,
            "restarts": max(comp.starts - 1, 0),
            "autorestart": comp.autorestart,
            "alive": not comp.exited(),
            "ready_seconds": comp.ready_seconds,
            "exit_seen_at": comp.exit_seen_at,
            "exit_reported_at": comp.exit_reported_at,
            "spawn_began_at": comp.spawn_began_at,
            "ready_at": comp.ready_at,
            "log": str(comp.log_path),
        }

    def tick_lateness(self, reset: bool = False) -> float:
        """The most the monitor's wake-ups came late past their tick since the last reset (seconds):
        how much later than one tick an exit can be seen, or a restart spawned after its delay."""
        late = self._latest_lateness
        if reset:
            self._latest_lateness = 0.0
        return late

    def log_tail(self, name: str, lines: int = _TAIL_LINES) -> str:
        path = self._get(name).log_path
        try:
            with open(path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(fh.tell() - 64 * 1024, 0))
                text = fh.read().decode(errors="replace")
        except OSError:
            return f"(no log at {path})"
        return "\n".join(text.splitlines()[-lines:])

    # ----------------------------------------------------------------- control
    def start(self, spec: ProcessSpec) -> None:
        with self._lock:
            if spec.name in self._components:
                raise StackError(f"component {spec.name!r} already exists")
            log_path = spec.log_path or self.log_dir / f"{spec.name}.log"
            comp = _Component(spec=spec, log_path=log_path, autorestart=spec.autorestart)
            self._components[spec.name] = comp
            self._spawn(comp)
        self._changed()

    def wait_ready(self, name: str, timeout: float) -> None:
        """Block until the probe passes; StackError with the log tail if it exits or times out."""
        comp = self._get(name)
        deadline = time.monotonic() + timeout
        kills = comp.kills
        while True:
            restart_coming = comp.autorestart and comp.ever_ready and not comp.stopping
            if comp.exited() and not restart_coming:
                code = comp.popen.returncode if comp.popen else None
                why = " (killed by a kill() call while we waited)" if comp.kills != kills else ""
                raise StackError(self._failure(name, f"exited with code {code} before it was ready{why}"))
            if self._probe_once(comp):
                comp.ever_ready = True
                if comp.ready_seconds is None:
                    comp.ready_at = time.monotonic()
                    comp.ready_seconds = round(comp.ready_at - comp.started_at, 3)
                    self._log_line(comp, f"ready after {comp.ready_seconds:.3f}s (start #{comp.starts})")
                return
            if time.monotonic() > deadline:
                raise StackError(self._failure(name, f"not ready after {timeout:.1f}s"))
            time.sleep(0.05)

    def is_ready(self, name: str) -> bool:
        return self._probe_once(self._get(name))

    def set_autorestart(self, name: str, enabled: bool) -> None:
        comp = self._get(name)
        with self._lock:
            comp.autorestart = enabled
            if not enabled:
                comp.restart_at = None
            elif comp.exit_handled and comp.restart_at is None and not comp.stopping:
                self._schedule_restart(comp, time.monotonic())  # bring a dead one back

    def kill(self, name: str, sig: int = signal.SIGKILL) -> list[int]:
        """Signal the component's whole tree; returns the pids signalled."""
        comp = self._get(name)
        if sig not in (signal.SIGSTOP, signal.SIGCONT):
            comp.kills += 1
        tree = signal_tree(self._roots(comp), sig)
        if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal_tree(tree, signal.SIGCONT)  # a paused process would not act on it
        return sorted(pid for pid, _ in tree)

    def pause(self, name: str) -> list[int]:
        return self.kill(name, signal.SIGSTOP)

    def resume(self, name: str) -> list[int]:
        return self.kill(name, signal.SIGCONT)

    def restart(self, name: str, grace: float = 5.0, timeout: float = 30.0) -> None:
        comp = self._get(name)
        self._terminate([comp], grace)
        with self._lock:
            comp.stopping = False
            comp.crashes = 0
            self._spawn(comp)
        self._changed()
        self.wait_ready(name, timeout)

    def remove(self, name: str, grace: float = 5.0) -> None:
        """Stop a component for good and forget it."""
        comp = self._get(name)
        self._terminate([comp], grace)
        with self._lock:
            self._components.pop(name, None)
        self._changed()

    def stop_all(self, grace: float = 5.0) -> None:
        """Stop in stages (front, providers, valkey), then release the watchdog."""
        with self._lock:
            comps = list(self._components.values())
        for stage in sorted({c.spec.stop_stage for c in comps}):
            self._terminate([c for c in comps if c.spec.stop_stage == stage], grace)
        self._closed.set()
        self._monitor.join(timeout=2)
        self._spawner.close()
        if self._watchdog:
            self._watchdog.close()
        self._changed()

    def detach(self) -> None:
        """Stop supervising and release the watchdog: the children outlive this process (and the
        fork server, which ends here; its children carry on)."""
        self._closed.set()
        self._monitor.join(timeout=2)
        self._spawner.close()
        if self._watchdog:
            self._watchdog.close()
            self._watchdog = None

    # ----------------------------------------------------------------- internals
    def _get(self, name: str) -> _Component:
        with self._lock:
            comp = self._components.get(name)
        if comp is None:
            raise StackError(f"no component named {name!r}; known: {', '.join(self.names())}")
        return comp

    def _roots(self, comp: _Component) -> set[Identity]:
        roots = set(comp.seen)
        if comp.ident is not None:
            roots.add(comp.ident)
        return roots

    def _failure(self, name: str, what: str) -> str:
        comp = self._get(name)
        return f"{name} {what}; argv: {' '.join(comp.spec.argv)}\n--- last lines of {comp.log_path} ---\n{self.log_tail(name)}"

    def _probe_once(self, comp: _Component) -> bool:
        if comp.exited():
            return False
        if comp.spec.ready is None:
            return time.monotonic() - comp.started_at >= comp.spec.settle
        try:
            return bool(comp.spec.ready())
        except Exception:  # noqa: BLE001 - a probe that raises simply says "not ready"
            return False

    def _spawn(self, comp: _Component) -> None:
        spec = comp.spec
        spawn_began_at = time.monotonic()
        comp.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(comp.log_path, "ab") as out:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            out.write(f"=== {stamp} start #{comp.starts + 1}: {' '.join(spec.argv)}\n".encode())
            out.flush()
            try:
                comp.popen = self._spawner.spawn(spec.argv, spec.env, spec.cwd or PROJECT_ROOT, out, spec.name)
            except OSError as exc:
                raise StackError(f"cannot start {spec.name}: {' '.join(spec.argv)}: {exc}") from exc
        comp.ident = identity(comp.popen.pid)
        comp.started_at = time.monotonic()
        comp.starts += 1
        comp.restart_at = None
        comp.exit_handled = False
        comp.kills_at_spawn = comp.kills
        comp.ready_seconds = None
        comp.spawn_began_at, comp.ready_at = spawn_began_at, None
        if self._watchdog and comp.ident:
            self._watchdog.register(comp.ident)

    def _protect(self, pid: int) -> None:
        """A helper process of the supervisor's own (the fork server): stopped with the rest if we die."""
        ident = identity(pid)
        if self._watchdog and ident:
            self._watchdog.register(ident)

    def _terminate(self, comps: list[_Component], grace: float) -> None:
        """SIGTERM each main process group, SIGKILL every tree after ``grace``, reap."""
        with self._lock:
            for comp in comps:
                comp.stopping = True
                comp.restart_at = None
        trees = {id(c): collect_tree(self._roots(c)) for c in comps}
        for comp in comps:
            if not comp.exited() and comp.ident:
                # Polite stop for the main group only: an RQ worker then finishes its job.
                for sig in (signal.SIGTERM, signal.SIGCONT):
                    try:
                        os.killpg(comp.ident[0], sig)
                    except (ProcessLookupError, PermissionError):
                        pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and not all(c.exited() for c in comps):
            time.sleep(0.05)
        for comp in comps:
            leftovers = trees[id(comp)] | self._roots(comp)
            signal_tree(leftovers, signal.SIGKILL)
            if comp.popen is not None:
                try:
                    comp.popen.wait(timeout=10)
                except subprocess.TimeoutExpired:  # e.g. stuck in uninterruptible I/O
                    log.warning("%s (pid %s) did not die after SIGKILL", comp.spec.name, comp.popen.pid)
            comp.exit_handled = True
            self._log_line(comp, f"stopped (exit code {comp.popen.returncode if comp.popen else None})")

    def _log_line(self, comp: _Component, text: str) -> None:
        try:
            with open(comp.log_path, "ab") as out:
                out.write(f"=== {text}\n".encode())
        except OSError:
            pass

    def _changed(self) -> None:
        if self._on_change is not None:
            try:
                self._on_change()
            except Exception:  # a manifest write must never take the supervisor down
                log.exception("on_change callback failed")

    def _monitor_loop(self) -> None:
        last_scan = 0.0
        woke = time.monotonic()
        while not self._closed.wait(MONITOR_TICK):
            # How late this wake-up came (a loaded machine schedules the thread late): what a
            # restart's timing can be judged against (tick_lateness).
            previous, woke = woke, time.monotonic()
            self._latest_lateness = max(self._latest_lateness, woke - previous - MONITOR_TICK)
            changed = self._restart_crashed()
            if time.monotonic() - last_scan >= _SCAN_EVERY:
                self._scan_descendants()
                last_scan = time.monotonic()
            if changed:
                self._changed()

    def _restart_crashed(self) -> bool:
        changed = False
        now = time.monotonic()
        with self._lock:
            for comp in self._components.values():
                if comp.stopping or not comp.exited():
                    continue
                if not comp.exit_handled:
                    comp.exit_handled = True
                    comp.exit_seen_at = now
                    comp.exit_reported_at = getattr(comp.popen, "exit_reported_at", None)
                    code = comp.popen.returncode if comp.popen else None
                    self._log_line(comp, f"exited with code {code}")
                    self._schedule_restart(comp, now)
                elif comp.restart_at is not None and now >= comp.restart_at:
                    try:
                        self._spawn(comp)
                        changed = True
                    except StackError as exc:
                        self._log_line(comp, f"restart failed: {exc}")
                        comp.restart_at = now + BACKOFF_MAX
        return changed

    def _schedule_restart(self, comp: _Component, now: float) -> None:
        if not (comp.autorestart and comp.ever_ready):
            return
        if comp.kills > comp.kills_at_spawn:
            # Killed on purpose (the nemesis), not a crash: no backoff, or repeated kills
            # of one component would hold it down longer each time than the fault asked.
            comp.restart_at = now
            self._log_line(comp, "restart now (it was killed on purpose)")
            return
        if now - comp.started_at >= STABLE_AFTER:
            comp.crashes = 0
        delay = min(BACKOFF_INITIAL * 2**comp.crashes, BACKOFF_MAX)
        comp.crashes += 1
        comp.restart_at = now + delay
        self._log_line(comp, f"restart #{comp.crashes} in {delay:.2f}s (backoff)")

    def _scan_descendants(self) -> None:
        procs = snapshot()
        with self._lock:
            comps = list(self._components.values())
        for comp in comps:
            tree = collect_tree(self._roots(comp), procs)
            new = tree - comp.seen - ({comp.ident} if comp.ident else set())
            comp.seen = {i for i in comp.seen | new if is_alive(i)}
            if self._watchdog:
                for ident in new:
                    self._watchdog.register(ident)
