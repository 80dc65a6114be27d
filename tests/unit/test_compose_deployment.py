"""The compose adapter (chaos/deployment/compose*.py) without an engine: services map to
components, the override carries the scenario's settings and nothing secret, the engine
wrapper reads pids and readiness right, and what compose cannot do is refused by name."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from chaos.deployment import Deployment
from chaos.deployment.compose import COMPOSE_SHAPE, ComposeDeployment, ComposeSpec, ComposeUnsupported
from chaos.deployment.compose_engine import Engine, EngineError, parse_docker_time, process_tree
from chaos.deployment.compose_files import (PYTHON_SERVICES, component_for_service, forward_config,
                                            override_document, settings_env)
from chaos.deployment.targets import unsupported_on
from chaos.scenarios import SCENARIOS
from tests.unit.test_deployment import _mismatches

START = "2026-11-30T11:00:00.500000000Z"


def test_services_map_to_components_and_the_rest_is_left_alone() -> None:
    web = component_for_service("web-2")
    assert (web.name, web.role, web.index, web.pool) == ("web_2", "web", 2, "web")
    worker = component_for_service("worker-merit-1")
    assert (worker.name, worker.role, worker.lane, worker.pool) == ("worker_merit_1", "worker", "merit", "merit")
    assert component_for_service("sms-gateway").role == "sms_gateway"
    for service in ("postgres", "certs", "ledger-init", "admin-forward", "ai-provider-admin", "worker-bogus-1"):
        assert component_for_service(service) is None, service


def test_settings_become_the_containers_environment_and_unknown_fields_are_named() -> None:
    assert settings_env({"reconciler_enabled": False, "answer_write_behind": 1.0, "time_scale": 0.02}) == {
        "PROCTOR_RECONCILER": "off", "PROCTOR_ANSWER_WRITE_BEHIND": "1.0", "TIME_SCALE": "0.02"}
    with pytest.raises(ValueError, match="'reconciler'"):
        settings_env({"reconciler": False})


def test_the_override_reaches_every_python_service_and_publishes_on_loopback_only(tmp_path: Path) -> None:
    doc = override_document({"PROCTOR_RECONCILER": "off"}, {"ai-provider": 18101, "sms-gateway": 18102},
                            tmp_path, tmp_path / "connections")
    services = doc["services"]
    for service in PYTHON_SERVICES:
        assert services[service]["environment"] == {"PROCTOR_RECONCILER": "off"}, service
        assert f"{tmp_path / 'connections'}:/srv/run/connections" in services[service]["volumes"]
    published = [port for s in services.values() for port in s.get("ports", [])]
    assert published == ["127.0.0.1:18101:9101", "127.0.0.1:18102:9101"]
    assert services["ai-provider-admin"]["network_mode"] == "service:ai-provider"
    assert "SECRET" not in json.dumps(doc) and "PASSWORD" not in json.dumps(doc)


def test_the_provider_forward_admits_only_the_gateway() -> None:
    cfg = forward_config(["172.29.213.1"], 8102)
    assert "tcp-request connection reject unless { src 172.29.213.1 }" in cfg
    both = forward_config(["172.29.213.1", "172.29.214.1"], 8102)  # the SMS gateway is on the egress network too
    assert "tcp-request connection reject unless { src 172.29.213.1 172.29.214.1 }" in both
    assert "server provider 127.0.0.1:8102" in cfg  # the provider sees a loopback peer, as embedded


def test_what_compose_cannot_run_says_why() -> None:
    assert ComposeSpec("x", Path("r")).unsupported() is None
    assert "wants {'web': 3" in ComposeSpec("x", Path("r"), shape={**COMPOSE_SHAPE, "web": 3}).unsupported()
    assert ComposeSpec("x", Path("r"), links=("valkey_web", "sms_gateway"), valkey_maxclients=12).unsupported() is None
    reason = ComposeSpec("x", Path("r"), links=("valkey_web", "web_2")).unsupported()
    assert reason.startswith("links ['web_2']: HAProxy -> web node links are not built on compose"), reason
    with pytest.raises(ComposeUnsupported, match=r"links \['web_\*'\]"):
        ComposeDeployment(ComposeSpec("x", Path("r"), links=("web_*",)))
    assert unsupported_on("embedded", SCENARIOS["answer_revisions"]) is None
    for runnable in ("worker_kill", "tls_churn", "tls_churn_fresh_connections"):
        assert unsupported_on("compose", SCENARIOS[runnable]) is None, runnable
    with pytest.raises(ValueError, match="target must be one of"):
        unsupported_on("k8s", SCENARIOS["worker_kill"])


def test_the_compose_adapter_conforms(tmp_path: Path) -> None:
    assert _mismatches(ComposeDeployment) == []
    assert isinstance(ComposeDeployment(ComposeSpec("conf", tmp_path)), Deployment)


def test_docker_times_keep_their_nanoseconds_to_the_microsecond() -> None:
    assert parse_docker_time("2026-11-30T11:00:01.123456789Z") - parse_docker_time(START) == pytest.approx(0.623456)
    assert parse_docker_time("2026-11-30T11:00:01Z") - parse_docker_time(START) == pytest.approx(0.5)


def test_the_process_tree_follows_children_lists(tmp_path: Path) -> None:
    for pid, children in ((10, "11"), (11, "12 13"), (12, ""), (13, ""), (99, "")):
        task = tmp_path / str(pid) / "task" / str(pid)
        task.mkdir(parents=True)
        (task / "children").write_text(children)
    assert process_tree(10, tmp_path) == [10, 11, 12, 13]
    assert process_tree(77, tmp_path) == []  # gone


class FakeApi:
    """The slice of docker.APIClient the engine wrapper uses, over in-memory containers."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.freeze_failures = 0
        self.inspected: list[str] = []
        self.info = {s: _info(s, running=True) for s in ("web-1", "admin-forward", "worker-sms-1")}
        self.info["admin-forward"]["HostConfig"]["NetworkMode"] = "container:id-web-1"

    def containers(self, all: bool, filters: dict[str, Any]) -> list[dict[str, Any]]:
        assert filters == {"label": ["com.docker.compose.project=p1"]}
        return [{"Id": f"id-{s}", "Labels": {"com.docker.compose.service": s}} for s in self.info]

    def inspect_container(self, cid: str) -> dict[str, Any]:
        self.inspected.append(cid)
        return self.info[cid.removeprefix("id-")]

    def kill(self, cid: str, signal: int) -> None:
        self.calls.append(("kill", cid))
        self.info[cid.removeprefix("id-")]["State"]["Running"] = False
        self.info[cid.removeprefix("id-")]["State"]["FinishedAt"] = "2026-12-06T10:00:01.250000000Z"

    def start(self, cid: str) -> None:
        self.calls.append(("start", cid))
        self.info[cid.removeprefix("id-")]["State"]["Running"] = True

    def restart(self, cid: str, timeout: int) -> None:
        self.calls.append(("restart", cid))

    def pause(self, cid: str) -> None:
        self.calls.append(("pause", cid))
        if self.freeze_failures:
            self.freeze_failures -= 1
            raise RuntimeError("500 Server Error: OCI runtime pause failed: unable to freeze: unknown")

    def top(self, cid: str) -> dict[str, Any]:
        return {"Processes": [["root", "1000001"], ["proctor", "1000002"], ["proctor", "1000003"]]}


class FakeClient:
    def __init__(self) -> None:
        self.api = FakeApi()


def _info(service: str, running: bool) -> dict[str, Any]:
    return {"State": {"Running": running, "Paused": False, "Pid": 1000001, "StartedAt": START, "Status": "running",
                      "Health": {"Status": "healthy", "Log": []}},
            "HostConfig": {"Init": True, "NetworkMode": "proctor_stack"}}


def test_pids_leave_out_docker_init_and_a_killed_container_stays_down_until_started() -> None:
    client = FakeClient()
    engine = Engine("p1", client)
    assert engine.pids("worker-sms-1") == [1000002, 1000003]  # no such /proc here: the engine's `top`
    client.api.info["worker-sms-1"]["HostConfig"]["Init"] = False
    assert engine.pids("worker-sms-1") == [1000001, 1000002, 1000003]  # the control: without init, PID 1 counts
    engine.kill("worker-sms-1", signal.SIGKILL)
    assert engine.pids("worker-sms-1") == [] and not engine.running("worker-sms-1")
    engine.ensure_running("worker-sms-1")
    engine.ensure_running("worker-sms-1")  # already running: not started twice
    assert client.api.calls == [("kill", "id-worker-sms-1"), ("start", "id-worker-sms-1")]


def test_pids_ask_the_engine_again_only_when_the_remembered_pid_left_the_container(monkeypatch) -> None:
    """A kill reads the pids right before its signal; an engine round trip there delayed a kill by a
    second on a saturated machine, so the container's first process is remembered while /proc says
    it is still that container's."""
    import chaos.deployment.compose_engine as compose_engine

    owner = {1000001: "id-worker-sms-1"}
    monkeypatch.setattr(compose_engine, "_in_container", lambda pid, cid: owner.get(pid) == cid)
    client = FakeClient()
    engine = Engine("p1", client)
    assert engine.pids("worker-sms-1") == [1000002, 1000003]
    assert engine.pids("worker-sms-1") == [1000002, 1000003]
    assert client.api.inspected == ["id-worker-sms-1"]  # the second read asked nobody
    owner.clear()  # the container restarted: its old first process is gone
    client.api.info["worker-sms-1"]["State"]["Pid"] = 1000009
    engine.pids("worker-sms-1")
    assert client.api.inspected == ["id-worker-sms-1"] * 2
    assert engine._main_process("worker-sms-1") == (1000009, True)


def test_the_remembered_pid_counts_only_in_its_own_containers_cgroup(tmp_path) -> None:
    from chaos.deployment.compose_engine import _in_container

    (tmp_path / "41").mkdir()
    (tmp_path / "41" / "cgroup").write_text("12:pids:/docker/abc123\n11:memory:/docker/abc123\n")
    assert _in_container(41, "abc123", tmp_path)
    assert not _in_container(41, "def456", tmp_path)  # the pid now belongs to another container
    assert not _in_container(42, "abc123", tmp_path)  # gone


def test_a_sigkill_returns_when_the_engine_saw_the_container_exit() -> None:
    from chaos.deployment.compose_engine import parse_docker_time

    engine = Engine("p1", FakeClient())
    assert engine.kill("worker-sms-1", signal.SIGKILL) == parse_docker_time("2026-12-06T10:00:01.25Z")
    assert engine.kill("web-1", signal.SIGTERM) is None  # no wait for the exit, no time to give


def test_starting_web_1_again_restarts_what_shares_its_network_namespace() -> None:
    client = FakeClient()
    engine = Engine("p1", client)
    engine.kill("web-1")
    engine.ensure_running("web-1")
    assert client.api.calls[-1] == ("restart", "id-admin-forward")
    engine.kill("worker-sms-1")
    engine.ensure_running("worker-sms-1")  # the control: nothing shares a worker's namespace
    assert client.api.calls[-1] == ("start", "id-worker-sms-1")


def test_readiness_counts_only_a_passing_check_that_began_after_the_latest_start() -> None:
    client = FakeClient()
    engine = Engine("p1", client)
    health = client.api.info["web-1"]["State"]["Health"]
    health["Log"] = [{"Start": "2026-11-30T11:00:00.1Z", "End": "2026-11-30T11:00:00.2Z", "ExitCode": 0},  # before
                     {"Start": "2026-11-30T11:00:01.0Z", "End": "2026-11-30T11:00:01.1Z", "ExitCode": 1}]
    assert engine.ready_seconds("web-1") is None  # the earlier pass belongs to the previous start
    with pytest.raises(EngineError, match="web-1 did not become healthy"):
        engine.wait_healthy("web-1", timeout=0)
    health["Log"].append({"Start": "2026-11-30T11:00:03.0Z", "End": "2026-11-30T11:00:03.25Z", "ExitCode": 0})
    assert engine.ready_seconds("web-1") == pytest.approx(2.75)
    engine.wait_healthy("web-1", timeout=0)


def test_an_unknown_project_or_service_is_named() -> None:
    client = FakeClient()
    client.api.info.clear()
    with pytest.raises(EngineError, match="com.docker.compose.project=p1"):
        Engine("p1", client)
    with pytest.raises(EngineError, match="no service 'web-9'"):
        Engine("p1", FakeClient()).inspect("web-9")


def test_a_pause_the_runtime_could_not_freeze_is_tried_again_a_bounded_number_of_times() -> None:
    client = FakeClient()
    engine = Engine("p1", client)
    client.api.freeze_failures = 2
    engine.pause("web-1")
    assert client.api.calls == [("pause", "id-web-1")] * 3
    client.api.freeze_failures = 99  # the control: a freeze that never succeeds is an error, not a hang
    with pytest.raises(EngineError, match="pause failed after 5 attempt"):
        engine.pause("web-1")


def test_proctor_run_names_why_a_scenario_does_not_run_on_compose(capsys: pytest.CaptureFixture[str]) -> None:
    from chaos.cli.run import main

    assert main(["answer_revisions", "--target", "compose"]) == 2  # before any engine or stack is touched
    assert "answer_revisions does not run on compose: links ['web_1', 'web_2']" in capsys.readouterr().err


def test_the_reproduce_command_names_the_target_only_when_it_is_not_the_default() -> None:
    from chaos.runner import reproduce_command

    scenario = SCENARIOS["worker_kill"]
    assert reproduce_command(scenario, 7, 0.01, "compose").endswith("--time-scale 0.01 --target compose")
    assert "--target" not in reproduce_command(scenario, 7, 0.01)


def test_a_worker_restarted_with_the_same_pid_gets_a_new_rq_name() -> None:
    from chaos.observe.valkey_stats import component_of
    from stack.lanes.worker import worker_name

    first, second = worker_name("worker_sms_1", 7), worker_name("worker_sms_1", 7)  # pid 7 again, in a new container
    assert first != second and first.startswith("worker_sms_1.7.")
    assert component_of(first) == "worker_sms_1"  # connection stats still group it by component


def test_published_ports_are_drawn_after_the_long_set_up_right_before_up(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A port drawn before a minute-long image build was once taken by another process by the time
    `up` bound it: start() runs set-up, then draws, then writes the override and runs `--up`."""
    import chaos.deployment.compose as compose_module

    draws = iter(range(20000, 20100))
    monkeypatch.setattr(compose_module, "free_ports", lambda n: [next(draws) for _ in range(n)])
    deployment = ComposeDeployment(ComposeSpec("ports", tmp_path / "run"))
    at_build = dict(deployment._ports)
    seen: list[tuple[list[str], dict[str, int]]] = []

    def fake_script(argv: list[str], log_name: str) -> None:
        seen.append((argv, dict(deployment._ports)))
        if "--up" in argv:
            raise EngineError("stop here: no engine in a unit test")

    monkeypatch.setattr(deployment, "_script", fake_script)
    monkeypatch.setattr(deployment, "stop", lambda: None)
    with pytest.raises(EngineError):
        deployment.start()
    assert [argv for argv, _ in seen] == [["scripts/compose-setup.sh"], ["scripts/compose-setup.sh", "--up"]]
    assert seen[0][1] == at_build and seen[1][1] != at_build  # control: the first call still saw the old draw
    override = json.loads((tmp_path / "run" / "compose" / "override.json").read_text())
    assert f"127.0.0.1:{seen[1][1]['valkey']}:6380" in json.dumps(override)
