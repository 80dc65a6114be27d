"""The open model's negative control: a stall the closed model hides.

One of the N = 2 web nodes is frozen (SIGSTOP of its process tree, by the pids in the
stack's manifest) for F seconds in the middle of a step offered at r req/s, with few
in-flight slots (like k6's maxVUs). The slots soon all hang on the frozen node, so the
arrivals of the stall queue behind them. Measured from the intended start (corrected), the
requests that arrived in the stall see it: about r*F/N of them (within a factor of 2) wait
at least F/2. Measured from the actual send (service time, all a closed model has), at most
one request per slot can: the slots' own hung requests. Both counts are over the same
requests, those whose intended start fell in the stall. A test that compared two p99 figures
could pass by chance; this one counts requests against a derivation printed with the run.

The same run proves the generator gate: the queued arrivals were delayed past the stated
lag bound, so the verdict is unknown (exit 2), with the generator named as the reason.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.analyze import EXIT_UNKNOWN
from chaos.history import read_history
from chaos.ramp.gate import completions, corrected_latency
from stack.embedded.watchdog import is_alive
from stack.paths import new_run_dir

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[1]
RATE, STEP_SECONDS, SLOTS, NODES = 40.0, 10.0, 4, 2
CALM = 10.0  # a second step at a low rate, so the stall's queued arrivals are sent before the ramp ends
FREEZE_AT, FREEZE_SECONDS = 3.0, 4.0
"""F/2 = 2 s: above what a correct node's slowest requests took on the loaded shared machine
(1.6-1.7 s right after a 2 s freeze, in both runs with F = 2 s)."""
SEND_LAG = 0.5  # < F/2: an arrival queued for half the stall counts as delayed by the generator


def _wait_for(predicate, timeout: float, what: str, process: subprocess.Popen):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if process.poll() is not None:
            pytest.fail(f"the ramp exited ({process.returncode}) before {what}")
        time.sleep(0.05)
    pytest.fail(f"no {what} after {timeout:.0f}s")


def _first_tick(run_dir: Path) -> dict | None:
    path = run_dir / "ramp_ticks.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return json.loads(lines[0]) if lines else None


def _node_pids(run_dir: Path, node: str) -> list[int]:
    entry = json.loads((run_dir / "manifest.json").read_text())["components"][node]
    return sorted(set(entry.get("pids") or []) | {entry["pid"]})


def _freeze(pids: list[int], seconds: float) -> tuple[float, float]:
    """SIGSTOP every pid, SIGCONT after ``seconds`` (always); the wall times of both."""
    stopped_at = time.time()
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(seconds)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    return stopped_at, time.time()


def test_a_frozen_node_shows_in_the_corrected_latency_and_not_in_the_service_time():
    run_dir = new_run_dir("ramp-stall")
    argv = [sys.executable, "-m", "chaos.cli", "ramp", "--steps", f"{RATE:g},{CALM:g}", "--step-seconds", str(STEP_SECONDS),
            "--questions", "5", "--run-dir", str(run_dir), "--arrivals", "open", "--max-in-flight", str(SLOTS),
            "--max-send-lag", str(SEND_LAG), "--p99", "60", "--max-failure-ratio", "1", "--min-rate-ratio", "0",
            "--", "--ramp-web", str(NODES), "--ramp-distribution", "uniform", "--loglevel", "WARNING"]
    ramp = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        tick = _wait_for(lambda: _first_tick(run_dir), 120, "first shape tick", ramp)
        origin = tick["wall"] - tick["elapsed"]
        time.sleep(max(0.0, origin + FREEZE_AT - time.time()))
        stopped_at, resumed_at = _freeze(_node_pids(run_dir, "web_1"), FREEZE_SECONDS)
        output, _ = ramp.communicate(timeout=180)
    finally:
        if ramp.poll() is None:
            ramp.kill()
            ramp.wait()
    print(output[-3000:])
    stall = resumed_at - stopped_at
    done = completions(read_history(run_dir / "history.jsonl").ops)
    in_stall = [op for op in done if stopped_at <= float(op.extra["intended"]) < resumed_at]
    corrected = sum(1 for op in in_stall if corrected_latency(op) >= stall / 2)
    service = sum(1 for op in in_stall if op.latency is not None and op.latency >= stall / 2)
    expected = RATE * stall / NODES
    # Uniform arrivals: a window of F seconds holds at most ceil(r*F) of them, and for N = 2 that is
    # the top of the range (2 * r*F/N), reached when the backlog drains slowly (a loaded machine).
    top = math.ceil(2 * expected)
    print(f"stall {stall:.3f}s at r={RATE:g} req/s, N={NODES}: expected r*F/N = {expected:.1f} requests with a "
          f"corrected latency >= F/2 = {stall / 2:.3f}s (accepted {expected / 2:.1f}..{top}); measured "
          f"{corrected} of {len(in_stall)} arrivals in the stall; of the same, service time >= F/2: {service} "
          f"(slots {SLOTS})")
    assert expected / 2 <= corrected <= top
    assert service <= SLOTS
    report = json.loads((run_dir / "ramp.json").read_text())
    assert report["invariants"]["valid"] is True, report["invariants"]
    assert report["exit_code"] == EXIT_UNKNOWN and ramp.returncode == EXIT_UNKNOWN, output[-3000:]
    kept_up = report["generator"]["kept_up"]
    assert kept_up["passed"] is False and kept_up["delayed"] > 0, kept_up
    assert any("the generator, not the stack, was short" in note for note in report["notes"]), report["notes"]
    assert [pid for pid, ticks in report["stack_processes"] if is_alive((pid, ticks))] == []
