"""Embedded runner pieces that start no process: binaries, configs, ports, spec checks."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

import stack.embedded
from stack.embedded import StackError, binaries
from stack.embedded.certs import CertPaths
from stack.embedded.haproxy import remove_admin_socket, write_haproxy_config
from stack.deploy.ports import free_ports
from stack.embedded.stack import EmbeddedStack, StackSpec
from stack.embedded.valkey import write_valkey_config
from stack.valkey_acl import draw_passwords


def _fake_binary(folder: Path, name: str, output: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\necho '{output}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_package_exports_exactly_the_api() -> None:
    assert stack.embedded.__all__ == ["EmbeddedStack", "StackSpec", "StackError"]
    assert stack.embedded.EmbeddedStack is EmbeddedStack


def test_missing_valkey_names_the_debian_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(binaries.BinaryNotFound, match="valkey-server not found: apt-get install -t bookworm-backports valkey-server"):
        binaries.find_valkey()


def test_missing_haproxy_names_the_debian_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(binaries, "SBIN_FALLBACK", "")
    with pytest.raises(binaries.BinaryNotFound, match="haproxy not found: apt-get install haproxy"):
        binaries.find_haproxy()


def test_stack_start_fails_fast_on_a_missing_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    fake = {kind: ["{python}", "-c", "pass"] for kind in ("ai_provider", "sms_gateway", "web", "relay", "worker")}
    stack_ = EmbeddedStack(StackSpec(name="nobin", run_dir=tmp_path / "run", commands=fake))
    with pytest.raises(StackError, match="apt-get install"):
        stack_.start()
    assert not (tmp_path / "run").exists()  # nothing was started or written


def test_redis_7_is_a_fallback_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _fake_binary(tmp_path, "redis-server", "Redis server v=7.2.4 sha=00000000:0 malloc=jemalloc bits=64")
    monkeypatch.setenv("PATH", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="stack.embedded.binaries"):
        found = binaries.find_valkey()
    assert (found.name, found.version) == ("redis-server", "7.2.4")
    assert "valkey-server not found" in caplog.text


def test_redis_6_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_binary(tmp_path, "redis-server", "Redis server v=6.0.16 sha=00000000:0")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(binaries.BinaryNotFound, match="6.0.16.*valkey-server"):
        binaries.find_valkey()


@pytest.mark.integration  # this machine's real valkey-server and haproxy: not for test-fast
def test_real_binaries_are_found() -> None:
    assert binaries.find_valkey().name == "valkey-server"
    assert binaries.find_haproxy().version[0].isdigit()


def test_valkey_config_is_tls_only_durable_and_noeviction(tmp_path: Path) -> None:
    certs = CertPaths(Path("tls/ca.crt"), Path("tls/server.crt"), Path("tls/server.key"))
    passwords = draw_passwords()
    text = write_valkey_config(tmp_path, 7000, certs, passwords=passwords).read_text().splitlines()
    for line in ["port 0", "tls-port 7000", "tls-auth-clients no", "appendonly yes", "bind 127.0.0.1",
                 "maxmemory 256mb", "maxmemory-policy noeviction"]:
        assert line in text
    assert "user default reset off resetpass resetkeys resetchannels -@all" in text
    assert not any(password in line for password in passwords.values() for line in text)  # digests only
    cert_line = next(line for line in text if line.startswith("tls-cert-file"))
    assert Path(cert_line.split('"')[1]).is_absolute()  # relative paths break after valkey's chdir


def test_haproxy_config_checks_readyz_and_has_an_admin_socket(tmp_path: Path) -> None:
    config, sock = write_haproxy_config(tmp_path, 9000, {"web_1": 9001, "web_2": 9002})
    text = config.read_text()
    assert f"stats socket {sock} mode 600 level admin" in text
    assert "option httpchk GET /readyz" in text and "option redispatch" in text and "retries 2" in text
    assert "server web_1 127.0.0.1:9001 check" in text and "server web_2 127.0.0.1:9002 check" in text
    assert "daemon" not in text


def test_haproxy_socket_moves_to_a_short_folder_when_the_run_folder_is_deep(tmp_path: Path) -> None:
    config, socket_path = write_haproxy_config(tmp_path / ("x" * 120), 9000, {})
    try:
        assert len(str(socket_path)) <= 97  # HAProxy refuses longer unix socket paths
        assert f"stats socket {socket_path} " in config.read_text()
        assert (config.parent / "admin.sock.dir").resolve() == socket_path.parent.resolve()
    finally:
        remove_admin_socket(socket_path)
    assert not socket_path.parent.exists()


def test_free_ports_are_distinct() -> None:
    ports = free_ports(20)
    assert len(set(ports)) == 20


@pytest.mark.parametrize(
    ("changes", "message"),
    [({"web": 0}, "at least one web node"), ({"name": "a b"}, "name"),
     ({"settings_overrides": {"nope": 1}}, "unknown settings_overrides"), ({"commands": {"db": ["x"]}}, "kinds")],
)
def test_spec_validation(changes: dict[str, object], message: str) -> None:
    with pytest.raises(StackError, match=message):
        EmbeddedStack(StackSpec(**changes))  # type: ignore[arg-type]


# ---------------------------------------------------------------- links (no process)
def test_link_names_are_validated_with_the_known_ones() -> None:
    from stack.embedded.links import known_links, validate_links

    assert known_links(2) == ["valkey_web", "valkey_workers", "valkey_relay", "ai_provider", "sms_gateway",
                              "valkey_node_1", "valkey_node_2", "web_1", "web_2", "web_*"]
    validate_links(["valkey_web", "web_2", "web_*"], 2)
    with pytest.raises(StackError, match=r"unknown links \['web_0', 'redis'\]; known: valkey_web"):
        validate_links(["web_0", "redis"], 2)
    with pytest.raises(StackError, match="list of names"):
        validate_links("valkey_web", 2)


def test_fault_proxy_backend_choice(tmp_path: Path) -> None:
    import sys

    from stack.embedded.links import choose_backend

    assert choose_backend({"TOXIPROXY_URL": "http://127.0.0.1:8474/", "PATH": ""}) == ("external", "http://127.0.0.1:8474")
    _fake_binary(tmp_path, "toxiproxy-server", "toxiproxy-server version 2.12.0")
    assert choose_backend({"PATH": str(tmp_path)}) == ("toxiproxy-server", str(tmp_path / "toxiproxy-server"))
    assert choose_backend({"PATH": str(tmp_path / "none")}) == ("faultproxy", sys.executable)


def test_link_env_points_consumers_at_their_proxies(tmp_path: Path) -> None:
    from stack.embedded.links import LinkManager

    links = LinkManager(["valkey_workers", "sms_gateway", "web_*"], tmp_path, seed=3, env={"PATH": ""})
    links.plan_services({"valkey": 7001, "ai_provider": 7002, "sms_gateway": 7003})
    links.add("web_4", 7004)
    p = {name: int(link["listen"].rsplit(":", 1)[1]) for name, link in links.links().items()}
    assert sorted(p) == ["sms_gateway", "valkey_workers", "web_4"]
    assert links.env_for("worker", "rediss://127.0.0.1:7001/0", "", "") == {
        "PROCTOR_VALKEY_URL": f"rediss://127.0.0.1:{p['valkey_workers']}/0",
        "PROCTOR_SMS_URL": f"http://127.0.0.1:{p['sms_gateway']}"}
    assert links.env_for("web", "rediss://127.0.0.1:7001/0", "", "") == {}  # valkey_web not requested
    assert links.env_for("relay", "rediss://127.0.0.1:7001/0", "", "") == {}
    argv = links.argv()
    assert argv[1:3] == ["-m", "chaos.faultproxy"] and argv[argv.index("--seed") + 1] == "3"
    import json

    written = json.loads(links.config_path.read_text())
    assert [item["name"] for item in written] == ["sms_gateway", "valkey_workers", "web_4"]
    links.add("web_4", 7005)  # re-pointed (a lost bind race): same listen port
    assert links.links()["web_4"] == {"listen": f"127.0.0.1:{p['web_4']}", "upstream": "127.0.0.1:7005"}
    links.remove("web_4")
    assert "web_4" not in json.dumps(json.loads(links.config_path.read_text()))


def test_down_without_a_supervisor_stops_by_the_manifests_stop_stages(monkeypatch: pytest.MonkeyPatch) -> None:
    from stack.embedded import cli

    signalled: list[int] = []
    monkeypatch.setattr(cli, "is_alive", lambda ident: ident[0] not in signalled)
    monkeypatch.setattr(cli.os, "killpg", lambda pid, sig: signalled.append(pid))
    entries = {"valkey": {"pid": 1, "start_ticks": 9, "stop_stage": 2},
               "sms_gateway": {"pid": 2, "start_ticks": 9, "stop_stage": 1},
               "worker_sms_1": {"pid": 3, "start_ticks": 9, "stop_stage": 0},
               "old_entry": {"pid": 4, "start_ticks": 9}}  # a manifest from before stop_stage: the front
    cli._stop_in_stages({"components": entries}, timeout=3.0)
    assert signalled in ([3, 4, 2, 1], [4, 3, 2, 1])


def test_component_settings_reach_that_component_only_and_unknown_ones_are_named(tmp_path: Path) -> None:
    from stack.config import Settings, load_settings
    from stack.embedded import StackError, StackSpec
    from stack.embedded.links import LinkManager
    from stack.embedded.topology import Topology

    spec = StackSpec(component_settings={"web_1": {"valkey_fresh_connections": True}})
    spec.validate()
    topology = Topology(spec, tmp_path, LinkManager([], tmp_path, seed=3, env={"PATH": ""}))
    settings = Settings(valkey_connect_timeout=0.5)
    fresh, pooled = load_settings(topology.env("web_1", settings)), load_settings(topology.env("web_2", settings))
    assert (fresh.controls.valkey_fresh_connections, pooled.controls.valkey_fresh_connections) == (True, False)
    assert fresh.valkey_connect_timeout == pooled.valkey_connect_timeout == 0.5  # the stack's settings under both
    with pytest.raises(StackError, match=r"component_settings\['web_1'\] \['nope'\]"):
        StackSpec(component_settings={"web_1": {"nope": 1}}).validate()


class _Answer:
    """A one-shot local HTTP server: each GET gets ``status`` (or ``raw`` bytes instead of HTTP)."""

    def __init__(self, status: int = 200, raw: bytes | None = None) -> None:
        import http.server
        import threading

        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.paths.append(self.path)
                if raw is not None:
                    self.wfile.write(raw)
                    return
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.paths: list[str] = []
        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize(("status", "accept", "passes"), [
    (200, "200", True), (204, "200", False), (503, "200", False),
    (401, "not5xx", True), (503, "not5xx", False), (503, "any", True)])
def test_the_http_probe_judges_the_status_by_what_it_accepts(status: int, accept: str, passes: bool) -> None:
    from stack.embedded.spec import http_probe

    server = _Answer(status)
    try:
        assert http_probe(f"{server.url}/readyz?deep=1", accept=accept) is passes
        assert server.paths == ["/readyz?deep=1"]
    finally:
        server.close()


def test_the_http_probe_fails_on_a_closed_port_and_on_a_port_that_does_not_speak_http() -> None:
    from stack.embedded.spec import http_probe

    [port] = free_ports(1)
    assert http_probe(f"http://127.0.0.1:{port}/healthz", accept="any") is False
    server = _Answer(raw=b"+PONG\r\n")  # a Valkey-like answer
    try:
        assert http_probe(f"{server.url}/healthz", accept="any") is False
    finally:
        server.close()
    with pytest.raises(ValueError, match="http:// URL"):
        http_probe("https://127.0.0.1:1/healthz")


def test_component_modules_are_found_without_importing_their_packages(tmp_path: Path) -> None:
    """A stack start checks them; importing stack.providers to do so loaded FastAPI into the supervisor."""
    import subprocess
    import sys

    code = ("import sys; from stack.embedded.spec import missing_component_modules as m; "
            "print(m(), 'fastapi' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["[]", "False"], done
    from stack.embedded import spec

    assert spec._module_source("stack.lanes.worker").name == "worker.py"
    assert spec._module_source("stack.web").name == "__init__.py"  # a package
    assert not spec._module_source("stack.lanes.not_written").exists()
    with pytest.raises(ValueError, match="under stack/"):
        spec._module_source("os.path")


def test_the_supervisors_modules_leave_fastapi_to_the_components_that_serve() -> None:
    """admin_auth once imported FastAPI for its route helper, and the supervisor imports admin_auth."""
    import subprocess
    import sys

    code = ("import sys, stack.embedded.cli, stack.embedded.stack, stack.embedded.control, stack.admin_auth; "
            "print('fastapi' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False", done
