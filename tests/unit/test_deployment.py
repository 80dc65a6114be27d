"""The deployment interface (chaos/deployment): the embedded adapter conforms, the nemesis needs
nothing else, and the harness side imports no stack dependency."""

from __future__ import annotations

import inspect
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chaos.deployment import Deployment, FinalRead
from chaos.deployment.embedded import EmbeddedDeployment
from chaos.nemesis import FaultSpec, NemesisError, ProcessNemesis
from stack.components import Component, ComponentTable
from stack.config import Settings

_MEMBERS = [name for name in dir(Deployment) if not name.startswith("_")]


def _mismatches(cls: type) -> list[str]:
    """Members of Deployment that ``cls`` lacks, or whose parameters (names, kinds, defaults) differ."""
    problems = []
    for name in _MEMBERS:
        wanted = inspect.getattr_static(Deployment, name)
        if not hasattr(cls, name):
            problems.append(f"{name}: missing")
        elif callable(wanted) and not isinstance(wanted, property):
            want = [(p.name, p.default) for p in inspect.signature(wanted).parameters.values()]
            have = [(p.name, p.default) for p in inspect.signature(getattr(cls, name)).parameters.values()]
            if want != have:
                problems.append(f"{name}: parameters {[n for n, _ in have]} != {[n for n, _ in want]}")
    return problems


class FakeDeployment:
    """A deployment in memory: what a compose adapter has to offer, and no more."""

    def __init__(self, pools: dict[str, int]) -> None:
        self.table = ComponentTable([Component("relay", "relay")])
        self.calls: list[tuple[Any, ...]] = []
        for pool, n in pools.items():
            self.scale(pool, n)

    run_dir = Path("/nonexistent")
    settings = Settings()
    urls = {"api": "http://127.0.0.1:1", "admin": "http://127.0.0.1:2", "ai_provider": "", "sms_gateway": ""}

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def components(self) -> list[Component]:
        return self.table.with_pgids({c.name: 100 + i for i, c in enumerate(self.table)})

    def pids(self, component: str) -> list[int]:
        return [1000]

    def kill(self, component: str, sig: int = signal.SIGKILL) -> list[int]:
        self.calls.append(("kill", component, sig))
        return [1000]

    def kill_landed_at(self, component: str) -> float | None:
        return None

    def pause(self, component: str) -> list[int]:
        self.calls.append(("pause", component))
        return [1000]

    def resume(self, component: str) -> list[int]:
        self.calls.append(("resume", component))
        return [1000]

    def restart(self, component: str) -> None:
        self.calls.append(("restart", component))

    def set_autorestart(self, component: str, enabled: bool) -> None:
        self.calls.append(("autorestart", component, enabled))

    def wait_healthy(self, component: str, timeout: float = 30.0) -> None:
        self.calls.append(("wait_healthy", component))

    def ready_seconds(self, component: str) -> float | None:
        return 0.25

    def scale(self, pool: str, n: int) -> None:
        self.calls.append(("scale", pool, n))
        current = self.table.pool(pool)
        for index in range(len(current) + 1, n + 1):
            name, lane = (f"web_{index}", None) if pool == "web" else (f"worker_{pool}_{index}", pool)
            self.table.add(Component(name, "web" if pool == "web" else "worker", lane=lane, index=index))
        for component in current[n:]:
            self.table.remove(component.name)

    def links(self) -> dict[str, dict[str, str]]:
        return {}

    def valkey_nodes(self) -> dict[tuple[str, int], str]:
        return {("127.0.0.1", 6380): "valkey"}

    def export(self, dest: Path, allow_pending: frozenset[str] = frozenset(),
               quiet_timeout: float | None = None) -> FinalRead:
        return FinalRead(True, 0.0, 0, {})


NoExport = type("NoExport", (), {k: v for k, v in vars(FakeDeployment).items()
                                 if k not in ("export", "__dict__", "__weakref__")})


class OldScale(FakeDeployment):
    def scale(self, kind: str, n: int) -> None:  # type: ignore[override]
        super().scale(kind, n)


def test_the_embedded_adapter_conforms(tmp_path: Path) -> None:
    deployment = EmbeddedDeployment(stack=None, spec=_spec(tmp_path))
    assert {"start", "stop", "kill", "pause", "restart", "scale", "urls", "links", "export", "components"} <= set(_MEMBERS)
    assert isinstance(deployment, Deployment)
    assert _mismatches(EmbeddedDeployment) == []
    assert deployment.run_dir == (tmp_path / "run").resolve() and deployment.urls == {}  # nothing started


def test_the_conformance_check_catches_a_missing_or_different_member() -> None:
    assert isinstance(FakeDeployment({}), Deployment) and _mismatches(FakeDeployment) == []
    assert _mismatches(OldScale) == ["scale: parameters ['self', 'kind', 'n'] != ['self', 'pool', 'n']"]
    assert not isinstance(NoExport({}), Deployment) and _mismatches(NoExport) == ["export: missing"]


def test_the_adapter_takes_a_spec_or_a_stack_not_both(tmp_path: Path) -> None:
    from stack.embedded.stack import EmbeddedStack

    stack = EmbeddedStack(_spec(tmp_path))
    assert EmbeddedDeployment(stack=stack).stack is stack
    with pytest.raises(ValueError, match="spec or stack, not both"):
        EmbeddedDeployment(_spec(tmp_path), stack=stack)


def test_process_nemesis_scales_pools_through_the_interface() -> None:
    fake = FakeDeployment({"web": 2, "merit": 2, "ai": 1})
    nemesis = ProcessNemesis(fake)
    fault = FaultSpec(at=0, kind="scale", target="merit", duration=1, params={"count": 0})
    assert nemesis.start(fault) == {"from": 2, "to": 0}  # the ai worker is not in the merit pool
    assert fake.table.pool("merit") == []
    nemesis.end(fault)
    assert [c.name for c in fake.table.pool("merit")] == ["worker_merit_1", "worker_merit_2"]
    web = FaultSpec(at=0, kind="scale", target="web", duration=1, params={"count": 3})
    assert nemesis.start(web) == {"from": 2, "to": 3}
    nemesis.heal()
    assert len(fake.table.pool("web")) == 2


def test_process_nemesis_kills_and_revives_through_the_interface() -> None:
    fake = FakeDeployment({"merit": 1})
    nemesis = ProcessNemesis(fake)
    kill = FaultSpec(at=0, kind="kill", target="worker_merit_1", duration=1)
    assert nemesis.start(kill)["pids"] == [1000]
    assert fake.calls[-2:] == [("autorestart", "worker_merit_1", False), ("kill", "worker_merit_1", signal.SIGKILL)]
    ended = nemesis.end(kill)
    assert ended["ready"] is True and ended["startup_seconds"] == 0.25
    assert fake.calls[-2:] == [("autorestart", "worker_merit_1", True), ("wait_healthy", "worker_merit_1")]
    with pytest.raises(NemesisError, match=r"unknown component 'worker_merit_2'; running: \['relay', 'worker_merit_1'\]"):
        nemesis.start(FaultSpec(at=0, kind="kill", target="worker_merit_2", duration=1))


class ForkingWorker(FakeDeployment):
    """A merit worker whose tree reads, in turn: busy, idle, and a horse forked just before the freeze."""

    def __init__(self, trees: list[list[int]]) -> None:
        super().__init__({"merit": 1})
        self.trees = trees
        self.calls.clear()

    def pids(self, component: str) -> list[int]:
        return self.trees.pop(0) if len(self.trees) > 1 else self.trees[0]


def test_a_pause_waiting_for_idle_thaws_a_horse_forked_under_it_and_freezes_again() -> None:
    busy, idle = [1000, 1001], [1000]
    fake = ForkingWorker([busy, idle, busy, idle, idle])
    pause = FaultSpec(at=0, kind="pause", target="worker_merit_1", duration=1, params={"wait_idle": 5.0})
    detail = ProcessNemesis(fake).start(pause)
    assert detail == {"pids": idle, "idle": True, "pause_attempts": 2}
    assert fake.calls == [("pause", "worker_merit_1"), ("resume", "worker_merit_1"), ("pause", "worker_merit_1")]


def test_a_pause_without_wait_idle_freezes_a_busy_worker_at_once() -> None:
    fake = ForkingWorker([[1000, 1001]])
    detail = ProcessNemesis(fake).start(FaultSpec(at=0, kind="pause", target="worker_merit_1", duration=1))
    assert detail == {"pids": [1000, 1001]} and fake.calls == [("pause", "worker_merit_1")]


def test_a_pause_that_never_sees_idle_freezes_the_busy_worker_and_says_so() -> None:
    fake = ForkingWorker([[1000, 1001]])
    pause = FaultSpec(at=0, kind="pause", target="worker_merit_1", duration=1, params={"wait_idle": 0.05})
    assert ProcessNemesis(fake).start(pause) == {"pids": [1000, 1001], "idle": False, "pause_attempts": 1}


class SaidStates:
    """A worker that runs its jobs in-process (the simple model): its tree is one pid, always; its
    published state reads, in turn, as listed (the last one repeats)."""

    def __init__(self, states: list[str]) -> None:
        self.states = states

    def busy(self, component: str) -> bool:
        return (self.states.pop(0) if len(self.states) > 1 else self.states[0]) == "busy"

    def take_errors(self) -> dict:
        return {}


def test_a_kill_waiting_for_a_job_sees_an_in_process_job_by_the_workers_state() -> None:
    fake = ForkingWorker([[1000]])
    kill = FaultSpec(at=0, kind="kill", target="worker_merit_1", duration=1, params={"wait_busy": 5.0})
    assert ProcessNemesis(fake, worker_states=SaidStates(["idle", "idle", "busy"])).start(kill)["mid_job"] is True
    # without the state, a one-pid tree never looks busy: the kill lands after the wait, not mid-job
    quick = FaultSpec(at=0, kind="kill", target="worker_merit_1", duration=1, params={"wait_busy": 0.05})
    assert ProcessNemesis(ForkingWorker([[1000]])).start(quick)["mid_job"] is False


def test_worker_states_are_read_at_the_harness_direct_valkey_address() -> None:
    """On compose the settings' URL names the containers' service (unresolvable from the host):
    every read failed and said "not busy", so no in-process job was seen (rehearsal run 24)."""
    from types import SimpleNamespace

    from chaos.nemesis.process import WorkerStates
    from stack.config import Settings

    compose_like = SimpleNamespace(settings=Settings(valkey_url="rediss://valkey:6379/0"),
                                   urls={"valkey": "rediss://127.0.0.1:40123/0"})
    assert WorkerStates.of(compose_like).settings.valkey_url == "rediss://127.0.0.1:40123/0"  # type: ignore[arg-type]
    sentinels = Settings(valkey_url="rediss://valkey:6379/0", valkey_sentinels="10.0.0.5:26379")
    with_sentinels = SimpleNamespace(settings=sentinels, urls={"valkey": "rediss://127.0.0.1:40123/0"})
    assert WorkerStates.of(with_sentinels).settings is sentinels  # type: ignore[arg-type]


def test_failed_state_reads_are_counted_in_the_kills_detail() -> None:
    """A read that fails says "not busy" (the tree still speaks), but the fault's detail names how
    many failed and the last error: on compose every read once failed unseen (rehearsal run 24)."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    from chaos.nemesis.process import WorkerStates
    from stack.config import Settings

    class Unreachable:
        def get(self, key: str) -> bytes:
            raise RedisConnectionError("Error -2 connecting to valkey:6379. Name or service not known.")

    states = WorkerStates(Settings())
    states._client = Unreachable()
    kill = FaultSpec(at=0, kind="kill", target="worker_merit_1", duration=1, params={"wait_busy": 0.05})
    detail = ProcessNemesis(ForkingWorker([[1000]]), worker_states=states).start(kill)
    assert detail["mid_job"] is False
    errors = detail["state_read_errors"]
    assert errors["count"] >= 1 and "Name or service not known" in errors["last"]
    assert states.take_errors() == {}  # taken once: the next fault counts its own
    healthy = WorkerStates(Settings())
    healthy._client = type("Idle", (), {"get": lambda self, key: b"idle"})()
    again = ProcessNemesis(ForkingWorker([[1000]]), worker_states=healthy).start(kill)
    assert "state_read_errors" not in again


def test_a_failover_waiting_for_a_job_sees_an_in_process_job_by_the_workers_state() -> None:
    """The failover nemesis strikes while the AI worker runs a job; since 7 December 2026 that
    worker runs jobs in-process, so a horse alone would never show it busy (the wait ran out and
    the strike came late, with no job in flight)."""
    from chaos.nemesis.failover import FailoverNemesis

    said = FailoverNemesis(ForkingWorker([[1000]]), worker_states=SaidStates(["idle", "busy"]))  # type: ignore[arg-type]
    assert said._wait_busy("worker_ai_1", 5.0) is True
    assert FailoverNemesis(ForkingWorker([[1000]]))._wait_busy("worker_ai_1", 0.05) is False  # type: ignore[arg-type]
    assert FailoverNemesis(ForkingWorker([[1000, 1001]]))._wait_busy("worker_ai_1", 0.05) is True  # type: ignore[arg-type]


def test_a_pause_waiting_for_idle_thaws_a_worker_that_said_busy_once_frozen() -> None:
    fake = ForkingWorker([[1000]])
    pause = FaultSpec(at=0, kind="pause", target="worker_merit_1", duration=1, params={"wait_idle": 5.0})
    # idle at the look, busy once frozen (it took a job in between), then idle both times
    detail = ProcessNemesis(fake, worker_states=SaidStates(["idle", "busy", "idle"])).start(pause)
    assert detail == {"pids": [1000], "idle": True, "pause_attempts": 2}
    assert fake.calls == [("pause", "worker_merit_1"), ("resume", "worker_merit_1"), ("pause", "worker_merit_1")]


def test_the_harness_side_imports_no_stack_dependency() -> None:
    heavy = ("fastapi", "rq", "sqlalchemy", "redis", "stack.embedded.stack")
    probe = ("import sys, chaos.deployment, chaos.deployment.embedded\n"
             f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
             "from chaos.deployment.embedded import EmbeddedDeployment\n"
             "EmbeddedDeployment(__import__('stack.embedded.stack').embedded.stack.StackSpec(run_dir='/tmp/x'))\n"
             f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n")
    lines = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.splitlines()
    assert lines[0] == "[]"
    assert "stack.embedded.stack" in lines[1]  # the control: building an adapter does import the stack


def _spec(tmp_path: Path) -> Any:
    from stack.embedded.stack import StackSpec

    return StackSpec(name="conf", run_dir=tmp_path / "run")


def test_the_embedded_adapter_notes_when_a_sigkill_left_and_only_a_sigkill(tmp_path: Path) -> None:
    import time

    class Supervisor:
        def kill(self, component: str, sig: int) -> list[int]:
            return [1000]

    deployment = EmbeddedDeployment(stack=type("Stack", (), {"supervisor": Supervisor()})())
    assert deployment.kill_landed_at("valkey") is None
    deployment.kill("valkey", signal.SIGSTOP)
    assert deployment.kill_landed_at("valkey") is None  # a pause is no kill
    before = time.time()
    deployment.kill("valkey")
    assert before <= deployment.kill_landed_at("valkey") <= time.time()
