"""The fault proxy in the compose network (chaos/deployment/compose_links.py) without an engine:
the override adds it, publishes its API and Valkey on 127.0.0.1 only, points exactly the consumers
of the requested links at it (the embedded runner's table), holds no secret, sets maxclients only
when asked; the adapter offers the embedded ``links``/``urls`` interface; the churn generator
authenticates when Valkey has a password."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from chaos.load.churn import ChurnSpec, run_churn
from chaos.deployment.compose import ComposeDeployment, ComposeSpec
from chaos.deployment.compose_engine import Engine, EngineError
from chaos.deployment.compose_files import PYTHON_SERVICES, component_for_service, override_document, valkey_entry
from chaos.deployment.compose_links import add_links, consumer_env, link_ports, populate_items
from stack.embedded.links import FIXED_LINKS, LINKS_OF_ROLE, LinkManager
from stack.deploy.provision import compose_secrets, write_compose_secrets

VALKEY_LINKS = ("valkey_web", "valkey_workers", "valkey_relay")
ROLES = {s: c.role for s in PYTHON_SERVICES if (c := component_for_service(s)) is not None}


def _override(tmp_path: Path, links: tuple[str, ...], maxclients: int | None = None) -> dict[str, Any]:
    doc = override_document({}, {"ai-provider": 18101, "sms-gateway": 18102}, tmp_path, tmp_path / "connections",
                            valkey_entry(16999, maxclients))
    add_links(doc["services"], ROLES, link_ports(links), 18474, tmp_path / "proxies.json", seed=7)
    return doc["services"]


def _proxied(services: dict[str, Any]) -> dict[str, dict[str, str]]:
    """service -> the variables that point at the proxy."""
    return {name: {k: v for k, v in s.get("environment", {}).items() if "faultproxy:" in v}
            for name, s in services.items() if name in PYTHON_SERVICES}


def test_valkey_links_add_the_proxy_and_point_every_valkey_consumer_at_it(tmp_path: Path) -> None:
    services = _override(tmp_path, VALKEY_LINKS)
    proxy = services["faultproxy"]
    assert proxy["ports"] == ["127.0.0.1:18474:8474"] and proxy["networks"] == ["stack"]
    assert proxy["command"][:3] == ["python", "-m", "chaos.faultproxy"]
    proxied = _proxied(services)
    for service in ("web-1", "web-2", "relay", "worker-merit-1", "worker-merit-2", "worker-ai-1", "worker-sms-1"):
        assert set(proxied[service]) == {"PROCTOR_VALKEY_URL"}, service
        assert services[service]["depends_on"] == {"faultproxy": {"condition": "service_healthy"}}, service
    assert proxied["web-1"]["PROCTOR_VALKEY_URL"] == "rediss://faultproxy:16381/0"
    assert proxied["ai-provider"] == {} and "depends_on" not in services["ai-provider"]


def test_a_consumer_of_a_link_not_requested_stays_direct(tmp_path: Path) -> None:
    services = _override(tmp_path, ("valkey_web", "sms_gateway"))
    proxied = _proxied(services)
    assert proxied["web-2"] == {"PROCTOR_VALKEY_URL": "rediss://faultproxy:16381/0"}
    assert proxied["worker-sms-1"] == {"PROCTOR_SMS_URL": "http://faultproxy:16380"}  # its Valkey stays direct
    assert proxied["relay"] == {} and "depends_on" not in services["relay"]
    assert "faultproxy" not in _override(tmp_path, ())  # the control: no links, no proxy at all


def test_consumers_come_from_the_embedded_runners_own_table(tmp_path: Path) -> None:
    links = tuple(FIXED_LINKS)
    embedded = LinkManager(links, tmp_path, seed=1, env={"PATH": ""})
    for name in links:
        embedded.add(name, 1, push=False)
    ports = link_ports(links)
    for role in (*LINKS_OF_ROLE, "ai_provider", "haproxy"):
        direct = embedded.env_for(role, "rediss://127.0.0.1:1/0", "http://127.0.0.1:2", "http://127.0.0.1:3")
        assert set(consumer_env(role, ports)) == set(direct), role


def test_the_proxies_reach_the_services_by_their_compose_names() -> None:
    items = populate_items(link_ports(("ai_provider", "valkey_relay")))
    assert items == [
        {"name": "ai_provider", "listen": "0.0.0.0:16380", "upstream": "ai-provider:8101", "enabled": True},
        {"name": "valkey_relay", "listen": "0.0.0.0:16381", "upstream": "valkey:6380", "enabled": True}]


def test_published_only_on_loopback_no_secret_and_maxclients_only_when_asked(tmp_path: Path) -> None:
    services = _override(tmp_path, VALKEY_LINKS)
    published = sorted(p for s in services.values() for p in s.get("ports", []))
    assert published == ["127.0.0.1:16999:6380", "127.0.0.1:18101:9101", "127.0.0.1:18102:9101",
                         "127.0.0.1:18474:8474"]
    assert "environment" not in services["valkey"]
    # crashes restart as under the embedded supervisor (an engine kill does not: docs/compose.md)
    assert {services[s]["restart"] for s in (*PYTHON_SERVICES, "faultproxy")} == {"on-failure"}
    text = json.dumps(services)
    for name, value in compose_secrets().items():  # fresh secrets: none can be in a file made without them
        assert value not in text, name
    assert "@faultproxy" not in text and services["faultproxy"]["env_file"] == ["${PROCTOR_COMPOSE_RUN:-.compose/run}/faultproxy.env"]
    assert _override(tmp_path, (), maxclients=12)["valkey"]["environment"] == {"PROCTOR_VALKEY_MAXCLIENTS": "12"}
    with pytest.raises(ValueError, match="valkey_maxclients must be a whole number >= 1, not 0"):
        valkey_entry(16999, 0)


def test_the_adapter_offers_the_embedded_links_and_urls(tmp_path: Path) -> None:
    deployment = ComposeDeployment(ComposeSpec("l", tmp_path, links=("valkey_web",)))
    assert deployment.links() == {"valkey_web": {"listen": "faultproxy:16380", "upstream": "valkey:6380"}}
    write_compose_secrets(deployment.compose_dir / "proctor.env")
    credential = (deployment.compose_dir / "faultproxy.env").read_text().strip().split("=", 1)[1]
    harness = dict(line.split("=", 1) for line in (deployment.compose_dir / "valkey-harness.env").read_text().splitlines())
    urls = deployment.urls
    assert urls["faultproxy"].startswith(f"http://{credential}@127.0.0.1:")  # the nemesis sends it as Basic
    assert urls["valkey"].startswith("rediss://127.0.0.1:") and urls["valkey"].endswith("/0")
    assert (deployment.settings.valkey_user, deployment.settings.valkey_password) == ("harness", harness["PROCTOR_VALKEY_PASSWORD"])
    assert deployment.settings.valkey_ca == ""  # the CA is not copied yet
    (deployment.compose_dir / "ca.crt").write_text("ca")
    assert deployment.settings.valkey_ca == str(deployment.compose_dir / "ca.crt")
    assert "faultproxy" not in ComposeDeployment(ComposeSpec("n", tmp_path / "n")).urls  # the control


class _ArchiveApi:
    def __init__(self, member: tarfile.TarInfo, data: bytes) -> None:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            archive.addfile(member, io.BytesIO(data) if member.isfile() else None)
        self.archive = buffer.getvalue()

    def containers(self, all: bool, filters: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"Id": "id-valkey", "Labels": {"com.docker.compose.service": "valkey"}}]

    def get_archive(self, cid: str, path: str) -> tuple[list[bytes], dict[str, Any]]:
        assert (cid, path) == ("id-valkey", "/certs/ca.crt")
        return [self.archive[:100], self.archive[100:]], {}


def _engine(member: tarfile.TarInfo, data: bytes = b"") -> Engine:
    client = type("Client", (), {"api": _ArchiveApi(member, data)})()
    return Engine("p1", client)


def test_a_file_is_read_out_of_a_container() -> None:
    member = tarfile.TarInfo("ca.crt")
    member.size = 6
    assert _engine(member, b"-CERT-").read_file("valkey", "/certs/ca.crt") == b"-CERT-"
    folder = tarfile.TarInfo("ca.crt")
    folder.type = tarfile.DIRTYPE
    with pytest.raises(EngineError, match="valkey:/certs/ca.crt is not a regular file"):
        _engine(folder).read_file("valkey", "/certs/ca.crt")


def _auth_server_churn(password: str) -> dict:
    """A server that answers like Valkey with requirepass "pw": NOAUTH until AUTH pw."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read(1024)
        authed = data.startswith(b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n")
        replies = [b"+OK\r\n"] if authed else []
        replies += [b"+OK\r\n", b"+PONG\r\n"] if authed else [b"-NOAUTH Authentication required.\r\n"] * 2
        writer.write(b"".join(replies))
        await writer.drain()
        writer.close()

    async def main() -> dict:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        # concurrency = max_ops: none is skipped; timeouts far above a local reply, even on a loaded machine
        spec = ChurnSpec(rate=50.0, duration=5.0, max_ops=5, concurrency=5, connect_timeout=10.0, socket_timeout=10.0)
        async with server:
            return await run_churn("127.0.0.1", server.sockets[0].getsockname()[1], None, spec, None,
                                   asyncio.Event(), password)

    return asyncio.run(main())


def test_churn_authenticates_when_valkey_has_a_password() -> None:
    authed = _auth_server_churn("pw")
    assert authed["outcomes"]["ok"] == authed["ops"] == 5, authed["outcomes"]
    refused = _auth_server_churn("")  # the control: without AUTH every op is refused
    assert refused["outcomes"]["error"] == refused["ops"] == 5, refused["outcomes"]
