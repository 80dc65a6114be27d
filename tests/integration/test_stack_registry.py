"""Issue #27 item 1: one command-line stack per results folder unless named; `status` lists
every running stack, a bare `down` with several asks for one, `down --all` stops them all.
Fake components (tests/integration/fake_components.py), real Valkey and HAProxy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_components import FAKE_HTTP, FORKING_WORKER

from loadtests.ramp_stack import EmbeddedRampStack
from stack.embedded.manifest import read_manifest
from stack.embedded.registry import running_stacks

pytestmark = pytest.mark.integration


@pytest.fixture()
def results(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "fake_http.py").write_text(FAKE_HTTP)
    (tmp_path / "fake_worker.py").write_text(FORKING_WORKER)
    http = ["{python}", str(tmp_path / "fake_http.py"), "{port}"]
    table = tmp_path / "components.json"
    table.write_text(json.dumps({"ai_provider": http, "sms_gateway": http, "web": http,
                                 "relay": ["{python}", "-c", "import time; time.sleep(600)"],
                                 "worker": ["{python}", str(tmp_path / "fake_worker.py"), "{run_dir}/{name}.horse"]}))
    return tmp_path / "res", table


SMALL = ("--web", "1", "--merit-workers", "0", "--ai-workers", "0", "--sms-workers", "0")


def _proctor(results_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PROCTOR_RESULTS_DIR": str(results_dir)}
    return subprocess.run([sys.executable, "-m", "chaos.cli", *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_a_second_up_is_refused_unless_named_and_down_asks_which(results: tuple[Path, Path]) -> None:
    res, table = results
    small = (*SMALL, "--components", str(table))
    first = _proctor(res, "up", *small)
    try:
        assert first.returncode == 0, first.stderr
        [running] = running_stacks(res / "runs")
        second = _proctor(res, "up", *small)
        assert second.returncode == 2
        assert str(running.run_dir) in second.stderr and "proctor down" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
        assert len(running_stacks(res / "runs")) == 1  # nothing was started
        named = _proctor(res, "up", *small, "--name", "other")
        assert named.returncode == 0, named.stderr
        stacks = running_stacks(res / "runs")
        assert len(stacks) == 2
        status = _proctor(res, "status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert all(str(s.run_dir) in status.stdout for s in stacks) and "2 stack(s) running" in status.stdout
        bare = _proctor(res, "down")
        assert bare.returncode == 2 and "--all" in bare.stderr
        assert all(str(s.run_dir) in bare.stderr for s in stacks)
        assert len(running_stacks(res / "runs")) == 2  # it stopped nothing
    finally:
        every = _proctor(res, "down", "--all")
    assert every.returncode == 0, every.stdout + every.stderr
    assert running_stacks(res / "runs") == []
    assert _proctor(res, "status").returncode == 1


def test_the_ramps_own_stack_does_not_block_a_bare_up(results: tuple[Path, Path]) -> None:
    res, table = results
    ramp_argv = EmbeddedRampStack(res / "unused").argv()
    origin = ramp_argv[ramp_argv.index("--origin"):][:2]  # the flag the ramp starts its stack with
    try:
        ramp = _proctor(res, "up", *SMALL, "--components", str(table), "--name", "ramp", *origin)
        assert ramp.returncode == 0, ramp.stderr
        bare = _proctor(res, "up", *SMALL, "--components", str(table))
        assert bare.returncode == 0, bare.stderr
        assert sorted(s.origin for s in running_stacks(res / "runs")) == ["cli", "harness"]
    finally:
        every = _proctor(res, "down", "--all")
    assert every.returncode == 0, every.stdout + every.stderr


def test_a_stack_whose_processes_are_gone_is_stale_and_cleaned(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "20260101T000000Z-stack"
    run_dir.mkdir(parents=True)
    # pid 1 with start ticks no process has: the manifest says ready, the kernel says gone.
    (run_dir / "manifest.json").write_text(json.dumps({
        "name": "stack", "origin": "cli", "status": "ready", "run_dir": str(run_dir),
        "supervisor_pid": 1, "supervisor_start_ticks": 999999999, "components": {}}))
    assert running_stacks(tmp_path / "runs") == []
    assert read_manifest(run_dir)["status"] == "stale"
