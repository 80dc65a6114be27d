"""The short ramp under pytest: Locust as a subprocess (``proctor ramp``) against the embedded
stack it starts itself, then the invariants on the merged history and the final read.

The positive run uses load limits no correct stack can miss on a slow machine (the gate's
criteria are each shown failing in tests/unit/test_ramp.py); what it asserts is the
verdict, that every step was measured, and that no stack process outlives Locust. The
negative control turns on write-behind acknowledgement under the same load: acknowledged
answers whose late commit finds the attempt finished are lost, and the answers checker
must say so (exit 1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.analyze import EXIT_INVALID, EXIT_VALID
from chaos.history import read_history
from chaos.ramp.gate import completions, gate, step_rates, read_ticks
from stack.embedded.watchdog import is_alive
from stack.paths import new_run_dir

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[1]
GENEROUS = ["--p99", "60", "--max-failure-ratio", "1", "--min-rate-ratio", "0"]


def _ramp(name: str, steps: str, step_seconds: float, env: dict[str, str] | None = None) -> tuple[int, Path, str]:
    run_dir = new_run_dir(name)
    argv = [sys.executable, "-m", "chaos.cli", "ramp", "--steps", steps, "--step-seconds", str(step_seconds),
            "--questions", "5", "--run-dir", str(run_dir), *GENEROUS, "--", "--loglevel", "WARNING"]
    done = subprocess.run(argv, cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=240, check=False)
    return done.returncode, run_dir, done.stdout + done.stderr


def _stack_processes_alive(run_dir: Path) -> list[int]:
    """The stack processes the ramp recorded while they ran (ramp.json) that are still alive."""
    idents = json.loads((run_dir / "ramp.json").read_text())["stack_processes"]
    assert len(idents) > 5, idents  # supervisor, valkey, providers, web nodes, haproxy, relay, workers
    return [pid for pid, ticks in idents if is_alive((pid, ticks))]


def _gate_below_fastest_request(run_dir: Path) -> dict[str, bool]:
    """The load gate on real data with a p99 limit under the run's fastest request: derived from
    the run itself, so it must fail whatever this machine's speed."""
    config = json.loads((run_dir / "ramp_config.json").read_text())
    done = completions(read_history(run_dir / "history.jsonl").ops)
    fastest = min(op.latency for op in done if op.latency is not None)
    strict = {**config, "gate": {**config["gate"], "p99": fastest / 2}}
    return {g["name"]: g["passed"] for g in gate(strict, step_rates(strict, read_ticks(run_dir), done), done)}


def test_short_ramp_keeps_every_invariant_and_stops_its_stack():
    code, run_dir, output = _ramp("ramp-short", "25,50,100", 13)
    print(output[-2500:])
    assert code == EXIT_VALID, output[-4000:]
    report = json.loads((run_dir / "ramp.json").read_text())
    assert report["invariants"]["valid"] is True
    answers = json.loads((run_dir / "report.json").read_text())["checkers"]["answers"]["counts"]
    assert answers["acknowledged"] > 0 and answers["lost"] == 0 and answers["duplicated"] == 0, answers
    assert len(report["steps"]) == 3 and all(step["completed"] > 0 for step in report["steps"]), report["steps"]
    assert _stack_processes_alive(run_dir) == []
    assert subprocess.run([sys.executable, "-m", "chaos.cli", "check", str(run_dir), "--no-plots"], cwd=ROOT,
                          capture_output=True, check=False).returncode == EXIT_VALID
    assert _gate_below_fastest_request(run_dir)["p99_seconds"] is False


@pytest.mark.negative_control
def test_write_behind_under_load_fails_the_answers_checker():
    code, run_dir, output = _ramp("ramp-write-behind", "25,50", 10, env={"PROCTOR_ANSWER_WRITE_BEHIND": "1.0"})
    assert code == EXIT_INVALID, output[-4000:]
    answers = json.loads((run_dir / "report.json").read_text())["checkers"]["answers"]
    assert answers["valid"] is False and answers["counts"]["lost"] > 0, answers["counts"]
    assert _stack_processes_alive(run_dir) == []
