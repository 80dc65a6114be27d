"""The engine and images for compose runs, once per pytest session (``--chaos-target compose``).

``scripts/compose-setup.sh`` does the work (engine packages, dockerd, base image, stack
image; each only when missing). This module decides whether it can run at all, runs it
once so every scenario's own set-up finds everything cached, and stops afterwards the
dockerd it started (by the pid the script kept), never an engine that was already running.

``python -m chaos.deployment.compose_setup --ahead READY_FILE`` is ``make test``'s set-up
ahead of the compose pass (suite_passes.py): it runs the same set-up while the main pass
runs, in the CPU the main pass leaves idle (its build steps at nice 19, the engine's
containers at the lowest CPU weight), writes READY_FILE, and then holds the engine it
started until SIGINT or SIGTERM, when it stops it. The compose pass finds everything built.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

__all__ = ["engine_answers", "prepare_engine", "stop_engine", "unavailable_reason"]

REPO = Path(__file__).resolve().parents[2]


def engine_answers() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "info"], capture_output=True, check=False).returncode == 0


def unavailable_reason() -> str | None:
    """None when an engine answers or set-up can install one (root on Debian); else why not."""
    if engine_answers():
        return None
    if os.geteuid() == 0 and shutil.which("apt-get") and Path("/etc/debian_version").exists():
        return None
    return ("no container engine answers and set-up cannot install one here (needs root on Debian with "
            "apt-get); install Docker with Compose to run the compose scenarios")


AHEAD_ENV = {"PROCTOR_COMPOSE_BUILD_NICE": "19", "PROCTOR_DOCKER_CPU_SHARES": "2"}
"""Set-up ahead of the compose pass takes only idle CPU: its host build steps at nice 19, the engine's
containers (the image build's) at cgroup v1's lowest weight; the compose pass's own set-up restores
the engine's weight before any scenario runs."""


def prepare_engine(run_dir: Path, say=print, extra_env: dict[str, str] | None = None) -> bool:  # a print-like callable
    """Run set-up (no ``up``); return True if it started a dockerd that ``stop_engine`` must stop."""
    was_running = engine_answers()
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **(extra_env or {}), "PROCTOR_COMPOSE_RUN": str(run_dir.resolve())}
    started = time.monotonic()
    done = _run_setup(env)
    for drawn in ("proctor.env", "valkey-web.env", "valkey-relay.env", "valkey-worker.env", "valkey-harness.env",
                  "valkey-users.acl", "faultproxy.env"):
        (run_dir / drawn).unlink(missing_ok=True)  # set-up drew secrets nobody will use
    for line in done.stdout.splitlines():
        say(line)
    say(f"compose set-up (engine, base, image): {time.monotonic() - started:.1f}s")
    if done.returncode != 0:
        raise RuntimeError(f"scripts/compose-setup.sh failed:\n{done.stdout}{done.stderr}")
    return not was_running


def _run_setup(env: dict[str, str], argv: tuple[str, ...] = ("scripts/compose-setup.sh",)) -> subprocess.CompletedProcess:
    """The script in a session of its own (a dockerd it starts too: a terminal's Ctrl-C reaches pytest,
    whose teardown stops the engine by its pid); interrupted, its whole group is stopped, not only bash."""
    script = subprocess.Popen(list(argv), cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = script.communicate()
    except BaseException:
        os.killpg(script.pid, signal.SIGTERM)
        for pipe in (script.stdout, script.stderr):
            if pipe is not None:
                pipe.close()
        script.wait()
        raise
    return subprocess.CompletedProcess(script.args, script.returncode, out, err)


def hold_ahead(ready: Path, run_dir: Path, say=print) -> int:
    """Set-up ahead of the compose pass, then hold the engine it started until SIGINT or SIGTERM."""
    release = threading.Event()
    ready.unlink(missing_ok=True)  # one left by an earlier run would turn an interrupt into a release

    def stop_holding(_signum: int, _frame: object) -> None:
        if release.is_set() or not ready.exists():
            raise KeyboardInterrupt  # still setting up: stop the script's group now, not after the build
        release.set()

    previous = {sig: signal.signal(sig, stop_holding) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _prepare_and_hold(ready, run_dir, release, say)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _prepare_and_hold(ready: Path, run_dir: Path, release: threading.Event, say) -> int:
    reason = unavailable_reason()
    if reason:
        say(f"compose set-up ahead: nothing to prepare ({reason})")
        ready.write_text("unavailable\n")
        return 0
    was_running = engine_answers()
    try:
        prepare_engine(run_dir, say, AHEAD_ENV)
        ready.write_text("ready\n")
        say("compose set-up ahead: ready (the engine was already running: left as it is)" if was_running
            else "compose set-up ahead: ready; holding the engine it started until the compose pass is done")
        while not release.wait(1.0):
            pass
        return 0
    except RuntimeError as exc:  # the script failed: the compose pass runs it again and reports it
        say(str(exc))
        ready.write_text("failed\n")
        return 1
    except KeyboardInterrupt:
        say("compose set-up ahead: interrupted")
        return 130
    finally:
        if not was_running:  # the dockerd the script started, by the pid it kept (also when interrupted)
            stop_engine()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m chaos.deployment.compose_setup",
                                description="compose set-up ahead of make test's compose pass")
    p.add_argument("--ahead", type=Path, required=True, metavar="READY_FILE",
                   help="written once set-up is done; then the engine is held until SIGINT or SIGTERM")
    args = p.parse_args(argv)
    return hold_ahead(args.ahead, REPO / "results" / "compose-setup-ahead",
                      say=lambda line: print(line, flush=True))


def stop_engine(state: Path = REPO / ".compose") -> None:
    """Stop the dockerd that set-up started, by the pid it kept, if that pid still names a dockerd."""
    pid_file = state / "dockerd.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text().strip() or 0)
    comm = Path(f"/proc/{pid}/comm")
    if pid > 0 and comm.exists() and comm.read_text().strip() == "dockerd":  # a reused pid is someone else's
        os.kill(pid, signal.SIGTERM)
        while comm.exists():  # dockerd stops its containers first; it always ends
            time.sleep(0.2)
    pid_file.unlink()


if __name__ == "__main__":
    sys.exit(main())
