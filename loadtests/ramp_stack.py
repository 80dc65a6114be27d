"""The embedded stack for a Locust ramp, run as a child process: ``proctor up --foreground``.

Standard library only, because the locustfile imports it under gevent: the stack's own
code never enters the Locust process. The child leads its own session (a Ctrl-C at the
terminal reaches Locust alone, which then reads the ledgers before it stops the stack)
and is asked to die with its parent (``PR_SET_PDEATHSIG``), so even a SIGKILLed Locust
leaves no stack behind: the supervisor's SIGTERM handler stops every component in order.
It is stopped by its pid and its run folder, never by name.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

__all__ = ["EmbeddedRampStack", "StackStartError", "read_manifest"]

PROJECT_ROOT = Path(__file__).resolve().parents[1]
_PR_SET_PDEATHSIG = 1


class StackStartError(RuntimeError):
    """``proctor up`` did not become ready; the message holds the tail of its log."""


def read_manifest(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / "manifest.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise StackStartError(f"no manifest at {path}: is {run_dir} a run folder started by `proctor up`?") from None


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux; elsewhere a no-op)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


_PROGRESS_EVERY = 2.0  # seconds between "still starting" lines


@dataclass
class EmbeddedRampStack:
    run_dir: Path
    web: int = 2
    roster_size: int = 0  # students enrolled (PROCTOR_ROSTER_SIZE); 0: the stack's default
    ready_timeout: float = 90.0
    process: subprocess.Popen | None = None

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "chaos.cli", "up", "--foreground", "--run-dir", str(self.run_dir),
                "--web", str(self.web), "--name", "ramp", "--origin", "harness", "--ready-timeout", str(self.ready_timeout)]

    def start(self, progress: Callable[[float], None] = lambda _waited: None) -> dict[str, Any]:
        """Start and wait until the manifest says ready; returns the manifest. ``progress(waited)``
        every few seconds, so that a terminal is not silent while the stack starts."""
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        log = self.run_dir / "logs" / "supervisor.log"
        with open(log, "ab") as out:
            env = {**os.environ, **({"PROCTOR_ROSTER_SIZE": str(self.roster_size)} if self.roster_size else {})}
            self.process = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                            cwd=PROJECT_ROOT, start_new_session=True, preexec_fn=_die_with_parent, env=env)
        started = time.monotonic()
        deadline, next_note = started + self.ready_timeout, started + _PROGRESS_EVERY
        while time.monotonic() < deadline:
            if time.monotonic() >= next_note:
                progress(time.monotonic() - started)
                next_note += _PROGRESS_EVERY
            manifest = self._manifest_if_ready()
            if manifest is not None:
                return manifest
            if self.process.poll() is not None:
                raise StackStartError(f"proctor up exited with code {self.process.returncode}; log {log}:\n{_tail(log)}")
            time.sleep(0.2)
        self.stop()
        raise StackStartError(f"proctor up not ready after {self.ready_timeout:.0f}s; log {log}:\n{_tail(log)}")

    def _manifest_if_ready(self) -> dict[str, Any] | None:
        path = self.run_dir / "manifest.json"
        if not path.exists():
            return None
        try:
            manifest = json.loads(path.read_text())
        except ValueError:
            return None  # written atomically, but be safe
        ready = manifest.get("status") == "ready" and manifest.get("supervisor_pid") == self.process.pid
        return manifest if ready else None

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM our child (it stops its components in order), then `proctor down` for leftovers."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        if (self.run_dir / "manifest.json").exists():
            subprocess.run([sys.executable, "-m", "chaos.cli", "down", str(self.run_dir)], cwd=PROJECT_ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=timeout)
        if self.process.poll() is None:
            self.process.kill()
        return self.process.wait()


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
