"""docker/bin/proctor-health paces itself once it has passed since the container's start.

Docker runs a container's health check every ``interval`` (2 s here, so a start or a restart is seen
at once), and each check is an exec that costs the engine about 80 CPU ms: with 15 services that
kept 0.84 of 2 cores busy on an idle stack. Debian 12's engine has no ``start_interval``, so the
script sleeps before a check that follows a pass of the same container start. These tests run the
script on the host with ``sleep`` replaced by a recorder, so they say exactly when it would wait.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "docker" / "bin" / "proctor-health"


def _this_start() -> str:
    """What the script calls the container's start: field 22 of /proc/1/stat."""
    stat = Path("/proc/1/stat").read_text()
    return stat[stat.rindex(")") + 2:].split()[19]


@pytest.fixture()
def health(tmp_path: Path):
    recorder = tmp_path / "bin"
    recorder.mkdir()
    (recorder / "sleep").write_text('#!/bin/sh\necho "$@" >> "$SLEEPS"\n')
    (recorder / "sleep").chmod(0o755)
    ready = tmp_path / "ready"
    marker = tmp_path / "passed"
    sleeps = tmp_path / "sleeps"

    def run(*check: str, steady: str | None = None) -> tuple[int, list[str]]:
        env = {**os.environ, "PATH": f"{recorder}:{os.environ['PATH']}", "SLEEPS": str(sleeps),
               "PROCTOR_HEALTH_MARKER": str(marker)}
        if steady is not None:
            env["PROCTOR_HEALTH_STEADY_SECONDS"] = steady
        sleeps.unlink(missing_ok=True)
        done = subprocess.run(["sh", str(SCRIPT), *(check or ("ready-file", str(ready)))], env=env,
                              capture_output=True, text=True)
        return done.returncode, sleeps.read_text().split() if sleeps.exists() else []

    return run, ready, marker


def test_the_first_pass_is_at_once_and_the_next_check_waits_15_s(health):
    run, ready, marker = health
    ready.write_text("42")
    assert run() == (0, [])
    assert marker.read_text().strip() == _this_start()
    assert run() == (0, ["15"])


def test_a_failed_check_forgets_the_pass_so_the_next_one_runs_at_once(health):
    run, ready, marker = health
    ready.write_text("42")
    run()
    ready.write_text("")  # the worker went away: its ready file is empty again
    assert run() == (1, ["15"])
    assert not marker.exists()
    assert run() == (1, [])
    ready.write_text("43")
    assert run() == (0, [])


def test_a_pass_of_an_earlier_start_does_not_pace_a_restarted_container(health):
    run, ready, marker = health
    ready.write_text("42")
    marker.write_text("1\n")  # PID 1 of the container's previous start
    assert run() == (0, [])
    assert marker.read_text().strip() == _this_start()


def test_steady_zero_never_waits_and_the_steady_time_is_the_variables(health):
    run, ready, _marker = health
    ready.write_text("42")
    run()
    assert run(steady="0") == (0, [])
    assert run(steady="3") == (0, ["3"])


def test_an_unknown_check_is_refused_without_waiting_or_marking(health):
    run, _ready, marker = health
    code, sleeps = run("bogus")
    assert (code, sleeps) == (2, [])
    assert not marker.exists()
