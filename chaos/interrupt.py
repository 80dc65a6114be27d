"""Ctrl-C and SIGTERM as an outcome of a run, not a crash (issue #27).

Inside :func:`signals_interrupt`, SIGINT and SIGTERM raise :class:`Interrupted` in the main
thread, so the code that runs the stack unwinds through its ``finally`` blocks (faults healed,
stack stopped). A second signal while that clean-up runs is ignored: stopping half-way would
leave processes behind. The runner writes :data:`MARKER` into the run folder; ``proctor check``
then calls the run *unknown* (a cut history is not a whole one), never invalid.

Exit codes follow the shell's convention, 128 + the signal: 130 for SIGINT, 143 for SIGTERM.
"""

from __future__ import annotations

import json
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

__all__ = ["MARKER", "Interrupted", "read_marker", "signals_interrupt", "write_marker"]

MARKER = "interrupted"
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _raise(signum: int, _frame: object) -> None:
    for sig in _SIGNALS:
        signal.signal(sig, signal.SIG_IGN)  # the clean-up that follows must run to its end
    raise Interrupted(signum)


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGINT/SIGTERM raise Interrupted for the duration; the previous handlers come back after."""
    previous = {sig: signal.signal(sig, _raise) for sig in _SIGNALS}
    try:
        yield
    except KeyboardInterrupt as exc:  # a Ctrl-C that asyncio turned into its own KeyboardInterrupt
        if isinstance(exc, Interrupted):
            raise
        raise Interrupted(signal.SIGINT) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def write_marker(run_dir: Path, signum: int, phase: str) -> dict[str, Any]:
    marker = {"signal": signal.Signals(signum).name, "phase": phase, "at": time.time()}
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    return marker


def read_marker(run_dir: Path) -> dict[str, Any] | None:
    """The marker's content, or None when the run was not interrupted."""
    path = run_dir / MARKER
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    return data if isinstance(data, dict) else {}
