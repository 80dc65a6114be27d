"""The engine and images for compose runs, once per pytest session (``--chaos-target compose``).

``scripts/compose-setup.sh`` does the work (engine packages, dockerd, base image, stack
image; each only when missing). This module decides whether it can run at all, runs it
once so every scenario's own set-up finds everything cached, and stops afterwards the
dockerd it started (by the pid the script kept), never an engine that was already running.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
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


def prepare_engine(run_dir: Path, say=print) -> bool:  # a print-like callable
    """Run set-up (no ``up``); return True if it started a dockerd that ``stop_engine`` must stop."""
    was_running = engine_answers()
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PROCTOR_COMPOSE_RUN": str(run_dir.resolve())}
    started = time.monotonic()
    done = subprocess.run(["scripts/compose-setup.sh"], cwd=REPO, env=env, capture_output=True, text=True,
                          check=False)
    for drawn in ("proctor.env", "valkey-web.env", "valkey-relay.env", "valkey-worker.env", "valkey-harness.env",
                  "valkey-users.acl", "faultproxy.env"):
        (run_dir / drawn).unlink(missing_ok=True)  # set-up drew secrets nobody will use
    for line in done.stdout.splitlines():
        say(line)
    say(f"compose set-up (engine, base, image): {time.monotonic() - started:.1f}s")
    if done.returncode != 0:
        raise RuntimeError(f"scripts/compose-setup.sh failed:\n{done.stdout}{done.stderr}")
    return not was_running


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
