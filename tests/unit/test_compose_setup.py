"""chaos/deployment/compose_setup.py: the compose set-up ahead of make test's compose pass holds
the engine it started until it is released, stops it then (and when interrupted, or when set-up
failed), and never stops an engine that was already running."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from chaos.deployment import compose_setup
from tests.unit.test_suite_passes import _ended


class FakeSetup:
    """The engine's side of compose_setup, recorded: whether one answers, what set-up does, who stopped it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, running: bool, prepare=None) -> None:
        self.stopped = 0
        self.prepared: list[dict[str, str]] = []
        self._prepare = prepare
        monkeypatch.setattr(compose_setup, "unavailable_reason", lambda: None)
        monkeypatch.setattr(compose_setup, "engine_answers", lambda: running)
        monkeypatch.setattr(compose_setup, "prepare_engine", self.prepare)
        monkeypatch.setattr(compose_setup, "stop_engine", self.stop)

    def prepare(self, run_dir: Path, say, extra_env: dict[str, str] | None = None) -> bool:
        self.prepared.append(dict(extra_env or {}))
        if self._prepare is not None:
            self._prepare()
        return True

    def stop(self) -> None:
        self.stopped += 1


def _signal_when(condition, sig: int = signal.SIGINT) -> threading.Thread:
    """Send ``sig`` to this process once ``condition()`` holds (the handler runs in the main thread)."""
    def watch() -> None:
        while not condition():
            time.sleep(0.02)
        os.kill(os.getpid(), sig)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_it_holds_the_engine_it_started_until_released_then_stops_it(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSetup(monkeypatch, running=False)
    ready = tmp_path / "ready"
    _signal_when(lambda: ready.exists() and fake.stopped == 0)
    assert compose_setup.hold_ahead(ready, tmp_path / "run", say=lambda line: None) == 0
    assert ready.read_text() == "ready\n" and fake.stopped == 1
    # only idle CPU: the host's build steps at nice 19, the engine's containers at the lowest weight
    assert fake.prepared == [{"PROCTOR_COMPOSE_BUILD_NICE": "19", "PROCTOR_DOCKER_CPU_SHARES": "2"}]


def test_an_engine_that_was_already_running_is_left_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSetup(monkeypatch, running=True)
    ready = tmp_path / "ready"
    _signal_when(ready.exists, signal.SIGTERM)
    assert compose_setup.hold_ahead(ready, tmp_path / "run", say=lambda line: None) == 0
    assert fake.stopped == 0


def test_a_failed_set_up_says_so_in_the_ready_file_and_stops_its_engine(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def fail() -> None:
        raise RuntimeError("scripts/compose-setup.sh failed: mmdebstrap")

    fake = FakeSetup(monkeypatch, running=False, prepare=fail)
    said: list[str] = []
    assert compose_setup.hold_ahead(tmp_path / "ready", tmp_path / "run", say=said.append) == 1
    assert (tmp_path / "ready").read_text() == "failed\n" and fake.stopped == 1
    assert any("mmdebstrap" in line for line in said)


def test_an_interrupt_during_set_up_stops_it_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started = threading.Event()

    def long_build() -> None:
        started.set()
        time.sleep(30)  # interrupted long before: the signal's handler raises in this sleep

    fake = FakeSetup(monkeypatch, running=False, prepare=long_build)
    ready = tmp_path / "ready"
    ready.write_text("ready\n")  # left by an earlier run: must not turn the interrupt into a release
    _signal_when(started.is_set)
    assert compose_setup.hold_ahead(ready, tmp_path / "run", say=lambda line: None) == 130
    assert not ready.exists() and fake.stopped == 1


def test_without_an_engine_to_install_it_says_why_and_is_ready_at_once(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compose_setup, "unavailable_reason", lambda: "no container engine answers")
    monkeypatch.setattr(compose_setup, "prepare_engine", lambda *a, **k: pytest.fail("nothing to prepare"))
    said: list[str] = []
    assert compose_setup.hold_ahead(tmp_path / "ready", tmp_path / "run", say=said.append) == 0
    assert (tmp_path / "ready").read_text() == "unavailable\n" and "no container engine answers" in said[0]


def test_an_interrupted_set_up_script_is_stopped_with_its_whole_group(tmp_path: Path) -> None:
    """bash alone would leave its children (mmdebstrap, a docker build) running on."""
    child = tmp_path / "child.pid"
    script = ("bash", "-c", f"sleep 60 & echo $! > {child}; wait")
    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        _signal_when(lambda: child.exists() and child.read_text().strip() != "", signal.SIGUSR1)
        with pytest.raises(KeyboardInterrupt):
            compose_setup._run_setup(dict(os.environ), script)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    sleeper = int(child.read_text())
    while not _ended(sleeper):  # SIGTERM reached the group at once; pytest-timeout guards a hang
        time.sleep(0.05)


def test_the_set_up_script_refuses_a_bad_niceness_before_it_changes_anything(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for bad in ("x", "20", "-1"):
        done = subprocess.run(["scripts/compose-setup.sh"], cwd=compose_setup.REPO, capture_output=True, text=True,
                              env={**os.environ, "PROCTOR_COMPOSE_BUILD_NICE": bad, "PROCTOR_COMPOSE_RUN": str(run)})
        assert done.returncode == 2 and "PROCTOR_COMPOSE_BUILD_NICE must be 0-19" in done.stderr, done
        assert not run.exists()


@pytest.mark.parametrize(("script", "argv"), [
    ("compose-setup.sh", ["--help-me"]), ("compose-setup.sh", ["--up", "now"]),
    ("compose-down.sh", ["--stop"]), ("compose-down.sh", ["--stop-engine", "now"])])
def test_the_compose_scripts_refuse_an_unknown_option_before_they_change_anything(
        script: str, argv: list[str], tmp_path: Path) -> None:
    """`compose-setup.sh --help` once ran the whole set-up, and `compose-down.sh --help` took a stack down."""
    run = tmp_path / "run"
    done = subprocess.run([f"scripts/{script}", *argv], cwd=compose_setup.REPO, capture_output=True, text=True,
                          env={**os.environ, "PROCTOR_COMPOSE_RUN": str(run)})
    assert done.returncode == 2, done
    assert done.stderr.count("\n") == 1 and " ".join(argv[-1:]) in done.stderr, done.stderr  # one line, naming it
    assert not run.exists()


@pytest.mark.parametrize("script", ["compose-setup.sh", "compose-down.sh"])
def test_the_compose_scripts_print_their_usage(script: str) -> None:
    done = subprocess.run([f"scripts/{script}", "--help"], cwd=compose_setup.REPO, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith(f"Usage: scripts/{script}"), done
