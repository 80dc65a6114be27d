"""SMS egress on compose (issue #26, docs/egress.md "Compose"): the reserved address is a
fixed IP on a network of its own, and the deployment moves it to the standby's container.

The embedded stack gives each SMS "host" a loopback address and the workers bind whichever the
attachment record names. A container has exactly one address per network, and nothing inside
it may add one (no NET_ADMIN), so on compose the address moves the way a cloud re-attaches a
reserved IP: in the engine. An ``egress`` network (``<prefix>.0/24``) carries only SMS
traffic: the gateway at ``.5``, the reserved address ``.10``, SMS worker N's own address
``.(10 + N)`` (the embedded scheme's last octets). Worker 1 starts with the reserved address
(its egress interface carries it), the standby ``worker-sms-2`` (docker-compose.yml, profile
``sms-standby``) with its own. On failover the controller (``stack.deploy.egress``, the same
object as embedded) calls ``EngineAddressMove``: the lost container is disconnected from the
egress network and given its own address back for when it returns; the standby is
disconnected and connected again with ``--ip`` the reserved address. Only then is the record
written, so a worker never binds an address its container lacks. Valkey and the ledger stay
on the project network: the move touches only the SMS path.

The gateway allows exactly ``<reserved>/32`` and the workers send to its egress address, so
the source it records (its effect ledger) is the worker's egress address: the proof. The
gateway's admin forward admits the host's address on both networks: the engine publishes a
port of a container on two networks through either one (the first run's final read was
refused by a forward that admitted the project network's only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stack.deploy.egress import ATTACHMENT_NAME, Attachment

__all__ = ["CONTAINER_UID", "EGRESS_NETWORK", "EGRESS_SERVICES", "STANDBY_PROFILE", "EgressAddresses",
           "EngineAddressMove", "add_egress"]

EGRESS_NETWORK = "egress"
STANDBY_PROFILE = "sms-standby"
EGRESS_SERVICES = ("worker-sms-1", "worker-sms-2")
CONTAINER_UID = 10001  # docker/Dockerfile's `proctor`: the workers read the attachment record as it
_RECORD_DIR = "/srv/egress"
_GATEWAY_PORT = 8102


class EgressAddresses:
    """The egress network's fixed addresses for a ``<a>.<b>.<c>`` prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.host_gateway = f"{prefix}.1"  # the host's side of the network's bridge
        self.gateway = f"{prefix}.5"
        self.reserved = f"{prefix}.10"

    def host(self, component: str) -> str:
        """SMS worker N's own egress address, ``.(10 + N)``."""
        return f"{self.prefix}.{10 + int(component.rsplit('_', 1)[1])}"

    def hosts(self) -> dict[str, str]:
        return {service.replace("-", "_"): self.host(service.replace("-", "_")) for service in EGRESS_SERVICES}

    def network(self) -> dict[str, Any]:
        """Fixed addresses below .128; the engine hands out dynamic ones only above."""
        return {"ipam": {"config": [{"subnet": f"{self.prefix}.0/24", "gateway": self.host_gateway,
                                     "ip_range": f"{self.prefix}.128/25"}]}}


def add_egress(services: dict[str, Any], networks: dict[str, Any], addresses: EgressAddresses, run_dir: Path) -> None:
    """The override's egress part: the network, the gateway on it allowing exactly the reserved
    address, both SMS workers on it (worker 1 holding the reserved address) reading the record."""
    networks[EGRESS_NETWORK] = addresses.network()
    gateway = services.setdefault("sms-gateway", {})
    gateway["networks"] = {"stack": {}, EGRESS_NETWORK: {"ipv4_address": addresses.gateway}}
    gateway.setdefault("environment", {})["PROCTOR_SMS_ALLOWLIST"] = f"{addresses.reserved}/32"
    record = (run_dir / ATTACHMENT_NAME).resolve()
    for service in EGRESS_SERVICES:
        component = service.replace("-", "_")
        start = addresses.reserved if service == EGRESS_SERVICES[0] else addresses.host(component)
        entry = services.setdefault(service, {})
        entry["networks"] = {"stack": {}, EGRESS_NETWORK: {"ipv4_address": start}}
        entry.setdefault("environment", {}).update({
            "PROCTOR_EGRESS_HOST": addresses.host(component),
            "PROCTOR_EGRESS_ATTACHMENT": f"{_RECORD_DIR}/{record.name}",
            "PROCTOR_SMS_URL": f"http://{addresses.gateway}:{_GATEWAY_PORT}",
        })
        entry.setdefault("volumes", []).append(f"{record.parent}:{_RECORD_DIR}:ro")  # a folder: the record is replaced


class EngineAddressMove:
    """``FailoverController.move`` on compose: re-attach the reserved address in the engine.

    ``api`` is a ``docker.APIClient`` of the controller's own (its thread polls beside the
    nemesis's client); ``container`` maps a component to its container id."""

    def __init__(self, api: Any, network: str, addresses: EgressAddresses, container: Any) -> None:
        self.api = api
        self.network = network
        self.addresses = addresses
        self.container = container
        self.moves: list[dict[str, Any]] = []

    def __call__(self, current: Attachment, new: Attachment) -> None:
        if new.address_holder == current.address_holder or new.address_holder is None:
            return  # the policy left the address where it was (the negative control)
        if current.address_holder is not None:
            self._attach(current.address_holder, self.addresses.host(current.address_holder))
        self._attach(new.address_holder, self.addresses.reserved)
        self.moves.append({"from": current.address_holder, "to": new.address_holder, "reserved": self.addresses.reserved})

    def _attach(self, component: str, address: str) -> None:
        """Give ``component``'s container ``address`` on the egress network (stopped or running)."""
        container = self.container(component)
        self.api.disconnect_container_from_network(container, self.network, force=True)
        self.api.connect_container_to_network(container, self.network, ipv4_address=address)
