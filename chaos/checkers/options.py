"""Every checker's options in one value: what ``run_checkers`` hands to each checker.

Each checker declares its own options beside it (a frozen dataclass mixing in
``CheckerOptions``, keys declared with ``option(...)``: chaos/checkers/base.py). This
class inherits them all, so it parses scenario.json's "options" object, reports unknown
keys, dumps itself for report.json and renders the report's option lines without
naming a single key; each checker takes it as its own options class.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from chaos.checkers.ailane import AiLaneOptions, declared_ai_limit, declared_time_scale
from chaos.checkers.connections import ConnectionsOptions
from chaos.checkers.effects import EffectsOptions
from chaos.checkers.egress import EgressOptions, declared_recovery
from chaos.checkers.logship import LogshipOptions
from chaos.checkers.faults import FaultsOptions, declared_faults
from chaos.checkers.jobs import JobsOptions
from chaos.checkers.latency import LatencyOptions
from chaos.checkers.stats import StatsOptions

__all__ = ["CheckOptions"]


@dataclass(frozen=True)
class CheckOptions(LogshipOptions, EgressOptions, AiLaneOptions, ConnectionsOptions, LatencyOptions, JobsOptions, EffectsOptions, FaultsOptions, StatsOptions):
    """The "options" object of scenario.json plus its declared faults; defaults are the strict choice.
    A new checker with options adds its options class to the bases: fields come in reverse
    order of the bases, so this list runs against CHECKERS' order to keep report.md in it."""

    @classmethod
    def from_scenario(cls, scenario: Mapping[str, Any]) -> "CheckOptions":
        """The options of a scenario.json document, plus its declared faults."""
        options = cls.from_dict(scenario.get("options"))
        return replace(options, declared_faults=declared_faults(scenario.get("faults")),
                       time_scale=declared_time_scale(scenario), ai_calls_per_minute=declared_ai_limit(scenario),
                       in_flight_recovery=declared_recovery(scenario))
