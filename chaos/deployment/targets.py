"""Which deployment a scenario runs against: ``embedded`` (the default: local processes, no
engine needed) or ``compose`` (docker-compose.yml through the docker SDK).

Both adapters are imported only when chosen: the embedded one pulls in the reference
stack, the compose one the ``docker`` SDK.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chaos.runner import Scenario

__all__ = ["DEFAULT_TARGET", "TARGETS", "build_deployment", "check_target", "unsupported_on"]

TARGETS = ("embedded", "compose")
DEFAULT_TARGET = "embedded"


def check_target(target: str) -> str:
    if target not in TARGETS:
        raise ValueError(f"target must be one of {list(TARGETS)}, not {target!r}")
    return target


def _compose_spec(scenario: Scenario, settings: dict[str, Any], run_dir: Path) -> Any:
    from chaos.deployment.compose import ComposeSpec

    shape = {"web": scenario.web, "merit": scenario.merit_workers, "ai": scenario.ai_workers,
             "sms": scenario.sms_workers}
    return ComposeSpec(name=scenario.name, run_dir=run_dir, shape=shape, settings_overrides=settings,
                       links=scenario.links, valkey_maxclients=scenario.valkey_maxclients, valkey=scenario.valkey,
                       sms_egress=scenario.sms_egress, log_shipping=scenario.log_shipping)


def unsupported_on(target: str, scenario: Scenario) -> str | None:
    """Why ``scenario`` cannot run on ``target`` (a skip reason), or None."""
    if check_target(target) == "embedded":
        return None
    if scenario.valkey_min_replicas:
        return "min-replicas-to-write runs on the embedded target only so far (docs/valkey.md)"
    if scenario.valkey_maxmemory:
        return "the memory filler runs on the embedded target only so far (docs/valkey.md)"
    if scenario.component_settings:
        return "settings of single components (component_settings) exist on the embedded target only (docs/valkey.md)"
    if "ledger_lock" in {fault.kind for fault in scenario.faults(0, scenario)}:
        return "the ledger lock is held through the ledger's file, which only the embedded target shares (chaos/nemesis/ledger.py)"
    return _compose_spec(scenario, dict(scenario.settings), Path(".")).unsupported()


def build_deployment(target: str, scenario: Scenario, settings: dict[str, Any], run_dir: Path) -> Any:
    """A ``chaos.deployment.Deployment`` for the scenario's shape, not started yet."""
    if check_target(target) == "compose":
        from chaos.deployment.compose import ComposeDeployment

        return ComposeDeployment(_compose_spec(scenario, settings, run_dir))
    from chaos.deployment.embedded import EmbeddedDeployment
    from stack.embedded import StackSpec

    return EmbeddedDeployment(StackSpec(
        name=scenario.name, web=scenario.web, merit_workers=scenario.merit_workers, ai_workers=scenario.ai_workers,
        sms_workers=scenario.sms_workers, settings_overrides=settings, run_dir=run_dir, links=scenario.links,
        valkey_maxclients=scenario.valkey_maxclients, valkey=scenario.valkey, sms_egress=scenario.sms_egress,
        log_shipping=scenario.log_shipping, valkey_min_replicas=scenario.valkey_min_replicas,
        component_settings=scenario.component_settings,
        **({"maxmemory": scenario.valkey_maxmemory} if scenario.valkey_maxmemory else {})))
