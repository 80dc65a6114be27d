"""Embedded runner pieces that start no process: binaries, configs, ports, spec checks."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

import stack.embedded
from stack.embedded import StackError, binaries
from stack.embedded.certs import CertPaths
from stack.embedded.haproxy import write_haproxy_config
from stack.embedded.ports import free_ports
from stack.embedded.stack import EmbeddedStack, StackSpec
from stack.embedded.valkey import write_valkey_config


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


def test_real_binaries_are_found() -> None:
    assert binaries.find_valkey().name == "valkey-server"
    assert binaries.find_haproxy().version[0].isdigit()


def test_valkey_config_is_tls_only_durable_and_noeviction(tmp_path: Path) -> None:
    certs = CertPaths(Path("tls/ca.crt"), Path("tls/server.crt"), Path("tls/server.key"))
    text = write_valkey_config(tmp_path, 7000, certs).read_text().splitlines()
    for line in ["port 0", "tls-port 7000", "tls-auth-clients no", "appendonly yes", "bind 127.0.0.1",
                 "maxmemory 256mb", "maxmemory-policy noeviction"]:
        assert line in text
    cert_line = next(line for line in text if line.startswith("tls-cert-file"))
    assert Path(cert_line.split('"')[1]).is_absolute()  # relative paths break after valkey's chdir


def test_haproxy_config_checks_readyz_and_has_an_admin_socket(tmp_path: Path) -> None:
    config, sock = write_haproxy_config(tmp_path, 9000, {"web_1": 9001, "web_2": 9002})
    text = config.read_text()
    assert f"stats socket {sock} mode 600 level admin" in text
    assert "option httpchk GET /readyz" in text and "option redispatch" in text and "retries 2" in text
    assert "server web_1 127.0.0.1:9001 check" in text and "server web_2 127.0.0.1:9002 check" in text
    assert "daemon" not in text


def test_haproxy_socket_path_too_long_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="too long"):
        write_haproxy_config(tmp_path / ("x" * 120), 9000, {})


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
