"""EmbeddedStack with a fake component table (tiny HTTP servers and sleepers in place of
the real web/provider/relay/worker modules) but the real Valkey and HAProxy: topology,
balancing, scaling, kill/restart, orphan protection and the detached CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from fake_components import FAKE_HTTP, FORKING_WORKER

from stack.embedded import EmbeddedStack, StackSpec
from stack.embedded.haproxy import disable_server, enable_server, server_states
from stack.embedded.manifest import read_manifest
from stack.embedded.watchdog import _read_stat

pytestmark = pytest.mark.integration

DETACHER = """
import json, sys
from stack.embedded import EmbeddedStack, StackSpec
spec = StackSpec(name="detached", web=1, run_dir=sys.argv[1], commands=json.loads(sys.argv[2]), worker_settle=0.3)
EmbeddedStack(spec).start().detach()
"""

RUNNER = """
import json, sys, time
from stack.embedded import EmbeddedStack, StackSpec
spec = StackSpec(name="orphans", web=2, run_dir=sys.argv[1], commands=json.loads(sys.argv[2]), worker_settle=0.3)
EmbeddedStack(spec).start()
time.sleep(600)
"""


@pytest.fixture(scope="module")
def commands(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    folder = tmp_path_factory.mktemp("fakes")
    (folder / "fake_http.py").write_text(FAKE_HTTP)
    (folder / "fake_worker.py").write_text(FORKING_WORKER)
    http = ["{python}", str(folder / "fake_http.py"), "{port}"]
    return {"ai_provider": http, "sms_gateway": http, "web": http,
            "relay": ["{python}", "-c", "import time; time.sleep(600)"],
            "worker": ["{python}", str(folder / "fake_worker.py"), "{run_dir}/{name}.horse"]}


def _alive(pid: int) -> bool:
    info = _read_stat(pid)
    return info is not None and info.state != "Z"


def _all_pids(manifest: dict[str, Any], run_dir: Path) -> set[int]:
    pids = {manifest["supervisor_pid"], manifest["watchdog_pid"]}
    for entry in manifest["components"].values():
        pids.update(entry["pids"])
    pids.update(int(p.read_text()) for p in run_dir.glob("*.horse"))
    return pids


def _wait_gone(pids: set[int], timeout: float) -> set[int]:
    deadline = time.monotonic() + timeout
    while (left := {p for p in pids if _alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _wait_manifest(run_dir: Path, status: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (run_dir / "manifest.json").exists():
            manifest = read_manifest(run_dir)
            if manifest["status"] == status:
                return manifest
        time.sleep(0.1)
    raise AssertionError(f"manifest never said {status!r}")


@pytest.fixture
def stack(tmp_path: Path, commands: dict[str, list[str]]) -> Iterator[EmbeddedStack]:
    spec = StackSpec(name="fake", web=2, run_dir=tmp_path / "run", commands=commands, worker_settle=0.3,
                     settings_overrides={"time_scale": 0.5})
    with EmbeddedStack(spec) as running:
        yield running


def test_topology_urls_settings_and_manifest(stack: EmbeddedStack) -> None:
    assert stack.supervisor.names() == ["valkey", "ai_provider", "sms_gateway", "web_1", "web_2", "haproxy", "relay",
                                  "worker_merit_1", "worker_merit_2", "worker_ai_1", "worker_sms_1"]
    assert stack.settings.time_scale == 0.5 and stack.settings.valkey_url == stack.urls["valkey"]
    assert stack.urls["valkey"].startswith("rediss://127.0.0.1:") and stack.settings.valkey_ca.startswith("/")
    assert stack.startup_seconds is not None and stack.startup_seconds > 0  # measured; speed is a benchmark's business
    manifest = read_manifest(stack.run_dir)
    assert manifest["status"] == "ready" and manifest["urls"] == stack.urls
    assert manifest["versions"]["valkey"].startswith("valkey-server 8")
    assert manifest["settings"]["TIME_SCALE"] == "0.5"
    entries = manifest["components"]
    assert {k: entries["worker_merit_2"][k] for k in ("role", "lane", "index", "stop_stage")} == {
        "role": "worker", "lane": "merit", "index": 2, "stop_stage": 0}
    assert [entries[n]["stop_stage"] for n in ("web_1", "ai_provider", "valkey")] == [0, 1, 2]
    assert stack.component("valkey").health.kind == "valkey" and stack.component("relay").health.kind == "alive"
    client = stack.valkey()
    assert client.ping() and client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    with stack.engine.connect() as conn:
        assert conn.exec_driver_sql("select code from exams").scalar() == "NOVA-101"


def test_haproxy_balances_and_obeys_the_runtime_api(stack: EmbeddedStack) -> None:
    sock = stack.urls["haproxy_socket"]
    with httpx.Client(base_url=stack.urls["api"], trust_env=False) as client:
        nodes = {client.get("/anything").headers["X-Proctor-Node"] for _ in range(6)}
        assert nodes == {"web_1", "web_2"}
        disable_server(sock, "web_1")
        assert server_states(sock)["web_1"] == "MAINT"
        assert {client.get("/").headers["X-Proctor-Node"] for _ in range(4)} == {"web_2"}
        enable_server(sock, "web_1")


def test_scale_web_and_workers(stack: EmbeddedStack) -> None:
    stack.scale("web", 3)
    stack.scale("merit", 2)
    assert {"web_3", "worker_merit_2"} <= set(stack.supervisor.names())
    assert set(server_states(stack.urls["haproxy_socket"])) == {"web_1", "web_2", "web_3"}
    table = stack.component_table()
    assert [(c.name, c.index) for c in table.pool("web")] == [("web_1", 1), ("web_2", 2), ("web_3", 3)]
    assert table.get("web_3").pgid in stack.supervisor.pids("web_3") and stack.urls["web_3"].endswith(str(table.get("web_3").port))
    assert read_manifest(stack.run_dir)["components"]["web_3"]["index"] == 3
    removed = stack.supervisor.pids("web_3")
    stack.scale("web", 1)
    stack.scale("merit", 0)
    assert set(server_states(stack.urls["haproxy_socket"])) == {"web_1"}
    assert not any(n.startswith("worker_merit") for n in stack.supervisor.names())
    table = stack.component_table()
    assert [c.name for c in table.pool("web")] == ["web_1"] and table.pool("merit") == []
    assert "web_3" not in stack.urls and "web_2_admin" not in stack.ports
    assert _wait_gone(set(removed), 2) == set()


def test_kill_is_restarted_unless_autorestart_is_off(stack: EmbeddedStack) -> None:
    before = stack.supervisor.pids("worker_ai_1")  # the worker and its own-group "horse"
    assert len(before) == 2
    stack.supervisor.kill("worker_ai_1")
    assert _wait_gone(set(before), 2) == set()
    stack.wait_healthy("worker_ai_1", 10)
    assert not set(stack.supervisor.pids("worker_ai_1")) & set(before)
    stack.supervisor.set_autorestart("web_2", False)
    stack.supervisor.kill("web_2")
    time.sleep(1.0)
    assert stack.supervisor.pids("web_2") == []


def test_no_process_survives_a_sigkilled_runner(tmp_path: Path, commands: dict[str, list[str]]) -> None:
    run_dir = tmp_path / "run"
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(run_dir), json.dumps(commands)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        manifest = _wait_manifest(run_dir, "ready", 30)
        deadline = time.monotonic() + 5
        while len([p for p in run_dir.glob("*.horse") if p.read_text()]) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = _all_pids(manifest, run_dir)
        assert len(pids) >= 14  # supervisor, watchdog, 10 components, 3 horses
        runner.send_signal(signal.SIGKILL)
        runner.wait()
        assert _wait_gone(pids, 5) == set()
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from stack.embedded import cli; sys.exit(getattr(cli, sys.argv[1])(sys.argv[2:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60)


def test_cli_up_detached_status_down(tmp_path: Path, commands: dict[str, list[str]]) -> None:
    table = tmp_path / "components.json"
    table.write_text(json.dumps(commands))
    run_dir = tmp_path / "run"
    up = _cli("up", "--web", "2", "--time-scale", "0.02", "--run-dir", str(run_dir), "--components", str(table))
    try:
        assert up.returncode == 0, up.stderr
        assert "api" in up.stdout and str(run_dir) in up.stdout
        status = _cli("status", str(run_dir))
        assert status.returncode == 0, status.stdout + status.stderr
        assert "web_2" in status.stdout and "FAIL" not in status.stdout
        manifest = read_manifest(run_dir)
        assert manifest["settings"]["TIME_SCALE"] == "0.02"
        pids = _all_pids(manifest, run_dir)
    finally:
        down = _cli("down", str(run_dir))
    assert down.returncode == 0, down.stdout + down.stderr
    assert _wait_gone(pids, 2) == set()
    assert read_manifest(run_dir)["status"] == "stopped"
    assert _cli("status", str(run_dir)).returncode == 1


def test_cli_errors_are_clear(tmp_path: Path) -> None:
    status = _cli("status", str(tmp_path))
    assert status.returncode == 2 and "no manifest" in status.stderr
    down = _cli("down", str(tmp_path))
    assert down.returncode == 2 and "no manifest" in down.stderr


def test_a_port_taken_before_the_child_binds_is_retried(
    tmp_path: Path, commands: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    import stack.embedded.stack as stack_module

    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    real_free_port = stack_module.free_port
    calls = iter([taken, taken])  # valkey and ai_provider (the first two allocations) lose the race
    monkeypatch.setattr(stack_module, "free_port", lambda: next(calls, None) or real_free_port())
    spec = StackSpec(name="race", web=1, merit_workers=0, ai_workers=0, sms_workers=0,
                     run_dir=tmp_path / "run", commands=commands)
    try:
        with EmbeddedStack(spec) as running:
            assert taken not in running.ports.values()
            assert running.valkey().ping()
            assert running.settings.valkey_url == running.urls["valkey"]
    finally:
        squatter.close()


def test_a_detached_stack_outlives_its_process_until_down(tmp_path: Path, commands: dict[str, list[str]]) -> None:
    run_dir = tmp_path / "run"
    subprocess.run([sys.executable, "-c", DETACHER, str(run_dir), json.dumps(commands)], check=True, timeout=60)
    manifest = read_manifest(run_dir)
    assert manifest["status"] == "detached"
    pids = _all_pids(manifest, run_dir) - {manifest["supervisor_pid"], manifest["watchdog_pid"]}
    try:
        time.sleep(0.5)  # the watchdog would have killed them by now
        assert all(_alive(pid) for pid in pids)
        assert _cli("status", str(run_dir)).returncode == 0
    finally:
        down = _cli("down", str(run_dir))
    assert down.returncode == 0, down.stdout + down.stderr
    assert _wait_gone(pids, 2) == set()
