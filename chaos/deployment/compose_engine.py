"""One compose project's containers through the ``docker`` SDK (``pip install 'proctor[compose]'``).

Containers are found by the labels Compose puts on them (``com.docker.compose.project``,
``com.docker.compose.service``); a container keeps its id across kill, start and restart,
so the ids are read once. Readiness is the container's own health check (docker-compose.yml)
after its latest start: a passing check that began after ``State.StartedAt``, so a status
left over from before a restart never counts.
"""

from __future__ import annotations

import io
import signal
import tarfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["Engine", "EngineError", "parse_docker_time", "process_tree"]

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
_POLL = 0.1
_FREEZE_ATTEMPTS = 5


class EngineError(RuntimeError):
    """The container engine refused or is missing; the message names what to install or check."""


def parse_docker_time(stamp: str) -> float:
    """Docker's RFC 3339 time with nanoseconds (``2026-11-30T11:47:01.123456789Z``) -> epoch seconds."""
    head, rest = stamp[:19], stamp[19:]  # YYYY-MM-DDTHH:MM:SS, then [.fraction] and the zone
    digits = "".join(ch for ch in rest[1:] if ch.isdigit()) if rest.startswith(".") else ""
    zone = rest[1 + len(digits):] if digits else rest
    parsed = datetime.fromisoformat(f"{head}.{(digits or '0')[:6].ljust(6, '0')}{zone.replace('Z', '+00:00')}")
    return parsed.timestamp()


def process_tree(root: int, proc: Path = Path("/proc")) -> list[int]:
    """``root`` and every descendant, from /proc's children lists (empty if ``root`` is gone)."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        tasks = proc / str(pid) / "task"
        if not tasks.is_dir():
            continue
        found.append(pid)
        for task in tasks.iterdir():
            try:
                todo += [int(child) for child in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue  # the task ended while we read
    return sorted(found)


def _in_container(pid: int, container_id: str, proc: Path = Path("/proc")) -> bool:
    """Whether ``pid`` lives on this host in the cgroup of that container (its cgroup paths name the id)."""
    try:
        return container_id in (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return False


class Engine:
    def __init__(self, project: str, client: Any = None) -> None:
        self.project = project
        self.client = client if client is not None else _connect()
        self._ids = self._read_ids()
        self._ready: dict[str, tuple[str, float]] = {}  # service -> (StartedAt, seconds to first passing check)
        self._mains: dict[str, tuple[int, bool]] = {}  # service -> (host pid of its first process, docker-init)

    def _read_ids(self) -> dict[str, str]:
        listed = self.client.api.containers(all=True, filters={"label": [f"{PROJECT_LABEL}={self.project}"]})
        ids = {c["Labels"][SERVICE_LABEL]: c["Id"] for c in listed}
        if not ids:
            raise EngineError(f"no container has the label {PROJECT_LABEL}={self.project}: is the project up?")
        return ids

    def services(self) -> list[str]:
        return sorted(self._ids)

    def container_id(self, service: str) -> str:
        return self._id(service)

    def _id(self, service: str) -> str:
        try:
            return self._ids[service]
        except KeyError:
            raise EngineError(f"project {self.project} has no service {service!r}; it has {self.services()}") from None

    def inspect(self, service: str) -> dict[str, Any]:
        return self.client.api.inspect_container(self._id(service))

    def read_file(self, service: str, path: str) -> bytes:
        """One regular file out of the service's container (a volume it mounts included)."""
        chunks, _stat = self.client.api.get_archive(self._id(service), path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as archive:
            member = archive.next()
            data = archive.extractfile(member) if member is not None and member.isfile() else None
            if data is None:
                raise EngineError(f"{self.project}/{service}:{path} is not a regular file")
            return data.read()

    def running(self, service: str) -> bool:
        return bool(self.inspect(service)["State"]["Running"])

    def pids(self, service: str) -> list[int]:
        """The container's processes on this host, without docker-init (``init: true``) when it has one."""
        main, init = self._main_process(service)
        if main <= 0:
            return []
        tree = process_tree(main)
        if not tree:  # an engine on another host: ask it
            tree = sorted(int(row[1]) for row in self.client.api.top(self._id(service))["Processes"])
        return [pid for pid in tree if pid != main] if init else tree

    def _main_process(self, service: str) -> tuple[int, bool]:
        """(the running container's first process on this host or 0, whether it is docker-init).

        The engine is asked only when the pid remembered from its last answer no longer belongs
        to this container (/proc/PID/cgroup names the container's id): a kill reads the pids just
        before it signals, and on a saturated machine an engine round trip there delayed the kill
        by a second (the compose ``valkey_failover`` once struck after the provider's answer)."""
        known = self._mains.get(service)
        if known is not None and _in_container(known[0], self._id(service)):
            return known
        info = self.inspect(service)
        main = int(info["State"].get("Pid") or 0) if info["State"]["Running"] else 0
        entry = (max(main, 0), bool(info["HostConfig"].get("Init")))
        if entry[0] > 0:
            self._mains[service] = entry
        return entry

    # ------------------------------------------------------------ faults
    def kill(self, service: str, sig: int = signal.SIGKILL) -> float | None:
        """Signal the container; for SIGKILL wait until it stopped and return when it did (the engine's
        ``State.FinishedAt``, epoch seconds), else None."""
        self.client.api.kill(self._id(service), signal=int(sig))
        if sig != signal.SIGKILL:
            return None
        self._wait(service, lambda info: not info["State"]["Running"], 30.0, "stop after SIGKILL")
        finished = self.inspect(service)["State"].get("FinishedAt") or ""
        return parse_docker_time(finished) if finished and not finished.startswith("0001") else None

    def pause(self, service: str) -> None:
        """The freezer cgroup; runc gives up ("unable to freeze") when a process does not stop in
        time, which a loaded machine sees now and then (web_node_kill, once): runc thaws it again,
        so the pause is tried again, a bounded number of times."""
        for attempt in range(1, _FREEZE_ATTEMPTS + 1):
            try:
                self.client.api.pause(self._id(service))
                return
            except Exception as exc:  # docker.errors.APIError; the SDK is imported lazily
                if "unable to freeze" not in str(exc) or attempt == _FREEZE_ATTEMPTS:
                    raise EngineError(f"{self.project}/{service}: pause failed after {attempt} attempt(s): {exc}") from exc

    def unpause(self, service: str) -> None:
        if self.inspect(service)["State"].get("Paused"):
            self.client.api.unpause(self._id(service))

    def stop(self, service: str) -> None:
        self.client.api.stop(self._id(service), timeout=5)

    def restart(self, service: str) -> None:
        self.client.api.restart(self._id(service), timeout=5)
        self._restart_dependents(service)

    def ensure_running(self, service: str) -> None:
        """Start the container if it is down (a killed one stays down until this)."""
        if not self.running(service):
            self.client.api.start(self._id(service))
            self._restart_dependents(service)

    def _restart_dependents(self, service: str) -> None:
        """Containers in the service's network namespace (``network_mode: service:X``) kept the old,
        dead one: restart them into the new one (web-1's admin-forward: the harness's exports)."""
        mode = f"container:{self._id(service)}"
        for other in self.services():
            if other != service and self.inspect(other)["HostConfig"].get("NetworkMode") == mode:
                self.client.api.restart(self._id(other), timeout=2)

    # ------------------------------------------------------------ readiness
    def wait_healthy(self, service: str, timeout: float) -> None:
        self._wait(service, lambda info: self._ready_after_start(service, info) is not None, timeout, "become healthy")

    def ready_seconds(self, service: str) -> float | None:
        return self._ready_after_start(service, self.inspect(service))

    def note_ready(self, service: str) -> None:
        self._ready_after_start(service, self.inspect(service))

    def _ready_after_start(self, service: str, info: dict[str, Any]) -> float | None:
        state = info["State"]
        if not state["Running"] or state.get("Paused"):
            return None
        started = state["StartedAt"]
        known = self._ready.get(service)
        if known and known[0] == started:
            return known[1]
        health = state.get("Health")
        if health is None:  # no health check: running is all there is to ask
            seconds = 0.0
        else:
            begun = parse_docker_time(started)
            passed = [parse_docker_time(e["End"]) for e in health.get("Log") or []
                      if e.get("ExitCode") == 0 and parse_docker_time(e["Start"]) >= begun]
            if not passed:
                return None
            seconds = round(min(passed) - begun, 3)
        self._ready[service] = (started, seconds)
        return seconds

    def _wait(self, service: str, done: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            info = self.inspect(service)
            if done(info):
                return
            if time.monotonic() >= deadline:
                status = info["State"].get("Health", {}).get("Status") or info["State"]["Status"]
                raise EngineError(f"{self.project}/{service} did not {what} within {timeout:.0f}s (status {status})")
            time.sleep(_POLL)

    def close(self) -> None:
        self.client.close()


def _connect() -> Any:
    try:
        import docker
    except ImportError:
        raise EngineError("the compose target needs the docker SDK: pip install 'proctor[compose]'") from None
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        raise EngineError(f"no container engine answers ({exc}); scripts/compose-setup.sh starts one") from None
    return client
