"""Issue #27 item 2: Ctrl-C or SIGTERM during `proctor demo` / `proctor run` is an outcome of its
own: one line naming what ran and the folder, faults healed and the stack stopped, an
`interrupted` marker and a report saying so, exit 130 / 143; `proctor check` then says unknown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stack.embedded.registry import identities
from stack.embedded.watchdog import is_alive

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[1]


# SIGTERM takes the same path (chaos/interrupt.py; exit 143 in tests/unit/test_interrupted_and_not_a_run.py);
# one end-to-end case keeps the suite's time down. Add ``(["run", "worker_kill"], signal.SIGTERM, 143)``
# to try it.
@pytest.mark.parametrize(("argv", "signum", "code"), [
    (["demo"], signal.SIGINT, 130),  # Ctrl-C: the terminal signals the whole process group
], ids=["demo-ctrl-c"])
def test_an_interrupted_run_says_so_and_leaves_nothing_running(tmp_path: Path, argv: list[str], signum: int,
                                                               code: int) -> None:
    env = {**os.environ, "PROCTOR_RESULTS_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "chaos.cli", *argv], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # wait until the load (and its faults) runs
            line = proc.stdout.readline()
            lines.append(line)
            if "] t=" in line or not line:
                break
        assert any("] t=" in line for line in lines), "".join(lines)
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == code, err[-3000:]
    assert "Traceback" not in err and "CancelledError" not in err, err[-3000:]
    [said] = [line for line in err.splitlines() if "interrupted by" in line]
    [run_dir] = [p for p in (tmp_path / "runs").iterdir() if p.is_dir() and not p.is_symlink()]
    assert str(run_dir) in said and signal.Signals(signum).name in said
    marker = json.loads((run_dir / "interrupted").read_text())
    assert marker["signal"] == signal.Signals(signum).name and marker["phase"] == "load and faults"
    assert "**Interrupted** by" in (run_dir / "report.md").read_text()
    assert [i for i in identities(json.loads((run_dir / "manifest.json").read_text())) if is_alive(i)] == []
    check = subprocess.run([sys.executable, "-m", "chaos.cli", "check", str(run_dir), "--no-plots"], cwd=ROOT,
                           env=env, capture_output=True, text=True, check=False)
    assert check.returncode == 2 and "interrupted by" in check.stdout, check.stdout + check.stderr
