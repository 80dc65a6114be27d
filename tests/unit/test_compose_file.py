"""docker-compose.yml read as data: the promises it makes without an engine. Each rule is a
function returning its problems, and each has a negative control that breaks the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from stack.config import ENV_NAMES
from stack.embedded.spec import LANES

COMPOSE_FILE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
ONE_SHOTS = {"certs", "ledger-init"}
SECRET_NAMES = {ENV_NAMES[n] for n in ("token_secret", "admin_token", "roster_key", "valkey_url", "database_url")} | {
    "PROCTOR_VALKEY_PASSWORD", "PROCTOR_PG_PASSWORD"}
NOT_SETTINGS = {"PROCTOR_COMPONENT", "PROCTOR_READY_FILE", "PROCTOR_SMS_ALLOWLIST", "PROCTOR_ADMIN_PEER",
                "PROCTOR_COMPOSE_NET", "PROCTOR_VALKEY_NODE", "PROCTOR_SENTINEL_NAME"}
"""Environment the components read outside stack.config (the same names the embedded runner sets), and
what the certificate and the Sentinel topology's configuration scripts read (stack/deploy/valkey_conf.py)."""


def load() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def unhealthy_waits(doc: dict[str, Any]) -> list[str]:
    """Long-running services without a health check; dependencies not waited for properly."""
    problems = []
    for name, service in doc["services"].items():
        if name not in ONE_SHOTS and "healthcheck" not in service:
            problems.append(f"{name}: no healthcheck")
        for dep, how in (service.get("depends_on") or {}).items():
            want = "service_completed_successfully" if dep in ONE_SHOTS else "service_healthy"
            if not isinstance(how, dict) or how.get("condition") != want:
                problems.append(f"{name}: depends_on {dep} without condition {want}")
    return problems


def published_ports(doc: dict[str, Any]) -> dict[str, list[str]]:
    return {name: list(s["ports"]) for name, s in doc["services"].items() if s.get("ports")}


def exposed_beyond_loopback(doc: dict[str, Any]) -> list[str]:
    return [f"{name}: {port}" for name, ports in published_ports(doc).items() for port in ports
            if not str(port).startswith("127.0.0.1:")]


def secrets_in_file(doc: dict[str, Any]) -> list[str]:
    """Secret variables set in the committed file instead of the env file."""
    return [f"{name}: {key}" for name, service in doc["services"].items()
            for key in (service.get("environment") or {}) if key in SECRET_NAMES]


def unknown_settings(doc: dict[str, Any]) -> list[str]:
    known = set(ENV_NAMES.values()) | NOT_SETTINGS
    return [f"{name}: {key}" for name, service in doc["services"].items()
            for key in (service.get("environment") or {}) if key not in known]


def python_without_init(doc: dict[str, Any]) -> list[str]:
    return [name for name, service in doc["services"].items()
            if service.get("command", [""])[0] == "python" and name not in ONE_SHOTS and service.get("init") is not True]


def test_no_version_key_compose_v1_and_v2_both_read_it() -> None:
    assert "version" not in load()


def test_the_embedded_components_are_all_there() -> None:
    services = set(load()["services"])
    workers = {f"worker-{lane}-1" for lane in LANES} | {"worker-merit-2"}
    assert {"valkey", "postgres", "haproxy", "web-1", "web-2", "relay", "ai-provider", "sms-gateway"} | workers <= services


def test_every_service_is_health_checked_and_waited_for() -> None:
    assert unhealthy_waits(load()) == []


def test_negative_control_a_missing_healthcheck_and_a_plain_dependency_are_caught() -> None:
    doc = load()
    doc["services"]["relay"].pop("healthcheck")
    doc["services"]["web-2"]["depends_on"] = {"valkey": {"condition": "service_started"}}
    assert sorted(unhealthy_waits(doc)) == ["relay: no healthcheck",
                                            "web-2: depends_on valkey without condition service_healthy"]


def test_only_haproxy_and_the_admin_listener_are_published_on_loopback() -> None:
    doc = load()
    assert sorted(published_ports(doc)) == ["haproxy", "web-1"]
    assert [p.rsplit(":", 1)[1] for p in published_ports(doc)["web-1"]] == ["9001"]  # admin-forward's port
    assert exposed_beyond_loopback(doc) == []


@pytest.mark.parametrize("port", ["8080:8080", "0.0.0.0:8080:8080", "8080"])
def test_negative_control_a_port_on_every_interface_is_caught(port: str) -> None:
    doc = load()
    doc["services"]["haproxy"]["ports"].append(port)
    assert exposed_beyond_loopback(doc) == [f"haproxy: {port}"]


def test_no_secret_in_the_committed_file_and_every_env_file_is_the_run_folders() -> None:
    doc = load()
    assert secrets_in_file(doc) == []
    run = "${PROCTOR_COMPOSE_RUN:-.compose/run}"
    env_files = {name: s.get("env_file") for name, s in doc["services"].items() if s.get("env_file")}
    as_lists = {name: [files] if isinstance(files, str) else list(files) for name, files in env_files.items()}
    assert {f for files in as_lists.values() for f in files} <= {f"{run}/proctor.env", *(f"{run}/valkey-{u}.env" for u in
                                                                  ("web", "relay", "worker", "harness"))}


def test_each_valkey_client_holds_only_its_own_components_credential() -> None:
    """Web nodes the web user's, the relay the relay's, workers the worker's (finding 1 on compose);
    a service that never talks to Valkey (providers, ledger-init) holds none."""
    run = "${PROCTOR_COMPOSE_RUN:-.compose/run}"
    expected = {"web-1": "web", "web-2": "web", "relay": "relay", "valkey": "harness",
                **{f"worker-{lane}-{n}": "worker" for lane, n in (("merit", 1), ("merit", 2), ("ai", 1), ("sms", 1),
                                                                            ("sms", 2))}}
    for name, service in load()["services"].items():
        files = service.get("env_file") or []
        files = [files] if isinstance(files, str) else files
        users = [f.rsplit("/valkey-", 1)[1].removesuffix(".env") for f in files if "/valkey-" in f]
        assert users == ([expected[name]] if name in expected else []), name
        if name in expected:
            assert f"{run}/proctor.env" in files, name


def test_negative_control_a_secret_in_the_file_is_caught() -> None:
    doc = load()
    doc["services"]["web-1"]["environment"] = {**doc["services"]["web-1"]["environment"], "PROCTOR_ADMIN_TOKEN": "x"}
    assert secrets_in_file(doc) == ["web-1: PROCTOR_ADMIN_TOKEN"]


def test_settings_use_the_stacks_own_environment_names() -> None:
    assert unknown_settings(load()) == []


def test_negative_control_a_made_up_setting_name_is_caught() -> None:
    doc = load()
    doc["services"]["relay"]["environment"] = {**doc["services"]["relay"]["environment"], "RELAY_INTERVAL": "1"}
    assert unknown_settings(doc) == ["relay: RELAY_INTERVAL"]


def test_python_services_have_an_init_that_forwards_sigterm() -> None:
    doc = load()
    assert python_without_init(doc) == []
    doc["services"]["relay"]["init"] = False
    assert python_without_init(doc) == ["relay"]  # negative control


def _installed_extras(text: str) -> set[str]:
    import re

    found = re.search(r'"/src\[([a-z,]+)\]"', text)
    return set(found.group(1).split(",")) if found else set()


def test_the_image_installs_the_stack_extra() -> None:
    """The base install is the harness only (pyproject.toml): an image without the stack extra has no
    SQLAlchemy, FastAPI or RQ, and every stack service exits at start-up (a CI run caught it)."""
    root = COMPOSE_FILE.parent
    assert {"stack", "postgres"} <= _installed_extras((root / "docker" / "Dockerfile").read_text())
    setup = (root / "scripts" / "compose-setup.sh").read_text()
    assert 'extras["stack"]' in setup and 'extras["postgres"]' in setup  # the wheelhouse holds what the image installs
    assert _installed_extras('pip install "/src[postgres]"') == {"postgres"}  # control: the walk sees the old line


NICE_WEIGHT = dict(enumerate((1024, 820, 655, 526, 423, 335, 272, 215, 172, 137,
                              110, 87, 70, 56, 45, 36, 29, 23, 18, 15)))
"""The kernel's CFS weight of nice 0..19 (kernel/sched/core.c, sched_prio_to_weight)."""


def weights_unlike_embedded(doc: dict[str, Any]) -> list[str]:
    """Workers and fake providers whose cgroup weight is not the CFS weight of their embedded niceness:
    nice inside a container ranks only its own processes, so the compose stack carries it in cpu_shares."""
    from stack.priority import NICENESS

    wrong = []
    for name, service in doc["services"].items():
        command = service.get("command") or []
        role = (command[3] if command[:3] == ["python", "-m", "stack.lanes.worker"]
                else "provider" if name in ("ai-provider", "sms-gateway") else None)
        if role is None:
            continue
        want, has = NICE_WEIGHT[NICENESS[role]], service.get("cpu_shares", 1024)
        if has != want:
            wrong.append(f"{name}: cpu_shares {has}, nice {NICENESS[role]} weighs {want}")
    return wrong


def test_workers_and_providers_weigh_as_their_embedded_niceness() -> None:
    doc = load()
    assert weights_unlike_embedded(doc) == []
    assert {s.get("cpu_shares", 1024) for n, s in doc["services"].items() if n.startswith("web-")} == {1024}
    assert doc["services"]["worker-ai-1"]["cpu_shares"] < doc["services"]["worker-merit-1"]["cpu_shares"]


def test_negative_control_a_worker_at_the_default_weight_is_caught() -> None:
    doc = load()
    doc["services"]["worker-ai-1"].pop("cpu_shares")
    doc["services"]["sms-gateway"]["cpu_shares"] = 1024
    assert weights_unlike_embedded(doc) == ["sms-gateway: cpu_shares 1024, nice 10 weighs 110",
                                            "worker-ai-1: cpu_shares 1024, nice 15 weighs 36"]
